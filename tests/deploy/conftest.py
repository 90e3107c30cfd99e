"""Fixtures for the deployment tests: run a script with DRY_RUN=1 in a clean environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ._support import Result, RunScript, clean_env


@pytest.fixture
def run_script(tmp_path: Path) -> RunScript:
    """``run_script(path, *args, dry_run=True, **env)`` runs a bash script, by default with DRY_RUN=1."""

    def run(script: Path, *args: str, dry_run: bool = True, **env: str) -> Result:
        full_env = clean_env(tmp_path)
        if dry_run:
            full_env["DRY_RUN"] = "1"
        full_env.update(env)
        proc = subprocess.run(
            ["bash", str(script), *args], env=full_env, capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run
