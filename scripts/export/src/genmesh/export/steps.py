"""Progress of an export: one line per step, with the time since the export began."""

from __future__ import annotations

import sys
import time


class ExportError(Exception):
    """The export cannot go on; the message says why and names the file."""


class Steps:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        print(f"[genmesh-export {self.elapsed_s:6.1f}s] {message}", file=sys.stderr, flush=True)
