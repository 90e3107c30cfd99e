"""``genmesh-bench levers``: engine settings side by side. Each ``--variant NAME=FLAGS`` is an engine started
with FLAGS after the defaults, all loaded at once; at each level they alternate in rounds, so drift in the
machine's speed lands on all. ``--llama-server`` adds llama.cpp's server on the same GGUF (the report's peer,
``make llama-cpp``, in the form the report would run) as one more target in the rounds, and each
``--llama-variant NAME=FLAGS`` one with the report's flags plus FLAGS, as it is (``--variant`` may then be left
out: llama-server against itself). Per variant: each figure's median over the rounds, and the
median of each round's throughput ratio to the first variant (or ``--ratio-to``'s)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from genmesh.engine.settings import DEFAULT_MODEL

from .compare import alternate, ratio
from .datasets import DATASETS, RequestSpec, TokenCodec
from .load import Endpoint, load_levels, measure
from .render import fmt, level, say, table
from .results import Result, percentile, save
from .servers import MODEL_NAME, NO_REPACK, add_llama_arguments, llama_peer, start_engine, start_peer

FIGURES = {"output_throughput": ".1f", "median_ttft_ms": ".0f", "p99_ttft_ms": ".0f", "median_tpot_ms": ".1f"}
COLUMNS = ["load", "variant", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "vs {}", "steal %"]
LLAMA = "llama-server"  # the variant name of --llama-server
SPEC = ("genmesh_engine_spec_decode_accepted_tokens", "genmesh_engine_spec_decode_steps")  # counters, per model


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``"mnbt512=--max-num-batched-tokens 512"`` -> ``("mnbt512", ["--max-num-batched-tokens", "512"])``."""
    name, sep, flags = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"variant {text!r}: expected NAME=FLAGS (FLAGS may be empty: the defaults)")
    return name.strip(), shlex.split(flags)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS", help="engine flags (repeat)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF or IR folder every variant serves")
    p.add_argument("--dataset-name", choices=list(DATASETS), default="random")
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens (mixed: median; shared-prefix: prefix)")
    p.add_argument("--output-len", type=int, default=64, help="new tokens (mixed: the median)")
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32], help="closed-loop levels")
    p.add_argument("--request-rates", type=float, nargs="*", default=[2.0, 8.0], help="Poisson req/s levels")
    p.add_argument("--rate-requests", type=int, default=32, help="requests per rate level")
    p.add_argument("--rounds", type=int, default=3, help="rounds per level, alternating which variant goes first")
    p.add_argument("--fresh-prompts", action="store_true", help="seeded new prompts each round and level (uncached)")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"), help="where the JSON goes")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/levers"), help="engine logs")
    p.add_argument("--llama-server", action="store_true", help=f"also llama.cpp's llama-server, as variant {LLAMA}")
    p.add_argument(
        "--llama-variant", action="append", default=[], metavar="NAME=FLAGS", help="llama-server plus FLAGS (repeat)"
    )
    add_llama_arguments(p)
    p.add_argument("--ratio-to", metavar="NAME", help="the variant the ratios are to (default: the first)")


def summarise(by_variant: dict[str, list[Result]], first: str) -> list[dict[str, Any]]:
    """Per variant: each figure's median over the rounds, and the median of the per-round throughput ratios."""
    rows = []
    for name, runs in by_variant.items():
        row: dict[str, Any] = {"variant": name, "level": level(runs[0]), "rounds": len(runs)}
        row |= {key: percentile((r.get(key) for r in runs), 50) for key in FIGURES}
        tput = [(a["output_throughput"], b["output_throughput"]) for a, b in zip(runs, by_variant[first], strict=True)]
        row["ratio_to_first"] = percentile((ratio(a, b) for a, b in tput), 50)
        row["accepted_per_step"] = percentile((r.get("accepted_per_step") for r in runs), 50)
        row["steal_percent"] = max((s for r in runs if (s := r.get("steal_percent")) is not None), default=None)
        rows.append(row | {"failed": sum(int(r.get("failed", 0)) for r in runs)})
    return rows


async def spec_counters(url: str) -> tuple[float, float] | None:
    """(draft tokens accepted, request-steps) so far on an engine's ``/metrics``; None where it has none."""
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            resp = await client.get(url + "/metrics")
    except httpx.HTTPError:
        return None
    sums = dict.fromkeys(SPEC, 0.0)
    try:  # a peer without Prometheus metrics (llama-server answers a JSON 501) has no draft counters
        families = list(text_string_to_metric_families(resp.text)) if resp.status_code == 200 else []
    except ValueError:
        return None
    for family in families:
        if family.name in sums:
            sums[family.name] += sum(x.value for x in family.samples if x.name.endswith("_total"))
    accepted, steps = sums.values()
    return (accepted, steps) if steps else None


def _level(servers: dict[str, tuple[Endpoint, int]], sets: list[list[RequestSpec]], dataset: str, **load: Any) -> Any:
    """One load level: the variants in alternating rounds, round ``r`` sending ``sets[r]`` to each."""

    async def one(name: str, r: int) -> Result:
        (endpoint, pid), settings = servers[name], {"dataset": dataset, "variant": name}
        before = await spec_counters(endpoint.base_url)
        run = await measure(endpoint, sets[r], label=name, pids=[pid], settings=settings, **load)
        if (
            before is not None
            and (after := await spec_counters(endpoint.base_url)) is not None
            and after[1] > before[1]
        ):
            run["accepted_per_step"] = (after[0] - before[0]) / (after[1] - before[1])  # draft tokens a step kept
        return run

    return asyncio.run(alternate({name: partial(one, name) for name in servers}, len(sets)))


def run(args: argparse.Namespace) -> int:
    try:
        variants = dict(parse_variant(v) for v in args.variant)
        llamas = dict(parse_variant(v) for v in args.llama_variant)
    except ValueError as exc:
        raise SystemExit(f"genmesh-bench levers: {exc}") from exc
    names = [*variants, *llamas, *([LLAMA] if args.llama_server else [])]
    if not names:
        raise SystemExit("genmesh-bench levers: nothing to measure: give --variant, --llama-variant or --llama-server")
    if len(set(names)) != len(args.variant) + len(args.llama_variant) + args.llama_server:
        raise SystemExit(f"genmesh-bench levers: variant names must differ (and not be {LLAMA} with --llama-server)")
    if (first := args.ratio_to or names[0]) not in names:
        raise SystemExit(f"genmesh-bench levers: --ratio-to {first}: not a variant ({', '.join(names)})")
    plan, codec = load_levels(args.concurrency, args.request_rates, args.rate_requests), TokenCodec(Path(args.model))
    n_max, lengths = max([4, *(n for _, _, n in plan)]), (args.input_len, args.output_len)
    # --fresh-prompts: the prompts of (level i, round r) come from seed 1 + i * rounds + r, else all from seed 0
    fresh, k = partial(DATASETS[args.dataset_name], codec, n_max, *lengths), args.rounds
    base = fresh(seed=0)
    warmup = [RequestSpec(r.prompt, r.prompt_len, 8, r.system) for r in base[:2]]
    rows, runs = list[dict[str, Any]](), list[Result]()
    argvs: dict[str, str] = {}  # each variant's engine command line, as it ran
    with ExitStack() as stack:
        servers: dict[str, tuple[Endpoint, int]] = {}
        for name, flags in variants.items():
            say(f"levers: starting the engine for {name} ({shlex.join(flags) or 'defaults'})")
            extra, log = ["--served-model-name", MODEL_NAME, *flags], args.log_dir / f"{name}.log"
            server = stack.enter_context(start_engine(args.model, log, extra=extra))
            servers[name] = (Endpoint(server.url, MODEL_NAME), server.proc.pid)
            argvs[name] = shlex.join(str(a) for a in server.proc.args)  # type: ignore[union-attr]
            asyncio.run(measure(servers[name][0], warmup))
        report_form: list[tuple[str, list[str] | None]] = [(LLAMA, None)] if args.llama_server else []
        for name, more in [*llamas.items(), *report_form]:  # a --llama-variant (more flags) runs as given
            fallback, parallel = NO_REPACK if more is None else None, max([32, *args.concurrency])
            peer = llama_peer(args.model, True, parallel, args.llama_threads, args.llama_binary, more or (), fallback)
            if peer.note:
                raise SystemExit(f"genmesh-bench levers: {peer.label}: {peer.note}")
            form = "the report's form" if more is None else f"the report's flags + {shlex.join(more) or 'nothing'}"
            say(f"levers: starting {name} ({peer.version}, {form})")
            server = stack.enter_context(start_peer(peer, args.log_dir / f"{name}.log"))
            say(f"levers: {name}: {peer.form or 'as given'}")
            servers[name] = (Endpoint(server.url, MODEL_NAME), server.proc.pid)
            argvs[name] = shlex.join(str(a) for a in server.proc.args)  # type: ignore[union-attr]
            asyncio.run(measure(servers[name][0], warmup))
        for i, (rate, conc, n) in enumerate(plan):
            sets = [(fresh(seed=1 + i * k + r) if args.fresh_prompts else base)[:n] for r in range(k)]
            by_variant = _level(servers, sets, args.dataset_name, request_rate=rate, max_concurrency=conc)
            rows += summarise(by_variant, first)
            runs += [r for results in by_variant.values() for r in results]
    figures = [[fmt(row[k], spec) for k, spec in [*FIGURES.items(), ("ratio_to_first", ".3f")]] for row in rows]
    cells = [[r["level"], r["variant"], *f, fmt(r["steal_percent"])] for r, f in zip(rows, figures, strict=True)]
    columns = [c.format(first) for c in COLUMNS]
    if any(r["accepted_per_step"] is not None for r in rows):  # a drafting variant: draft tokens kept per step
        columns.append("accepted/step")
        cells = [[*c, fmt(r["accepted_per_step"], ".2f")] for c, r in zip(cells, rows, strict=True)]
    print(table(columns, cells, markdown=True))
    doc = {"variants": {k: shlex.join(v) for k, v in variants.items()}, "engines": argvs, "rows": rows, "runs": runs}
    doc["ratio_to"] = first
    print(f"results: {save(doc, args.result_dir / time.strftime('levers-%Y%m%d-%H%M%S.json'))}")
    return 1 if any(row["failed"] for row in rows) else 0
