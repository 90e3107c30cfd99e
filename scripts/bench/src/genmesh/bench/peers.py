"""The peers of the report: vLLM-CPU, llama.cpp's ``llama-server``, and OPEA's text-generation microservice.

Each :class:`Peer` knows whether it can run on this machine (and if not, exactly why: the report
prints that note instead of a line; nothing is ever faked), how to start it with its best-known
CPU settings, and those settings in words for the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .server import ManagedServer, free_port, http_ok

ROOT = Path.cwd()
VLLM_VENV = Path(".venv-vllm")
VLLM_MODEL = Path("models/SmolLM2-135M-Instruct-hf")
LLAMA_SERVER = Path(".cache/llama.cpp/bin/llama-server")
LLAMA_VERSION_FILE = Path(".cache/llama.cpp/VERSION")

OPEA_NOTE = (
    "skipped: `pip download opea-comps` (1.5, PyPI) gives only `comps/cores` (the microservice framework: "
    "`micro_service`, `orchestrator`, `api_protocol`), not the text-generation component "
    "`comps/llms/src/text-generation`, which OPEA ships only in the GenAIComps git repository and the "
    "`opea/llm-textgen` Docker image; neither GitHub nor Docker is reachable on this machine, and the wheel pins "
    "exact versions of ~90 packages (fastapi 0.124, langchain 0.3) that conflict with this environment."
)


@dataclass
class Peer:
    key: str
    label: str
    settings: str
    available: bool
    note: str = ""
    version: str = ""
    start_timeout_s: float = 300.0
    extra_args: list[str] = field(default_factory=list)


def vllm_version(venv: Path = VLLM_VENV) -> str | None:
    for site in venv.glob("lib/python*/site-packages"):
        for dist in sorted(site.glob("vllm_cpu-*.dist-info")) + sorted(site.glob("vllm-*.dist-info")):
            return dist.name.removesuffix(".dist-info").replace("_cpu-", "-cpu ").replace("-", " ", 1)
    return None


def vllm_peer(kv_cache_gb: int = 2, max_num_seqs: int = 256) -> Peer:
    version = vllm_version()
    settings = (
        f"OpenAI server (`services/engine/launch_vllm_service.sh`, RUNTIME=native), bf16 weights converted from the "
        f"same GGUF, `VLLM_CPU_KVCACHE_SPACE={kv_cache_gb}`, `--max-num-seqs {max_num_seqs}`, `--block-size 128`, "
        "chunked prefill and prefix caching as vLLM v1 defaults"
    )
    if version is None:
        return Peer("vllm", "(e) vLLM-CPU", settings, False, "skipped: no vLLM-CPU in .venv-vllm (run `make vllm-cpu`)")
    if not VLLM_MODEL.is_dir():
        return Peer("vllm", "(e) vLLM-CPU", settings, False, f"skipped: {VLLM_MODEL} missing (run `make vllm-cpu`)")
    return Peer("vllm", "(e) vLLM-CPU", settings, True, version=version, start_timeout_s=900.0)


def start_vllm(log_path: Path, model_name: str, kv_cache_gb: int = 2, max_num_seqs: int = 256) -> ManagedServer:
    port = free_port()
    argv = ["services/engine/launch_vllm_service.sh", str(port), str(VLLM_MODEL), "cpu", "1", "128", str(max_num_seqs)]
    env = {
        "RUNTIME": "native",
        "SERVED_MODEL_NAME": model_name,
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "VLLM_VENV": str(VLLM_VENV.resolve()),
    }
    url = f"http://127.0.0.1:{port}"
    return ManagedServer.start("vllm", argv, url, http_ok(url + "/health"), log_path, env=env, timeout_s=900.0)


def llama_version() -> str | None:
    if not LLAMA_SERVER.is_file() or not os.access(LLAMA_SERVER, os.X_OK):
        return None
    try:
        return LLAMA_VERSION_FILE.read_text().strip()
    except OSError:
        return "unknown version"


def llama_peer(cache_prompt: bool, parallel: int, threads: int) -> Peer:
    version = llama_version()
    label = "(f) llama-server" + ("" if cache_prompt else " --no-cache-prompt")
    flags = f"`-np {parallel} -t {threads} --no-repack -c {parallel * 1024}`" + (
        "" if cache_prompt else " `--no-cache-prompt`"
    )
    settings = f"llama.cpp's own server on the same GGUF (Q4_1), {flags}, built with `-DGGML_NATIVE=ON`; " + (
        "prompt cache on (its default)" if cache_prompt else "prompt cache off (our engine's prefix caching is off too)"
    )
    key = "llama" if cache_prompt else "llama-nocache"
    if version is None:
        return Peer(
            key, label, settings, False, f"skipped: no {LLAMA_SERVER} (run `scripts/llama_cpp_build.sh`, ~12 min)"
        )
    return Peer(key, label, settings, True, version=version)


def start_llama(
    log_path: Path, model: str, model_name: str, cache_prompt: bool, parallel: int, threads: int
) -> ManagedServer:
    port = free_port()
    argv = [str(LLAMA_SERVER), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-a", model_name]
    argv += ["-np", str(parallel), "-t", str(threads), "--no-repack", "-c", str(parallel * 1024)]
    if not cache_prompt:
        argv.append("--no-cache-prompt")
    url = f"http://127.0.0.1:{port}"
    return ManagedServer.start("llama-server", argv, url, http_ok(url + "/health"), log_path, timeout_s=120.0)
