"""A finishing batch's results, read back in line order a chunk at a time, and the lines the gateway
writes itself (a line past its output quota, a line its window expired before it ran)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from redis.exceptions import RedisError

from genmesh.protocol.batches import BatchOutputLine

from ..redis.client import RedisClient, RedisUnavailable, text
from ..redis.keys import BatchKeys

LOAD_CHUNK = 1000  # lines whose result lengths are read in one round trip


async def ordered_results(
    store: RedisClient, keys: BatchKeys, total: int, expired: bool, limit: int
) -> AsyncIterator[tuple[str, bytes]]:
    """Each line's result in line order (``expired``: lines without one get an expired line),
    fetched about a chunk at a time (lengths first), never the whole output at once."""
    redis = store.redis
    for start in range(0, total, LOAD_CHUNK):
        idxs = list(range(start, min(total, start + LOAD_CHUNK)))
        lens = await _lengths(store, keys.results, idxs)
        expired_ids: dict[int, Any] = {}
        if expired:
            missing = [i for i, n in zip(idxs, lens, strict=True) if n == 0]
            custom = await store.call(redis.hmget(keys.ids, missing)) if missing else []
            expired_ids = dict(zip(missing, custom, strict=True))
        group: list[int] = []
        size = 0
        for idx, n in [*zip(idxs, lens, strict=True), (-1, 0)]:
            if group and (idx < 0 or size + n > limit):
                values: Any = await store.call(redis.hmget(keys.results, group))
                for value in values:
                    if value is not None:
                        raw = bytes(value)
                        yield ("o" if raw[:1] == b"o" else "e"), raw[1:]
                group, size = [], 0
            if idx < 0:
                break
            if n:
                group.append(idx)
                size += n
            elif expired:
                yield "e", expired_line(text(expired_ids.get(idx) or b""))


async def _lengths(store: RedisClient, results: str, idxs: list[int]) -> list[int]:
    try:
        async with store.redis.pipeline(transaction=False) as pipe:
            for idx in idxs:
                pipe.hstrlen(results, str(idx))
            return [int(n) for n in await pipe.execute()]
    except (RedisError, OSError) as exc:
        store.metrics.redis_errors.inc()
        raise RedisUnavailable(f"batch store unavailable: {type(exc).__name__}") from exc


def quota_line(custom_id: str, quota: str, value: int, size: int) -> bytes:
    """The error line of a line whose result was over its quota."""
    message = f"the response ({size} bytes) is larger than quota {quota} ({value} bytes)"
    line = {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": "quota_exceeded", "message": message},
    }
    return orjson.dumps(line)


def expired_line(custom_id: str) -> bytes:
    line = BatchOutputLine.model_validate(
        {
            "id": f"batch_req_{uuid.uuid4().hex}",
            "custom_id": custom_id,
            "error": {
                "code": "batch_expired",
                "message": "This request could not be executed before the completion window expired.",
            },
        }
    )
    return line.model_dump_json().encode()
