"""Bad input harms nothing (issue 54): while a test's block runs, good requests (a chat, or whatever the
server serves) go to the same server, and afterwards each was answered 200, the process is the same
one, healthy, and its peak RSS grew by less than a bound."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from support.alongside import requests_alongside
from support.hostile import memory_status
from support.servers import Server


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``), in bytes."""
    return memory_status(pid, "VmHWM")


@contextmanager
def unharmed(server: Server, rss_bound: int, path: str, body: dict[str, Any]) -> Iterator[None]:
    """Run the block while ``body`` is POSTed to ``server``'s ``path`` again and again; then: each was
    answered 200 (at least one), the process is the same one, still healthy, and its peak RSS grew
    by less than ``rss_bound`` bytes."""
    pid = server.proc.pid
    before = peak_rss(pid)
    with requests_alongside(server.url + path, body):
        yield
    assert server.proc.poll() is None, f"the engine's API process ({pid}) exited: it would have been restarted"
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    grew = peak_rss(pid) - before
    print(f"engine peak RSS grew by {grew / 2**20:.1f} MiB (bound {rss_bound / 2**20:.0f} MiB)")
    assert grew < rss_bound, f"the engine's peak RSS grew by {grew / 2**20:.0f} MiB"


def chat(model: str) -> tuple[str, dict[str, Any]]:
    """A short chat request: ``unharmed``'s ``path`` and ``body``."""
    return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
