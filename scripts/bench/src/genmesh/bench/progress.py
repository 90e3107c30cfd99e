"""Progress lines on stderr, so stdout keeps only the results table."""

from __future__ import annotations

import sys
import time


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
