"""``genmesh-bench``: benchmark sub-commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import engine


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genmesh-bench", description="genmesh benchmarks")
    sub = p.add_subparsers(dest="command", required=True)
    engine_parser = sub.add_parser("engine", help="engine HTTP server vs in-process pipeline throughput")
    engine.add_arguments(engine_parser)
    engine_parser.set_defaults(run=engine.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
