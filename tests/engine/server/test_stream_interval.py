"""``--stream-interval``: a stream's events written several at a time, the same events as without it.

Each HTTP chunk of a streamed reply is one write of the engine (the relays forward whole reads,
so the grouping reaches the client as it is): read with aiohttp's ``iter_chunks``, which keeps
the chunk boundaries of the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import orjson
import pytest

from genmesh.relay import split_events
from support.servers import start_engine

INTERVAL = 4
REQUEST = {
    "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
    "max_tokens": 23,
    "ignore_eos": True,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
}


@pytest.fixture(scope="module")
def grouping_engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_engine(tmp_path_factory.mktemp("stream-interval"), "--stream-interval", str(INTERVAL))
    yield server.url
    server.stop()


async def http_chunks(url: str) -> list[bytes]:
    """The reply's body, one item per HTTP chunk as it came on the wire."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json=REQUEST) as r,
    ):
        assert r.status == 200
        chunks: list[bytes] = []
        buf = b""
        async for data, end_of_chunk in r.content.iter_chunks():
            buf += data
            if end_of_chunk and buf:  # (not the empty chunk that ends the body)
                chunks.append(buf)
                buf = b""
        assert buf == b""
        return chunks


def payloads(chunks: list[bytes]) -> list[object]:
    """Each event's data, without what differs from one reply to the next (id, created)."""
    out: list[object] = []
    for event in split_events(b"".join(chunks)):
        data = event.split(b"data:", 1)[1].strip()
        obj = orjson.loads(data) if data != b"[DONE]" else "[DONE]"
        if isinstance(obj, dict):
            obj.pop("id", None)
            obj.pop("created", None)
        out.append(obj)
    return out


def test_the_same_events_come_grouped(engine_url: str, grouping_engine_url: str) -> None:
    alone = asyncio.run(http_chunks(engine_url))
    grouped = asyncio.run(http_chunks(grouping_engine_url))
    assert payloads(grouped) == payloads(alone)  # greedy: the same reply, event for event
    assert all(len(split_events(c)) == 1 for c in alone)  # the default: one event a write
    sizes = [len(split_events(c)) for c in grouped]
    # the role chunk and the first text each at once (time to first token), then INTERVAL a write
    assert sizes[:2] == [1, 1], sizes
    assert max(sizes) == INTERVAL, sizes
    assert len(grouped) < len(alone) / 2, sizes
