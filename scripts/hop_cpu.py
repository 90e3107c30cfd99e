"""CPU per token of each process of the mesh, for one load through all of them (docs/benchmarks-notes.md).

    .venv/bin/python scripts/hop_cpu.py LABEL ROUNDS [STREAMS] [MAX_TOKENS]

Starts the engine, the microservice, Redis and the gateway (``genmesh.bench.servers.running_mesh``), then per
round: 15 s idle (each process's own background CPU rate: the gateway's console, probes, batch poller), then one
batch of STREAMS chat streams of MAX_TOKENS tokens (default 32 of 128) through the gateway, so that the gateway, the
microservice and the engine's API process each carry every token. Process CPU is read from every thread's
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds, not the 10 ms ticks of ``cpu_times``), which a shared machine
does not skew the way it skews wall-clock speed. Per process and round: ``raw`` (its CPU during the batch over the
tokens) and ``net`` (less its idle rate times the batch's duration). Environment: ``GENMESH_ENGINE_STREAM_INTERVAL``
reaches the engine; ``HOP_CPU_QUIET=1`` slows the gateway's background (console each 60 s, batch poll each 30 s),
so that its CPU during a batch is the relay's. Writes ``hop-cpu-LABEL.json`` in the working directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from genmesh.bench.datasets import RequestSpec, chat_batch
from genmesh.bench.load import Endpoint, measure
from genmesh.bench.servers import MODEL_NAME, running_mesh

MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
IDLE_S = 15.0
QUIET = ["--console-interval-s", "60", "--batch-poll-interval-s", "30"]


def cpu_s(pid: int) -> float:
    """The process's CPU seconds: every thread's run time."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):  # a thread that ended meanwhile
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


def main(argv: list[str]) -> int:
    label, rounds = argv[0], int(argv[1])
    streams = int(argv[2]) if len(argv) > 2 else 32
    max_tokens = int(argv[3]) if len(argv) > 3 else 128
    batch = chat_batch(streams, max_tokens)
    warm = [RequestSpec(r.prompt, 0, 8) for r in batch[:4]]
    flags = QUIET if os.environ.get("HOP_CPU_QUIET") else []
    out: dict[str, Any] = {"label": label, "flags": flags, "rounds": []}
    with running_mesh(MODEL, Path(f"bench-results/hop-cpu-{label}"), gateway_slots=64, gateway_flags=flags) as m:
        assert m.gateway is not None
        assert m.microservice is not None
        pids = {"gateway": m.gateway.proc.pid, "microservice": m.microservice.proc.pid, "engine_api": m.engine.proc.pid}
        endpoint = Endpoint(m.gateway.url, MODEL_NAME)
        asyncio.run(measure(endpoint, warm))
        for r in range(rounds):
            c0, t0 = {k: cpu_s(p) for k, p in pids.items()}, time.monotonic()
            time.sleep(IDLE_S)
            c1, t1 = {k: cpu_s(p) for k, p in pids.items()}, time.monotonic()
            res = asyncio.run(measure(endpoint, batch, label=label))
            c2, t2 = {k: cpu_s(p) for k, p in pids.items()}, time.monotonic()
            tokens = res["total_output_tokens"]
            row: dict[str, Any] = {"round": r + 1, "batch_s": round(t2 - t1, 2), "tokens": tokens}
            row |= {"failed": res["failed"], "tok_s": round(tokens / (t2 - t1), 1), "load1": psutil.getloadavg()[0]}
            row |= {"itl_p50_ms": res.get("median_itl_ms"), "itl_p99_ms": res.get("p99_itl_ms")}
            for k in pids:
                idle_rate = (c1[k] - c0[k]) / (t1 - t0)
                busy = c2[k] - c1[k]
                row[k] = {
                    "raw_ms_tok": round(1000 * busy / tokens, 4),
                    "idle_ms_per_s": round(1000 * idle_rate, 2),
                    "net_ms_tok": round(1000 * (busy - idle_rate * (t2 - t1)) / tokens, 4),
                }
            out["rounds"].append(row)
            print(json.dumps(row), flush=True)
    Path(f"hop-cpu-{label}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
