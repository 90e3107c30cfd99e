"""The engine core process holds no web code: ``step()`` holds the GIL, and the core does nothing
but step, so FastAPI, uvicorn and the HTTP client libraries have no business there.

The core is spawned (multiprocessing's ``spawn``): the child imports the target's module,
``genmesh.engine.core.step_loop``, and runs the parent's ``__main__`` again, which for the console script
``genmesh-engine`` imports ``genmesh.engine.cli``. Each is imported here in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

WEB = ("fastapi", "uvicorn", "starlette", "httpx", "aiohttp", "sse_starlette")

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after_import(module: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("module", ["genmesh.engine.core.step_loop", "genmesh.engine.cli"])
def test_the_core_process_imports_no_web_framework(module: str) -> None:
    loaded = loaded_after_import(module)
    assert module in loaded
    web = sorted(name for name in loaded if name.split(".")[0] in WEB)
    assert web == [], f"importing {module} loads {web}"


def test_the_wire_models_import_no_web_framework() -> None:
    loaded = loaded_after_import("genmesh.protocol")
    assert "genmesh.protocol.chat" in loaded
    assert not any(name.split(".")[0] in WEB for name in loaded)
    assert not any(name.startswith("genmesh.protocol.server") for name in loaded)


def test_the_probe_sees_a_web_import() -> None:
    # The check itself can fail: the API process's app does load FastAPI.
    assert "fastapi" in loaded_after_import("genmesh.engine.openai.app")


@pytest.mark.parametrize("module", ["genmesh.engine.core.step_loop", "genmesh.engine.cli"])
def test_the_core_process_imports_openvino_only_in_run_core(module: str) -> None:
    # run_core sets ONEDNN_MAX_CPU_ISA (--max-cpu-isa, the one-thread AMX guard) before it imports
    # OpenVINO; oneDNN would not see it if anything had loaded OpenVINO before.
    loaded = loaded_after_import(module)
    assert module in loaded
    assert sorted(name for name in loaded if name.split(".")[0].startswith("openvino")) == []


def test_the_probe_sees_openvino() -> None:
    assert "openvino" in loaded_after_import("openvino_genai")
