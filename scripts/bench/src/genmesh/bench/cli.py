"""``genmesh-bench``: one load generator, several benchmarks.

``serve`` (any OpenAI-compatible URL, vLLM's metrics), ``plot`` (compare JSON results),
``engine`` (HTTP server vs in-process pipeline; ``--shared-prefix`` for prefix caching),
``microservice`` and ``gateway`` (what each hop costs), ``report`` (the standard comparison
with the peers, written to ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import engine, gateway, microservice, report, serve


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genmesh-bench", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    commands: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = [
        (
            "serve",
            "load against any OpenAI-compatible URL (vLLM benchmark_serving's metrics)",
            serve.add_arguments,
            serve.run,
        ),
        ("plot", "PNG charts comparing JSON results", serve.add_plot_arguments, serve.run_plot),
        ("engine", "engine HTTP server vs in-process pipeline throughput", engine.add_arguments, engine.run),
        (
            "microservice",
            "streams through the microservice vs straight to the engine",
            microservice.add_arguments,
            microservice.run,
        ),
        ("gateway", "gateway queue mechanics, and streams through the whole mesh", gateway.add_arguments, gateway.run),
        ("report", "the standard report with the peers (docs/benchmarks.md)", report.add_arguments, report.run),
    ]
    for name, help_text, add, run in commands:
        sp = sub.add_parser(name, help=help_text, description=help_text)
        add(sp)
        sp.set_defaults(run=run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
