"""A Hugging Face model folder as an OpenVINO IR folder: ``optimum-cli export openvino``.

optimum-intel needs torch, which this environment does not hold by default (PyPI's torch
wheel brings ~3 GB of CUDA libraries): ``make export-hf`` adds it to ``.venv-export``.
optimum-cli compresses the weights with NNCF and writes the tokenizer IRs (openvino-tokenizers)
with the chat template itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .compress import INT4_GROUP_SIZE, WeightFormat
from .steps import ExportError, Steps


def optimum_cli() -> str:
    beside = Path(sys.executable).parent / "optimum-cli"
    found = str(beside) if beside.is_file() else shutil.which("optimum-cli")
    if found is None:
        raise ExportError(
            "a Hugging Face folder is exported with optimum-intel, which is not installed here: "
            "run 'make export-hf' (adds optimum-intel and torch to .venv-export)"
        )
    return found


def ir_from_hf(src: Path, weight_format: WeightFormat, scratch: Path, steps: Steps) -> Path:
    """A temporary folder under ``scratch`` holding ``src`` exported and compressed."""
    if not (src / "config.json").is_file():
        raise ExportError(f"{src} is not a Hugging Face model folder (no config.json)")
    out = Path(tempfile.mkdtemp(prefix=".optimum-", dir=scratch))
    cmd = [optimum_cli(), "export", "openvino", "--model", str(src), "--task", "text-generation-with-past"]
    cmd += ["--weight-format", weight_format]
    if weight_format == "int4":
        cmd += ["--group-size", str(INT4_GROUP_SIZE), "--ratio", "1.0"]
    cmd.append(str(out))
    steps.say("running " + " ".join(cmd))
    if subprocess.run(cmd, check=False).returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise ExportError(f"optimum-cli could not export {src} (its output above says why)")
    return out
