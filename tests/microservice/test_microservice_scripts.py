"""The Docker helper scripts, checked with DRY_RUN=1 (no Docker engine needed)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "services" / "llm-microservice"
BUILD = HERE / "build_docker_microservice.sh"
LAUNCH = HERE / "launch_microservice.sh"
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
for _name in ("LLM_ENDPOINT", "vLLM_ENDPOINT", "LLM_MODEL_ID", "LLM_MODEL", "OPENAI_API_KEY", "PORT", "IMAGE"):
    CLEAN_ENV.pop(_name, None)


def run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        env={**CLEAN_ENV, "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("script", [BUILD, LAUNCH], ids=["build", "launch"])
def test_help_and_strict_mode(script: Path) -> None:
    helped = run(script, "--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("Usage:")
    assert "set -euo pipefail" in script.read_text()
    bogus = run(script, "--bogus")
    assert bogus.returncode == 2
    assert "unknown argument" in bogus.stderr


def test_build_dry_run_prints_the_docker_build() -> None:
    out = run(BUILD, "--tag", "opea/llm-genmesh:test", "--no-cache", http_proxy="http://proxy:3128")
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert argv[:3] == ["docker", "build", "--no-cache"]
    assert argv[argv.index("-f") + 1] == str(HERE.parent / "Dockerfile")
    assert argv[argv.index("-t") + 1] == "opea/llm-genmesh:test"
    build_args = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--build-arg"]
    assert build_args == ["SERVICE=microservice", "http_proxy"]
    assert argv[-1] == str(HERE.parents[1])


def test_launch_dry_run_uses_the_opea_legacy_variables() -> None:
    out = run(LAUNCH, vLLM_ENDPOINT="http://10.0.0.5:8008", LLM_MODEL="meta-llama/Meta-Llama-3-8B-Instruct")
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout) == [
        *("docker", "run", "-d", "--rm", "--name", "llm-genmesh-server", "-p", "9000:9000", "--ipc=host"),
        *("-e", "LLM_ENDPOINT=http://10.0.0.5:8008", "-e", "LLM_MODEL_ID=meta-llama/Meta-Llama-3-8B-Instruct"),
        "opea/llm-genmesh:latest",
    ]


def test_launch_flags_override_and_the_key_is_passed_by_name() -> None:
    out = run(
        LAUNCH,
        *("--endpoint", "http://engine:8008", "--port", "9100", "--name", "ms2", "--image", "me/ms:1"),
        LLM_ENDPOINT="http://ignored:1",
        OPENAI_API_KEY="sk-secret",
    )
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert "LLM_ENDPOINT=http://engine:8008" in argv
    assert argv[argv.index("-p") + 1] == "9100:9000"
    assert argv[argv.index("--name") + 1] == "ms2"
    assert argv[-1] == "me/ms:1"
    assert "OPENAI_API_KEY" in argv
    assert "sk-secret" not in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no engine URL"),
        (("--endpoint", "engine:8008"), "not an http(s) URL"),
        (("--endpoint", "http://e:1", "--port", "0"), "port"),
        (("--endpoint", "http://e:1", "--port", "abc"), "port"),
        (("--endpoint", "http://e:1", "--port"), "needs a value"),
        (("--endpoint", "http://e:1", "--name", "bad name"), "container name"),
    ],
)
def test_launch_refuses_bad_arguments(args: tuple[str, ...], message: str) -> None:
    out = run(LAUNCH, *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stdout == ""
