"""genmesh-export as the tests run it: the real console script in .venv-export (make export-venv)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.servers import DEFAULT_MODEL, ROOT

EXPORT_VENV = ROOT / ".venv-export"
GENMESH_EXPORT = EXPORT_VENV / "bin" / "genmesh-export"
IR_NAME = "smol-int8"  # the session's int8 export of the default model (tests/conftest.py)
GGUF_NAME = "smol"  # the GGUF it came from, served beside it
EXPORT_TIMEOUT_S = 600.0  # the first export of the default model takes ~30 s on 2 cores; later ones reuse the cache


def run_export(repo: Path, name: str, *extra: str, source: Path = DEFAULT_MODEL) -> subprocess.CompletedProcess[str]:
    assert GENMESH_EXPORT.is_file(), "run 'make export-venv' first (make test does it)"
    argv = [str(GENMESH_EXPORT), "text_generation", "--source_model", str(source)]
    argv += ["--model_repository_path", str(repo), "--config_file_path", str(repo / "config.json")]
    argv += ["--model_name", name, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, cwd=ROOT, check=False)
