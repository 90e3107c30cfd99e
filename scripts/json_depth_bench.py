"""What a request body's checks cost the event loop: the nesting-depth check of ``decode_json_object``
(``genmesh.protocol.server.inputs``) before (``too_deep``, a walk of every container in Python) and
after (``nested_deeper``, a scan of the bytes at C speed), next to orjson's own parse, and the whole check
with the default limits (a body of more than ``max_json_containers`` arrays and objects is refused before
it is parsed) (docs/limits.md).

    nice -n 10 .venv/bin/python scripts/json_depth_bench.py [ROUNDS]

Bodies of 4 MiB (the interactive cap): wide and shallow (``[{},{},...]``), an embeddings request of short
strings (quotes and escapes for the string scan), and the worst shape for the passes (towers exactly as
deep as the limit, side by side). Each figure is the median over ROUNDS (default 5) of one call, in ms,
timed on the loop's thread (the loop is blocked for exactly that long: nothing here awaits). A shared
machine slows every figure alike, so compare the columns of one run; name the CPU with them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.inputs import decode_json_object, nested_deeper, too_deep
from genmesh.protocol.server.limits import HttpLimits

SIZE = 4 * 1024 * 1024
DEPTH = 64  # the default max_json_depth


def _bodies() -> dict[str, bytes]:
    wide = b'{"model":"m","input":[' + b",".join([b"{}"] * (SIZE // 3)) + b"]}"
    words = b'{"model":"m","input":[' + b",".join([b'"a \\"quoted\\" [word]"'] * (SIZE // 23)) + b"]}"
    tower = b"[" * (DEPTH - 2) + b"]" * (DEPTH - 2)
    towers = b'{"model":"m","input":[' + b",".join([tower] * (SIZE // (len(tower) + 1))) + b"]}"
    return {"wide [{},{},...]": wide, "strings": words, "towers at the limit": towers}


def _median_ms(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def _served(raw: bytes) -> str:
    """What the default limits do with ``raw``: decode it, or refuse it (past max_json_containers)."""
    try:
        decode_json_object(raw, DEPTH, HttpLimits().max_json_containers)
    except OpenAIError:
        return "refused"
    return "decoded"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    head = f"{'body':22} {'MiB':>5} {'orjson':>9} {'before':>9} {'after':>9} {'decode':>9} {'default':>9}"
    print(f"{head}  (ms, median of {rounds}; default: the whole check with the default limits)")
    for name, raw in _bodies().items():
        data = orjson.loads(raw)
        assert too_deep(data, DEPTH) is None
        assert not nested_deeper(raw, DEPTH)
        parse = _median_ms(lambda raw=raw: orjson.loads(raw), rounds)  # type: ignore[misc]
        before = _median_ms(lambda data=data: too_deep(data, DEPTH), rounds)  # type: ignore[misc]
        after = _median_ms(lambda raw=raw: nested_deeper(raw, DEPTH), rounds)  # type: ignore[misc]
        whole = _median_ms(lambda raw=raw: decode_json_object(raw, DEPTH, 10**9), rounds)  # type: ignore[misc]
        default = _median_ms(lambda raw=raw: _served(raw), rounds)  # type: ignore[misc]
        row = f"{parse:9.1f} {before:9.1f} {after:9.1f} {whole:9.1f} {default:9.1f} {_served(raw)}"
        print(f"{name:22} {len(raw) / 2**20:5.1f} {row}")


if __name__ == "__main__":
    main()
