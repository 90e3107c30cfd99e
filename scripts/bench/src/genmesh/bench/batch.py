"""``genmesh-bench batch`` (docs/batch.md): what a draining batch costs interactive traffic, and
what the batch gets while interactive traffic runs.

In one mesh (engine, microservice, Redis, two gateway replicas on it: one with
``--batch-preempt``, one with ``--no-batch-preempt``), in this order:
1. interactive streams at a fixed arrival rate, alone (TTFT p50 / p99);
2. a batch of ``--batch-lines`` chat lines submitted, then ``--rounds`` rounds of the same
   interactive load while it drains, once through each replica, the order alternating (TTFT p50 /
   p99, the batch's lines per second meanwhile, and the preemptions);
3. the batch alone for ``--batch-alone-s`` (its lines per second with the engine to itself);
4. the batch cancelled, and (with more than one round) the interactive load alone again: the
   baseline is both alone phases pooled;
then a ``--validate-lines`` file is uploaded and turned into a batch (cancelled at once), and the
gateway's RSS before and its peak RSS after (VmHWM: the process's peak so far, so it also bounds
what the phases before cost) show the memory validation costs. Each request's TTFT is split into
its wait for a gateway slot (``x-queue-wait-ms``) and the rest (routing, the microservice, the
engine's queue and prefill): where a batch's cost comes from. Ratios are within this one run; the
CPU is named in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from genmesh.engine.settings import DEFAULT_MODEL

from .datasets import chat_batch
from .load import Endpoint, measure
from .render import say
from .results import Result, describe, percentile, save
from .servers import MODEL_NAME, ManagedServer, gateway_config, gateway_on, running_mesh, start_gateway

MODES = ("wait", "preempt")  # the gateway's --no-batch-preempt, --batch-preempt
PREEMPTIONS = "genmesh_gateway_batch_preemptions_total"
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
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the phases with the batch (default 2)")
    p.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each round also measures a replica with --no-batch-preempt (default on)",
    )
    p.add_argument("--preempt-after-s", type=float, default=0.0, help="--batch-preempt-after-s (default 0)")
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
    rest = (
        [t - w for t, w in zip(result["ttfts_ms"], waits, strict=True)] if len(waits) == len(result["ttfts_ms"]) else []
    )
    return {"slot_wait_ms": _spread(waits), "ttft_after_slot_ms": _spread(rest)}


def _pooled(results: list[Result]) -> dict[str, float | None]:
    ttfts = [t for r in results for t in r["ttfts_ms"]]
    return {"p50": percentile(ttfts, 50), "p99": percentile(ttfts, 99)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _preemptions(url: str) -> float | None:
    """The gateway's ``genmesh_gateway_batch_preemptions_total`` (None when /metrics does not answer)."""
    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(PREEMPTIONS + "{"))


def wait_ended(http: httpx.Client, batch_id: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while http.get(f"/v1/batches/{batch_id}").json()["status"] not in ("cancelled", "completed", "failed", "expired"):
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)  # polling interval


def run(args: argparse.Namespace) -> int:
    flags: tuple[str, ...] = ("--batch-slot-share", str(args.slot_share), "--batch-poll-interval-s", "0.2")
    flags += ("--batch-preempt-after-s", str(args.preempt_after_s))
    modes = MODES if args.compare else ("preempt",)
    with (
        running_mesh(args.model, args.log_dir, gateway=False) as mesh,
        ExitStack() as stack,
        tempfile.TemporaryDirectory() as tmp,
    ):
        assert mesh.microservice is not None
        up = {"url": mesh.microservice.url, "health_path": "/v1/health_check", "max_concurrency": args.slots}
        on = (*flags, "--batch-preempt")
        gw, redis = start_gateway(stack, Path(tmp), up, args.log_dir, MODEL_NAME, "preempt-", on)
        gws: dict[str, ManagedServer] = {"preempt": gw}
        if args.compare:  # a replica on the same Redis: the same slots and batch, with --no-batch-preempt
            off = (*flags, "--no-batch-preempt")
            config = gateway_config(Path(tmp) / "wait-gateway.yaml", MODEL_NAME, up)
            gws["wait"] = gateway_on(stack, redis.url, config, args.log_dir / "wait-gateway.log", off)
        pids = [*mesh.pids, *(g.proc.pid for g in gws.values())]
        interactive = chat_batch(args.requests, args.max_tokens)
        warm = chat_batch(4, 8)

        def phase(label: str, url: str) -> Result:
            endpoint = Endpoint(url, MODEL_NAME)
            return asyncio.run(
                measure(endpoint, interactive, label=label, warmup=warm, request_rate=args.rate, pids=pids)
            )

        with httpx.Client(base_url=gw.url, timeout=600) as http:
            say("batch bench: interactive alone")
            alone = [phase("interactive alone (before)", gw.url)]
            batch = submit(http, jsonl(args.batch_lines, args.batch_max_tokens, "b"))
            say(f"batch bench: interactive with batch {batch['id']} ({args.batch_lines} lines) draining")
            mixed: dict[str, list[Result]] = {m: [] for m in modes}
            lines_per_s: dict[str, list[float]] = {m: [] for m in modes}
            for i in range(args.rounds):  # interleaved, the order alternating: drift hits both alike
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    say(f"batch bench: round {i + 1}, with batch, {mode}")
                    before, t0 = done_lines(http, batch["id"]), time.monotonic()
                    mixed[mode].append(phase(f"interactive with batch ({mode}), round {i + 1}", gws[mode].url))
                    lines_per_s[mode].append((done_lines(http, batch["id"]) - before) / (time.monotonic() - t0))
            left = args.batch_lines - done_lines(http, batch["id"])
            say("batch bench: the batch alone")
            before, t0 = done_lines(http, batch["id"]), time.monotonic()
            time.sleep(args.batch_alone_s)  # the measured window, not synchronisation
            batch_alone = (done_lines(http, batch["id"]) - before) / (time.monotonic() - t0)
            preempted = {m: _preemptions(g.url) for m, g in gws.items()}
            http.post(f"/v1/batches/{batch['id']}/cancel")
            wait_ended(http, batch["id"])
            if args.rounds > 1:
                say("batch bench: interactive alone, again")
                alone.append(phase("interactive alone (after)", gw.url))
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
    base = _pooled(alone)
    summary: dict[str, Any] = {"host": describe(), "rate": args.rate, "requests": args.requests}
    summary |= {"slots": args.slots, "slot_share": args.slot_share, "batch_lines": args.batch_lines}
    summary |= {"rounds": args.rounds, "preempt_after_s": args.preempt_after_s}
    summary["ttft_ms_alone"] = base | {"each": [_ttft(r) for r in alone]}
    summary["aims"] = AIMS
    summary["by_mode"] = {}
    for mode in modes:
        pooled = _pooled(mixed[mode])
        share = statistics.median(lines_per_s[mode]) / batch_alone if batch_alone else None
        summary["by_mode"][mode] = {
            "ttft_ms_with_batch": pooled,
            "ttft_ratio": {q: _ratio(pooled[q], base[q]) for q in ("p50", "p99")},
            "ttft_ratio_each_round": [
                {"p50": _ratio(p50, base["p50"]), "p99": _ratio(p99, base["p99"])}
                for p50, p99 in map(_ttft, mixed[mode])
            ],
            "ttft_breakdown": [breakdown(r) for r in mixed[mode]],
            "batch_lines_per_s_with_interactive": lines_per_s[mode],
            "batch_throughput_share": share,
            "preemptions": preempted.get(mode),
        }
    main = summary["by_mode"]["preempt"]
    summary |= {"ttft_ms_with_batch": main["ttft_ms_with_batch"], "ttft_ratio": main["ttft_ratio"]}
    summary |= {"batch_throughput_share": main["batch_throughput_share"], "batch_lines_per_s_alone": batch_alone}
    summary["batch_lines_left_after_the_rounds"] = left
    summary["ttft_breakdown_alone"] = [breakdown(r) for r in alone]
    runs = [*alone, *(r for m in modes for r in mixed[m])]
    summary["steal_percent"] = {r["label"]: r["steal_percent"] for r in runs}
    summary["other_busy_percent"] = {r["label"]: r["other_percent"] for r in runs}
    summary["validation_memory"] = memory
    summary["failed"] = {r["label"]: r["failed"] for r in runs}
    print(json.dumps(summary, indent=2))
    out = args.json_out or args.log_dir / time.strftime("batch-%Y%m%d-%H%M%S.json")
    print(f"results: {save({'summary': summary, 'runs': runs}, out)}")
    return 1 if any(r["failed"] for r in runs) else 0
