"""What one API key keeps in Redis (its files, its batches, its stored ``/v1/responses``), listed and
purged for operators (``routes/admin.py``, ``genmesh-gateway-keys revoke --purge``).

Files go through ``FileStore.delete`` (the file format is the store's business), batches are first
cancelled (no runner claims a line of them any more; a line still running writes its result into
nothing: ``LINE_DONE`` writes only while the batch exists) and then deleted with their lines and
results, and stored responses through the response store's owner-checked delete. Stored responses
have no per-key index: they are found with one ``SCAN`` of the keyspace (an operator's rare
request, never the request path).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from genmesh.protocol import OpenAIError
from genmesh.protocol.batches import FileObject

from ..redis.client import text
from .batches import BatchStore, decode
from .files import FileStore
from .responses import ResponseStore

SCAN_COUNT = 1000  # keys per SCAN step while stored responses are looked for


@dataclass
class KeyHoldings:
    """One key's stored things: counts, and up to ``limit`` of each."""

    files: list[FileObject] = field(default_factory=list)
    file_count: int = 0
    file_bytes: int = 0
    batches: list[dict[str, str]] = field(default_factory=list)
    batch_count: int = 0
    responses: list[str] = field(default_factory=list)
    response_count: int = 0

    def public(self) -> dict[str, Any]:
        return {
            "files": {"count": self.file_count, "bytes": self.file_bytes, "data": [f.model_dump() for f in self.files]},
            "batches": {"count": self.batch_count, "data": self.batches},
            "responses": {"count": self.response_count, "data": self.responses},
        }


class Holdings:
    """What each key holds across the stores (files, batches, stored responses): listed and purged."""

    def __init__(self, files: FileStore, batches: BatchStore, responses: ResponseStore) -> None:
        self.files = files
        self.batches = batches
        self.responses = responses
        self.store = batches.store
        self.keyspace = batches.keyspace

    async def of(self, owner: str, limit: int) -> KeyHoldings:
        out = KeyHoldings()
        redis = self.store.redis
        for file_id in await self._ids(self.keyspace.files(owner)):
            raw = await self.store.call(redis.hget(self.keyspace.file(owner, file_id)[0], "object"))
            if raw is None:
                continue
            obj = FileObject.model_validate_json(raw)
            out.file_count += 1
            out.file_bytes += obj.bytes
            if len(out.files) < limit:
                out.files.append(obj)
        for batch_id in await self._ids(self.keyspace.batches(owner)):
            meta = decode(await self.store.call(redis.hgetall(self.batches.keys(owner, batch_id).meta)))
            if not meta:
                continue
            out.batch_count += 1
            if len(out.batches) < limit:
                out.batches.append({"id": batch_id, "status": meta.get("status", "")})
        async for response_id in self._responses(owner):
            out.response_count += 1
            if len(out.responses) < limit:
                out.responses.append(response_id)
        return out

    async def purge(self, owner: str) -> dict[str, int]:
        """Delete everything ``owner`` stores: the counts deleted."""
        redis = self.store.redis
        batches = 0
        for batch_id in await self._ids(self.keyspace.batches(owner)):
            keys = self.batches.keys(owner, batch_id)
            cancel = self.store.scripts.cancel_batch(keys=keys.all(), args=[int(time.time())])
            if text(await self.store.call(cancel)):
                batches += 1
            await self.store.call(redis.delete(*keys.all(), keys.finalizer, keys.charged))
            await self.store.call(redis.zrem(self.keyspace.batches(owner), batch_id))
            await self.store.call(redis.zrem(self.keyspace.active_batches(), f"{owner}|{batch_id}"))
            await self.batches.ended(owner, batch_id)
        files = 0
        for file_id in await self._ids(self.keyspace.files(owner)):
            try:
                await self.files.delete(owner, file_id)
                files += 1
            except OpenAIError:  # expired meanwhile (its index entry is gone with it)
                pass
        responses = 0
        async for response_id in self._responses(owner):
            try:
                await self.responses.delete(response_id, owner)
                responses += 1
            except OpenAIError as err:
                if err.status != 404:
                    raise
        return {"files": files, "batches": batches, "responses": responses}

    async def _ids(self, index: str) -> list[str]:
        found: Any = await self.store.call(self.store.redis.zrange(index, 0, -1))
        return [text(i) for i in found]

    async def _responses(self, owner: str) -> AsyncIterator[str]:
        """The ids of ``owner``'s stored responses (one SCAN of the keyspace)."""
        redis = self.store.redis
        base = self.keyspace.response("")
        pattern = "".join(f"[{c}]" if c in "*?[]\\" else c for c in base) + "*"
        async for raw in redis.scan_iter(match=pattern, count=SCAN_COUNT):
            key = text(raw)
            stored_owner = await self.store.call(redis.hget(key, "owner"))
            if stored_owner is not None and text(stored_owner) == owner:
                yield key[len(base) :]
