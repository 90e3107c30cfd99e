"""``genmesh-bench levers``: engine settings side by side, for the lever table of a performance change.

Every variant is an engine started with its own extra flags after the defaults (``NAME=FLAGS``; an
empty FLAGS is the defaults). All are loaded at once, each idle while another is measured; at each
load level the variants alternate in rounds (:func:`.compare.alternate`), so drift in the machine's
speed lands on all of them. The table gives each figure's median over the rounds and the median of
each round's throughput ratio to the first variant, measured in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shlex
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from .compare import alternate, ratio
from .datasets import RequestSpec, TokenCodec, mixed_chat_requests, random_requests
from .inprocess import Scheduler
from .load import Endpoint, measure
from .render import fmt, level, say, table
from .results import Result, save
from .servers import MODEL_NAME, start_engine

FIGURES = {"output_throughput": ".1f", "median_ttft_ms": ".0f", "p99_ttft_ms": ".0f", "median_tpot_ms": ".1f"}
COLUMNS = ["load", "variant", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "vs first", "steal %"]


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``"mnbt512=--max-num-batched-tokens 512"`` -> ``("mnbt512", ["--max-num-batched-tokens", "512"])``."""
    name, sep, flags = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"variant {text!r}: expected NAME=FLAGS (FLAGS may be empty: the defaults)")
    return name.strip(), shlex.split(flags)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", action="append", required=True, metavar="NAME=FLAGS", help="engine flags (repeat)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF or IR folder every variant serves")
    p.add_argument("--dataset-name", choices=["random", "mixed"], default="random")
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens (mixed: the median)")
    p.add_argument("--output-len", type=int, default=64, help="new tokens (mixed: the median)")
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32], help="closed-loop levels")
    p.add_argument("--request-rates", type=float, nargs="*", default=[2.0, 8.0], help="Poisson req/s levels")
    p.add_argument("--rate-requests", type=int, default=32, help="requests per rate level")
    p.add_argument("--rounds", type=int, default=3, help="rounds per level, alternating which variant goes first")
    p.add_argument(
        "--fresh-prompts",
        action="store_true",
        help="new prompts every round and level (seeded), so no variant's prefix cache has seen them",
    )
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"), help="where the JSON goes")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/levers"), help="engine logs")


def summarise(by_variant: dict[str, list[Result]], first: str) -> list[dict[str, Any]]:
    """Per variant: each figure's median over the rounds, and the median of the per-round throughput ratios."""
    rows = []
    for name, runs in by_variant.items():
        row: dict[str, Any] = {"variant": name, "level": level(runs[0]), "rounds": len(runs)}
        for key in FIGURES:
            values = [float(r[key]) for r in runs if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        firsts = by_variant[first]
        pairs = [
            ratio(a.get("output_throughput"), b.get("output_throughput")) for a, b in zip(runs, firsts, strict=True)
        ]
        row["ratio_to_first"] = statistics.median([p for p in pairs if p is not None]) if pairs else None
        steals = [float(r["steal_percent"]) for r in runs if r.get("steal_percent") is not None]
        row["steal_percent"] = max(steals) if steals else None
        row["failed"] = sum(int(r.get("failed", 0)) for r in runs)
        rows.append(row)
    return rows


def render(rows: Sequence[dict[str, Any]]) -> str:
    cells = [
        [
            row["level"],
            row["variant"],
            *(fmt(row[k], spec) for k, spec in FIGURES.items()),
            fmt(row["ratio_to_first"], ".3f"),
            fmt(row["steal_percent"]),
        ]
        for row in rows
    ]
    return table(COLUMNS, cells, markdown=True)


async def _one(
    endpoints: dict[str, tuple[Endpoint, int]],
    requests: list[list[RequestSpec]],
    rate: float,
    conc: int | None,
    dataset: str,
    name: str,
    round_index: int,
) -> Result:
    endpoint, pid = endpoints[name]
    settings = {"dataset": dataset, "variant": name}
    return await measure(
        endpoint,
        requests[round_index],
        label=name,
        request_rate=rate,
        max_concurrency=conc,
        pids=[pid],
        settings=settings,
    )


def run(args: argparse.Namespace) -> int:
    try:
        variants = dict(parse_variant(v) for v in args.variant)
    except ValueError as exc:
        raise SystemExit(f"genmesh-bench levers: {exc}") from exc
    if len(variants) != len(args.variant):
        raise SystemExit("genmesh-bench levers: variant names must differ")
    codec, n_max = TokenCodec(Path(args.model)), max([4, args.rate_requests, *(2 * c for c in args.concurrency)])
    plan = [(math.inf, c, max(4, 2 * c)) for c in args.concurrency]
    plan += [(rate, None, args.rate_requests) for rate in args.request_rates]

    def requests_for(seed: int) -> list[RequestSpec]:
        if args.dataset_name == "mixed":
            return mixed_chat_requests(codec, n_max, args.input_len, args.output_len, seed=seed)
        return random_requests(codec, n_max, args.input_len, args.output_len, seed=seed)

    requests = requests_for(0)
    # --fresh-prompts: the prompts of (level i, round r) come from seed 1 + i * rounds + r, else all from seed 0
    sets = [
        [requests_for(1 + i * args.rounds + r) if args.fresh_prompts else requests for r in range(args.rounds)]
        for i in range(len(plan))
    ]
    warmup = [RequestSpec(r.prompt, r.prompt_len, 8) for r in requests[:2]]
    rows: list[dict[str, Any]] = []
    runs: list[Result] = []
    with ExitStack() as stack:
        endpoints: dict[str, tuple[Endpoint, int]] = {}
        argvs: dict[str, str] = {}  # each variant's engine command line, as it ran
        for name, flags in variants.items():
            say(f"levers: starting the engine for {name} ({shlex.join(flags) or 'defaults'})")
            extra = ["--served-model-name", MODEL_NAME, *flags]
            server = stack.enter_context(
                start_engine(args.model, Scheduler(), args.log_dir / f"{name}.log", extra=extra)
            )
            endpoints[name] = (Endpoint(server.url, MODEL_NAME), server.proc.pid)
            argvs[name] = shlex.join(str(a) for a in server.proc.args)  # type: ignore[union-attr]
            asyncio.run(measure(endpoints[name][0], warmup))
        for (rate, conc, n), per_round in zip(plan, sets, strict=True):
            work = partial(_one, endpoints, [reqs[:n] for reqs in per_round], rate, conc, args.dataset_name)
            by_variant = asyncio.run(alternate({name: partial(work, name) for name in variants}, args.rounds))
            rows += summarise(by_variant, next(iter(variants)))
            runs += [r for results in by_variant.values() for r in results]
    text = render(rows)
    print(text)
    out = save(
        {"variants": {k: shlex.join(v) for k, v in variants.items()}, "engines": argvs, "rows": rows, "runs": runs},
        args.result_dir / f"levers-{time.strftime('%Y%m%d-%H%M%S')}.json",
    )
    print(f"results: {out}")
    return 1 if any(row["failed"] for row in rows) else 0
