"""Every shell script in the repository passes shellcheck (Debian's; `make tools` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ._support import ENGINE_DIR, ROOT

SKIP_DIRS = {".git", "node_modules", "build", "dist"}
OURS = [
    ENGINE_DIR / "build_docker_vllm.sh",
    ENGINE_DIR / "build_docker_vllm_openvino.sh",
    ENGINE_DIR / "build_docker_engine.sh",
    ENGINE_DIR / "launch_vllm_service.sh",
    ENGINE_DIR / "launch_vllm_service_openvino.sh",
    ENGINE_DIR / "launch_engine_service.sh",
    ROOT / "scripts" / "vllm_cpu_setup.sh",
    ROOT / "scripts" / "vllm_cpu_test.sh",
    ROOT / "scripts" / "llama_cpp_build.sh",
]


def shell_scripts() -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".venv")]
        found += [Path(dirpath) / name for name in filenames if name.endswith(".sh")]
    return sorted(found)


def test_every_script_is_found() -> None:
    scripts = shell_scripts()
    for script in OURS:
        assert script in scripts


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: run 'make tools' (Debian package shellcheck)"
    scripts = [str(p.relative_to(ROOT)) for p in shell_scripts()]
    proc = subprocess.run(
        [shellcheck, "--external-sources", "--severity=style", *scripts],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", OURS, ids=lambda p: p.name)
def test_script_header(script: Path) -> None:
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines[:20]
    assert os.access(script, os.X_OK), f"{script} is not executable"
