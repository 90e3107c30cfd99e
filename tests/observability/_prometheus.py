"""Debian's Prometheus and promtool for the observability tests (``make tools`` installs them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OBSERVABILITY = ROOT / "deploy" / "observability"
PROMETHEUS_DIR = OBSERVABILITY / "prometheus"
RULES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "genmesh.json"


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"no {name}: run 'make tools' (installs Debian's prometheus package)")
    return path


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
