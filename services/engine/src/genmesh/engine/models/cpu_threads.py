"""How many threads OpenVINO's CPU plugin will infer on: the fewer of what the plugin config asks
(``INFERENCE_NUM_THREADS``) and the CPUs the process may run on (its affinity mask, as ``taskset``,
a Kubernetes static CPU policy and the native launcher's replicas set it).

A cgroup CPU quota (a container's or a pod's CPU limit without pinning) is not counted: OpenVINO
2026.4.1 ignores it (a one-CPU cfs quota on a two-CPU machine: the compiled model reports
``INFERENCE_NUM_THREADS`` 2), so a quota alone never leads to one inference thread.

The file read is a parameter (``CpuFiles``), so tests point it at a file of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NUM_THREADS = "INFERENCE_NUM_THREADS"


@dataclass(frozen=True)
class CpuFiles:
    cpuinfo: Path = Path("/proc/cpuinfo")


LINUX = CpuFiles()  # this machine's


@dataclass(frozen=True)
class ThreadLimit:
    threads: int  # 0: no limit known (OpenVINO picks)
    source: str  # what sets it, for log lines: "INFERENCE_NUM_THREADS=1", "CPU affinity (1 CPU)", ...


def configured_threads(plugin_config: Mapping[str, Any]) -> int | None:
    """``INFERENCE_NUM_THREADS`` when it is a positive count (0 or unset: OpenVINO decides)."""
    try:
        n = int(plugin_config.get(NUM_THREADS, 0))
    except (TypeError, ValueError):
        return None  # OpenVINO refuses it when it compiles; nothing to decide from
    return n if n > 0 else None


def affinity_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def inference_threads(plugin_config: Mapping[str, Any], cpus: int | None) -> ThreadLimit:
    """The fewer threads either allows (``cpus``: the affinity mask's size)."""
    limits: list[ThreadLimit] = []
    if (n := configured_threads(plugin_config)) is not None:
        limits.append(ThreadLimit(n, f"{NUM_THREADS}={n}"))
    if cpus:
        limits.append(ThreadLimit(cpus, f"CPU affinity ({cpus} CPU{'s' if cpus > 1 else ''})"))
    return min(limits, key=lambda t: t.threads) if limits else ThreadLimit(0, "no limit")


def cpu_flags(files: CpuFiles = LINUX) -> frozenset[str]:
    """The first CPU's feature flags (/proc/cpuinfo ``flags``; empty where there is none)."""
    try:
        text = files.cpuinfo.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()
