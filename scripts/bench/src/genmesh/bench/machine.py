"""What the report states about the machine and the software: CPU model, cores, memory, versions, commit."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        # the report's own outputs (docs/) do not make the measured code dirty
        status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"]
        dirty = subprocess.run(status, capture_output=True, text=True)
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, str]:
    mem = memory_gib()
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": "-" if mem is None else f"{mem:.1f} GiB",
        "os": platform.platform(),
        "python": platform.python_version(),
        "openvino-genai": package_version("openvino-genai"),
        "genmesh commit": git_commit(),
    }
