"""``genmesh-bench``: one load generator, several benchmarks (docs/benchmarking.md).
``serve`` follows vLLM's ``benchmark_serving`` (datasets, sweeps, metrics, JSON results, charts)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvloop

from genmesh.engine.settings import DEFAULT_MODEL

from . import audio, batch, embeddings, engine, hops, levers, report, rerank
from .datasets import DATASETS, RequestSpec, TokenCodec, sharegpt_requests
from .load import Endpoint, measure, served_model
from .render import plot_all, say
from .results import Result, parse_goodput, save


def serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8008")
    p.add_argument("--api", choices=["chat", "completions"], default="chat", help="endpoint kind (default chat)")
    p.add_argument("--path-prefix", default="/v1", help="API prefix (default /v1; /v3 for OVMS)")
    p.add_argument("--model", help="model id to send (default: the first of GET /v1/models)")
    p.add_argument("--label", help="name of this line in tables and charts (default: the base URL)")
    p.add_argument("--request-rate", type=float, nargs="+", default=[math.inf], help="Poisson req/s; several sweep")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the arrivals (1: Poisson)")
    p.add_argument("--max-concurrency", type=int, nargs="+", default=[None], help="in flight at most; several sweep")
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True, help="(default on)")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help="(default on)")
    p.add_argument("--warmup-requests", type=int, default=2, help="unmeasured requests first (default 2)")
    p.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50 e2el:5000")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"), help="where JSON and PNGs go")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG charts")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    g = p.add_argument_group("dataset")
    g.add_argument("--dataset-name", choices=[*DATASETS, "sharegpt"], default="random")
    g.add_argument("--dataset-path", type=Path, help="ShareGPT-format JSON file (--dataset-name sharegpt)")
    g.add_argument("--tokenizer", default=DEFAULT_MODEL, help="GGUF or OpenVINO folder whose tokenizer sizes prompts")
    g.add_argument("--num-prompts", type=int, default=32, help="requests per run (default 32)")
    g.add_argument("--random-input-len", type=int, default=128, help="prompt tokens (mixed: the median)")
    g.add_argument("--random-output-len", type=int, default=64, help="new tokens (mixed: the median)")
    g.add_argument("--random-range-ratio", type=float, default=0.0, help="lengths vary by ± this share")
    g.add_argument("--shared-prefix-len", type=int, default=512, help="common system prompt tokens (default 512)")
    g.add_argument("--sharegpt-output-len", type=int, help="fix the output length of ShareGPT requests")
    g.add_argument("--seed", type=int, default=0)


def build_requests(args: argparse.Namespace) -> list[RequestSpec]:
    codec, n, name = TokenCodec(Path(args.tokenizer)), args.num_prompts, args.dataset_name
    if name == "sharegpt":
        if args.dataset_path is None:
            raise SystemExit("--dataset-name sharegpt needs --dataset-path FILE.json")
        return sharegpt_requests(codec, args.dataset_path, n, args.sharegpt_output_len, args.seed)
    length = args.shared_prefix_len if name == "shared-prefix" else args.random_input_len  # mixed: the median
    extra = {"range_ratio": args.random_range_ratio} if name == "random" else {}
    return DATASETS[name](codec, n, length, args.random_output_len, seed=args.seed, **extra)


async def _sweep(args: argparse.Namespace, requests: list[RequestSpec]) -> list[Result]:
    """Every ``--request-rate`` with every ``--max-concurrency``."""
    url = args.base_url.rstrip("/")
    model = args.model or await served_model(url, args.path_prefix)
    endpoint = Endpoint(url, model, args.api, args.path_prefix, stream=args.stream, ignore_eos=args.ignore_eos)
    first = requests[: args.warmup_requests]
    warmup = [RequestSpec(r.prompt, r.prompt_len, min(r.output_len, 8), r.system) for r in first]
    load: dict[str, Any] = {"warmup": warmup, "slos": parse_goodput(args.goodput), "burstiness": args.burstiness}
    load |= {"settings": {"dataset": args.dataset_name, "target": args.label or url}, "seed": args.seed}
    load |= {"label": args.label or url, "progress": args.progress}
    return [
        await measure(endpoint, requests, request_rate=rate, max_concurrency=conc, **load)
        for rate in args.request_rate
        for conc in args.max_concurrency
    ]


def serve(args: argparse.Namespace) -> int:
    if args.num_prompts < 1:
        print("genmesh-bench serve: --num-prompts must be at least 1", file=sys.stderr)
        return 2
    say(f"serve: preparing {args.num_prompts} {args.dataset_name} requests")
    runs, stamp = asyncio.run(_sweep(args, build_requests(args))), time.strftime("%Y%m%d-%H%M%S")
    print(report.results_table(runs, None, markdown=False))
    print(f"results: {save(runs, args.result_dir / f'serve-{stamp}.json')}")
    for path in plot_all(runs, args.result_dir, prefix=f"serve-{stamp}-") if args.plot else []:
        print(f"chart: {path}")
    return 1 if any(r["failed"] for r in runs) else 0


COMMANDS = {  # name: (help, add its arguments, run it)
    "serve": ("load against any OpenAI-compatible URL (vLLM benchmark_serving's metrics)", serve_args, serve),
    "engine": ("engine HTTP server vs in-process pipeline throughput", engine.add_arguments, engine.run),
    "microservice": ("streams through the microservice vs straight to the engine", hops.ms_args, hops.microservice),
    "gateway": ("gateway queue mechanics, and streams through the whole mesh", hops.gateway_args, hops.gateway),
    "report": ("the standard report with the peers (docs/benchmarks.md)", report.add_arguments, report.run),
    "levers": ("engine settings side by side in alternating rounds", levers.add_arguments, levers.run),
    "batch": (
        "interactive TTFT alone vs with a batch draining; batch throughput share",
        batch.add_arguments,
        batch.run,
    ),
    "embeddings": (
        "embeddings throughput and latency (c=1/8/32, short and long inputs)",
        embeddings.add_arguments,
        embeddings.run,
    ),
    "rerank": ("rerank throughput (query+document pairs/s) and latency at c=1/8", rerank.add_arguments, rerank.run),
    "audio": (
        "transcription real-time factor and speech characters/s at c=1/8, against faster-whisper and piper-tts",
        audio.add_arguments,
        audio.run,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genmesh-bench", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    for name, (help_text, add, run) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        add(sp)
        sp.set_defaults(run=run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given: a report names the command that wrote it
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # the load generator's CPU is the servers' loss
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
