"""``genmesh-bench batch`` (docs/batch.md): what a draining batch costs interactive traffic, and
what the batch gets while interactive traffic runs.

In one mesh (engine, microservice, Redis, gateway), in this order:
1. interactive streams at a fixed arrival rate, alone (TTFT p50 / p99);
2. a batch of ``--batch-lines`` chat lines submitted, then the same interactive load while it
   drains (TTFT p50 / p99, and the batch's lines per second meanwhile);
3. the batch alone for ``--batch-alone-s`` (its lines per second with the engine to itself);
then the batch is cancelled, and a ``--validate-lines`` file is uploaded and turned into a batch
(cancelled at once), and the gateway's RSS before and its peak RSS after (VmHWM: the process's
peak so far, so it also bounds what the phases before cost) show the memory validation costs.
Ratios are within this one run; the CPU is named in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from genmesh.engine.settings import DEFAULT_MODEL

from .datasets import chat_batch
from .load import Endpoint, measure
from .render import say
from .results import Result, describe, percentile, save
from .servers import MODEL_NAME, running_mesh

AIMS = {"ttft_p50": 1.1, "ttft_p99": 1.25}  # interactive TTFT with the batch / alone, at most (issue 32)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file or IR folder for the engine")
    p.add_argument("--rate", type=float, default=2.0, help="interactive arrivals per second (Poisson; default 2)")
    p.add_argument("--requests", type=int, default=120, help="interactive requests per phase (default 120)")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per interactive request (default 64)")
    p.add_argument("--batch-lines", type=int, default=2000, help="lines of the draining batch (default 2000)")
    p.add_argument("--batch-max-tokens", type=int, default=64, help="new tokens per batch line (default 64)")
    p.add_argument("--batch-alone-s", type=float, default=30.0, help="seconds the batch runs alone (default 30)")
    p.add_argument("--slots", type=int, default=8, help="the model's slots at the gateway (default 8)")
    p.add_argument("--slot-share", type=float, default=0.5, help="--batch-slot-share of the gateway (default 0.5)")
    p.add_argument("--validate-lines", type=int, default=50_000, help="lines of the validation file (0: skip)")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/batch"), help="logs of started servers")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the summary to this JSON file")


def jsonl(n: int, max_tokens: int, tag: str) -> bytes:
    lines = []
    for i, req in enumerate(chat_batch(n, max_tokens)):
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": req.prompt}], "max_tokens": max_tokens}
        body["ignore_eos"] = True
        lines.append(
            json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        )
    return ("\n".join(lines) + "\n").encode()


def submit(http: httpx.Client, data: bytes) -> dict[str, Any]:
    f = http.post("/v1/files", files={"file": ("batch.jsonl", data)}, data={"purpose": "batch"})
    f.raise_for_status()
    body = {"input_file_id": f.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    r = http.post("/v1/batches", json=body)
    r.raise_for_status()
    batch: dict[str, Any] = r.json()
    return batch


def done_lines(http: httpx.Client, batch_id: str) -> int:
    counts = http.get(f"/v1/batches/{batch_id}").json()["request_counts"]
    return int(counts["completed"]) + int(counts["failed"])


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _ttft(result: Result) -> tuple[float, float]:
    return float(result["median_ttft_ms"] or 0.0), float(result["p99_ttft_ms"] or 0.0)


def _spread(samples: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "max": percentile(samples, 100)}


def breakdown(result: Result) -> dict[str, dict[str, float | None]]:
    """Where the TTFT went: the wait for a gateway slot (``x-queue-wait-ms``), and the rest (routing, the
    microservice, the engine's own queue and the prefill), per request."""
    waits = result["queue_waits_ms"]
    rest = [t - w for t, w in zip(result["ttfts_ms"], waits, strict=True)] if len(waits) == len(result["ttfts_ms"]) else []
    return {"slot_wait_ms": _spread(waits), "ttft_after_slot_ms": _spread(rest)}


def run(args: argparse.Namespace) -> int:
    flags = ("--batch-slot-share", str(args.slot_share), "--batch-poll-interval-s", "0.2")
    with running_mesh(args.model, args.log_dir, gateway_slots=args.slots, gateway_flags=flags) as mesh:
        assert mesh.gateway is not None
        gw = mesh.gateway
        endpoint = Endpoint(gw.url, MODEL_NAME)
        interactive = chat_batch(args.requests, args.max_tokens)
        warm = chat_batch(4, 8)

        def phase(label: str) -> Result:
            return asyncio.run(
                measure(endpoint, interactive, label=label, warmup=warm, request_rate=args.rate, pids=mesh.pids)
            )

        with httpx.Client(base_url=gw.url, timeout=600) as http:
            say("batch bench: interactive alone")
            alone = phase("interactive alone")
            batch = submit(http, jsonl(args.batch_lines, args.batch_max_tokens, "b"))
            say(f"batch bench: interactive with batch {batch['id']} ({args.batch_lines} lines) draining")
            before, t0 = done_lines(http, batch["id"]), time.monotonic()
            mixed = phase("interactive with batch")
            during = (done_lines(http, batch["id"]) - before) / (time.monotonic() - t0)
            say("batch bench: the batch alone")
            before, t0 = done_lines(http, batch["id"]), time.monotonic()
            time.sleep(args.batch_alone_s)  # the measured window, not synchronisation
            batch_alone = (done_lines(http, batch["id"]) - before) / (time.monotonic() - t0)
            http.post(f"/v1/batches/{batch['id']}/cancel")
            memory: dict[str, Any] = {}
            if args.validate_lines:
                pid = gw.proc.pid
                data = jsonl(args.validate_lines, 16, "v")
                rss0 = vm_kib(pid, "VmRSS")
                t0 = time.monotonic()
                big = submit(http, data)
                took = time.monotonic() - t0
                http.post(f"/v1/batches/{big['id']}/cancel")
                memory = {"lines": args.validate_lines, "file_mb": len(data) / 1e6, "upload_and_create_s": took}
                memory |= {"rss_before_mb": rss0 / 1024, "peak_rss_mb": vm_kib(pid, "VmHWM") / 1024}
                memory["status"] = big["status"]
    p50a, p99a = _ttft(alone)
    p50m, p99m = _ttft(mixed)
    summary: dict[str, Any] = {"host": describe(), "rate": args.rate, "requests": args.requests}
    summary |= {"slots": args.slots, "slot_share": args.slot_share, "batch_lines": args.batch_lines}
    summary |= {"ttft_ms_alone": {"p50": p50a, "p99": p99a}, "ttft_ms_with_batch": {"p50": p50m, "p99": p99m}}
    summary["ttft_ratio"] = {"p50": p50m / p50a if p50a else None, "p99": p99m / p99a if p99a else None}
    summary["aims"] = AIMS
    summary |= {"batch_lines_per_s_with_interactive": during, "batch_lines_per_s_alone": batch_alone}
    summary["batch_throughput_share"] = during / batch_alone if batch_alone else None
    summary["ttft_breakdown"] = {"alone": breakdown(alone), "with_batch": breakdown(mixed)}
    summary["steal_percent"] = {"alone": alone["steal_percent"], "with_batch": mixed["steal_percent"]}
    summary["validation_memory"] = memory
    summary["failed"] = {"alone": alone["failed"], "with_batch": mixed["failed"]}
    print(json.dumps(summary, indent=2))
    out = args.json_out or args.log_dir / time.strftime("batch-%Y%m%d-%H%M%S.json")
    print(f"results: {save({'summary': summary, 'runs': [alone, mixed]}, out)}")
    return 1 if alone["failed"] or mixed["failed"] else 0
