"""``genmesh-bench serve``: load against any OpenAI-compatible URL, as vLLM's ``benchmark_serving`` does.

Datasets ``random`` (input/output lengths in the model's own tokens), ``shared-prefix`` (one long
system prompt, varied questions) and ``sharegpt`` (a ShareGPT-format JSON file); requests at a
Poisson request rate and/or a fixed concurrency (several values sweep them); warm-up; a progress
bar; vLLM's metrics; JSON results and PNG charts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from . import plots
from .client import Endpoint, served_model
from .datasets import RequestSpec, random_requests, shared_prefix_requests, sharegpt_requests
from .progress import say
from .render import summary_block
from .results import save
from .runner import measure_async
from .stats import parse_goodput
from .tokens import ModelTokenizer


def add_dataset_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset-name", choices=["random", "shared-prefix", "sharegpt"], default="random")
    g.add_argument("--dataset-path", type=Path, help="ShareGPT-format JSON file (--dataset-name sharegpt)")
    g.add_argument("--tokenizer", default=DEFAULT_MODEL, help="GGUF or OpenVINO folder whose tokenizer sizes prompts")
    g.add_argument("--num-prompts", type=int, default=32, help="requests per run (default 32)")
    g.add_argument("--random-input-len", type=int, default=128, help="prompt tokens (random; default 128)")
    g.add_argument("--random-output-len", type=int, default=64, help="new tokens per request (default 64)")
    g.add_argument("--random-range-ratio", type=float, default=0.0, help="lengths vary by ± this share")
    g.add_argument("--shared-prefix-len", type=int, default=512, help="common system prompt tokens (default 512)")
    g.add_argument("--sharegpt-output-len", type=int, help="fix the output length of ShareGPT requests")
    g.add_argument("--seed", type=int, default=0)


def build_requests(args: argparse.Namespace, n: int | None = None) -> list[RequestSpec]:
    codec = ModelTokenizer(Path(args.tokenizer))
    n = args.num_prompts if n is None else n
    if args.dataset_name == "random":
        return random_requests(
            codec, n, args.random_input_len, args.random_output_len, args.random_range_ratio, args.seed
        )
    if args.dataset_name == "shared-prefix":
        return shared_prefix_requests(codec, n, args.shared_prefix_len, args.random_output_len, args.seed)
    if args.dataset_path is None:
        raise SystemExit("--dataset-name sharegpt needs --dataset-path FILE.json")
    return sharegpt_requests(codec, args.dataset_path, n, args.sharegpt_output_len, args.seed)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8008")
    p.add_argument("--api", choices=["chat", "completions"], default="chat", help="endpoint kind (default chat)")
    p.add_argument("--path-prefix", default="/v1", help="API prefix (default /v1; /v3 for OVMS)")
    p.add_argument("--model", help="model id to send (default: the first of GET /v1/models)")
    p.add_argument("--label", help="name of this line in tables and charts (default: the base URL)")
    p.add_argument(
        "--request-rate",
        type=float,
        nargs="+",
        default=[math.inf],
        help="Poisson requests/s; several values sweep (default inf: all at once)",
    )
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the arrivals (1: Poisson)")
    p.add_argument(
        "--max-concurrency", type=int, nargs="+", default=[None], help="requests in flight at most; several sweep"
    )
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True, help="(default on)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help="(default on)")
    p.add_argument("--warmup-requests", type=int, default=2, help="unmeasured requests first (default 2)")
    p.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50 e2el:5000")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"), help="where JSON and PNGs go")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG charts")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_dataset_arguments(p)


async def _sweep(args: argparse.Namespace, requests: list[RequestSpec]) -> list[dict[str, Any]]:
    base_url = args.base_url.rstrip("/")
    model = args.model or await served_model(base_url, args.path_prefix)
    endpoint = Endpoint(base_url, model, args.api, args.path_prefix, stream=args.stream, ignore_eos=args.ignore_eos)
    slos = parse_goodput(args.goodput)
    label = args.label or base_url
    warmup = [
        RequestSpec(r.prompt, r.prompt_len, min(r.output_len, 8), r.system) for r in requests[: args.warmup_requests]
    ]
    runs: list[dict[str, Any]] = []
    for rate in args.request_rate:
        for conc in args.max_concurrency:
            result, _ = await measure_async(
                endpoint,
                requests,
                label=label,
                request_rate=rate,
                max_concurrency=conc,
                warmup=warmup,
                slos=slos,
                settings={"dataset": args.dataset_name, "target": label},
                burstiness=args.burstiness,
                seed=args.seed,
                progress=args.progress,
            )
            print(summary_block(result), flush=True)
            runs.append(result)
    return runs


def run(args: argparse.Namespace) -> int:
    if args.num_prompts < 1:
        print("genmesh-bench serve: --num-prompts must be at least 1", file=sys.stderr)
        return 2
    say(f"serve: preparing {args.num_prompts} {args.dataset_name} requests")
    requests = build_requests(args)
    runs = asyncio.run(_sweep(args, requests))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = save(runs, args.result_dir / f"serve-{stamp}.json")
    print(f"results: {out}")
    if args.plot:
        for path in plots.plot_all(runs, args.result_dir, prefix=f"serve-{stamp}-"):
            print(f"chart: {path}")
    return 1 if any(r["failed"] for r in runs) else 0


def add_plot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", type=Path, help="JSON results (genmesh-bench or vLLM --save-result)")
    p.add_argument("--out-dir", type=Path, default=Path("bench-results"), help="where the PNGs go")
    p.add_argument("--prefix", default="compare-", help="file name prefix of the PNGs")


def run_plot(args: argparse.Namespace) -> int:
    from .results import load_results

    runs = load_results(args.results)
    for path in plots.plot_all(runs, args.out_dir, prefix=args.prefix):
        print(f"chart: {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="genmesh-bench serve", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(p)
    return run(p.parse_args(argv))
