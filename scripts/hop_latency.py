"""What each hop adds to one request, sent one at a time: TTFT and each process's CPU (issue 55, item 6).

    .venv/bin/python scripts/hop_latency.py LABEL [REQUESTS] [MAX_TOKENS]

Starts the engine, the microservice, Redis and the gateway (``genmesh.bench.servers.running_mesh``, the gateway's
background slowed as ``hop_cpu.py``'s ``HOP_CPU_QUIET`` does), warms each up, then sends REQUESTS (default 60)
streamed chat requests of MAX_TOKENS tokens (default 4) one at a time, each to the engine, the microservice and
the gateway in turn (the order rotates per request; each prompt is sent to every engine once untimed first, so
that every target finds it in the prefix cache and none pays its prefill). Per target: TTFT p50 and, per request,
the CPU that the
gateway, the microservice and the engine's API process spent while it ran (``/proc/<pid>/task/*/schedstat``,
nanoseconds). CPU is what a hop does per request whatever else the machine runs; TTFT differences need a quiet
machine. Writes ``bench-results/hop-latency-LABEL.json``.

``HOP_LATENCY_UPSTREAM=fake``: the engine is the gateway tests' fake upstream (``tests/support/fake_upstream.py``,
no model, its tokens at once), so a hop's own latency is not lost in the engine's jitter (a few ms per request).

Older code beside this one: ``HOP_LATENCY_BASE=/old/services/engine/src:/old/services/gateway/src:...`` (that
checkout's ``services/*/src``) starts a second mesh whose servers run that code, and its three targets
(``base-engine``, ...) join the rotation, so both are measured request by request under the same load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from genmesh.bench.datasets import RequestSpec, chat_batch
from genmesh.bench.hops import FAKE_UPSTREAM
from genmesh.bench.load import Endpoint, send, session
from genmesh.bench.servers import MODEL_NAME, PORT, Mesh, running_mesh, start, start_gateway
from hop_cpu import QUIET, cpu_s

MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"


async def one_at_a_time(targets: dict[str, Endpoint], pids: dict[str, int], n: int, max_tokens: int) -> dict[str, Any]:
    ttft: dict[str, list[float]] = {t: [] for t in targets}
    cpu: dict[str, dict[str, list[float]]] = {t: {p: [] for p in pids} for t in targets}
    names = list(targets)
    clients = {t: session(e.base_url, 1) for t, e in targets.items()}
    try:
        warm = [RequestSpec(r.prompt, 0, max_tokens) for r in chat_batch(8, max_tokens)]
        for req in warm:  # every prompt path and connection warm
            for t, e in targets.items():
                await send(clients[t], e, req)
        engines = [t for t in names if t.endswith("engine")]
        for i, req in enumerate(chat_batch(n, max_tokens)):
            for t in engines:  # the prompt in each engine's prefix cache first: every target then finds it there
                await send(clients[t], targets[t], req)
            for t in names[i % len(names) :] + names[: i % len(names)]:
                before = {p: cpu_s(pid) for p, pid in pids.items()}
                out = await send(clients[t], targets[t], req)
                after = {p: cpu_s(pid) for p, pid in pids.items()}
                if out.ttft_s is not None and out.success:
                    ttft[t].append(1000 * out.ttft_s)
                    for p in pids:
                        cpu[t][p].append(1000 * (after[p] - before[p]))
    finally:
        for c in clients.values():
            await c.close()
    return {
        t: {
            "ok": len(ttft[t]),
            "ttft_ms_p50": round(statistics.median(ttft[t]), 2),
            "cpu_ms_p50": {p: round(statistics.median(v), 3) for p, v in cpu[t].items()},
        }
        for t in targets
    }


@contextlib.contextmanager
def fake_mesh(log_dir: Path) -> Iterator[Mesh]:
    """The microservice and the gateway (with its Redis) in front of the fake upstream."""
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, str(FAKE_UPSTREAM), "--port", PORT, "--delay-ms", "0"]
        fake = stack.enter_context(start("engine", argv, log_dir / "fake.log", 30.0))
        argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", fake.url, "--port", PORT]
        ms = stack.enter_context(
            start("microservice", [*argv, "--log-level", "warning"], log_dir / "ms.log", 60.0, "/v1/health_check")
        )
        upstream = {"url": ms.url, "health_path": "/v1/health_check", "max_concurrency": 64}
        gw = start_gateway(stack, Path(tmp), upstream, log_dir, MODEL_NAME, extra=QUIET)[0]
        yield Mesh(fake, ms, gw)


@contextlib.contextmanager
def code_from(pythonpath: str | None) -> Iterator[None]:
    """Servers started inside run the code on ``pythonpath`` (ahead of the venv's own)."""
    before = os.environ.get("PYTHONPATH")
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def main(argv: list[str]) -> int:
    label = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 60
    max_tokens = int(argv[2]) if len(argv) > 2 else 4
    meshes = {"": None} | ({"base-": base} if (base := os.environ.get("HOP_LATENCY_BASE")) else {})
    targets: dict[str, Endpoint] = {}
    pids: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for prefix, path in meshes.items():
            with code_from(path):
                log_dir = Path(f"bench-results/hop-latency-{label}/{prefix or 'this'}")
                fake = os.environ.get("HOP_LATENCY_UPSTREAM") == "fake"
                mesh = fake_mesh(log_dir) if fake else running_mesh(MODEL, log_dir, gateway_flags=QUIET)
                m = stack.enter_context(mesh)
            assert m.gateway is not None
            assert m.microservice is not None
            for s in (m.engine, m.microservice, m.gateway):
                targets[prefix + s.name] = Endpoint(s.url, MODEL_NAME)
                pids[prefix + ("engine_api" if s is m.engine else s.name)] = s.proc.pid
        t0 = time.monotonic()
        res = asyncio.run(one_at_a_time(targets, pids, n, max_tokens))
    out: dict[str, Any] = {"label": label, "requests": n, "max_tokens": max_tokens, "base": base, "targets": res}
    for prefix in meshes:
        eng = res[prefix + "engine"]["ttft_ms_p50"]
        for hop in ("microservice", "gateway"):
            out.setdefault("added_ttft_ms_p50", {})[prefix + hop] = round(res[prefix + hop]["ttft_ms_p50"] - eng, 2)
            out.setdefault("own_cpu_ms_p50", {})[prefix + hop] = res[prefix + hop]["cpu_ms_p50"][prefix + hop]
    out |= {"seconds": round(time.monotonic() - t0, 1), "load1": psutil.getloadavg()[0]}
    Path(f"bench-results/hop-latency-{label}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("added_ttft_ms_p50", "own_cpu_ms_p50", "seconds", "load1")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
