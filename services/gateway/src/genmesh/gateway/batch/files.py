"""Files (``/v1/files``) in Redis, each visible only to the API key that owns it.

The bytes live in Redis, beside the queues: every replica reads them, the AOF keeps them across
a restart, and nothing else needs to be deployed or shared. One file is one STRING (at most
``files_max_bytes``, 100 MiB by default, far below Redis' 512 MB value limit) and one HASH of its
object; the owner's index (a ZSET) lists them. All three sit in the owner's hash slot
(``KeySpace.file``), so saving and deleting are single Lua scripts, and another key's lookup
finds nothing: a 404, never someone else's file. Each lives ``files_ttl_s``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import orjson
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError
from genmesh.protocol.batches import FileList, FileObject

from ..store import Store, StoreUnavailable, start_after, text


def file_not_found(file_id: str, param: str | None = None) -> OpenAIError:
    """Missing, expired and another key's files all look the same."""
    return OpenAIError(f"No such File object: {file_id}", status=404, param=param, code="file_not_found")


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


class FileStore:
    def __init__(self, store: Store, ttl_s: float) -> None:
        self.store = store
        self.keyspace = store.keyspace
        self.ttl_s = ttl_s

    def describe(self, file_id: str, filename: str, purpose: str, size: int, created_at: int) -> FileObject:
        return FileObject.model_validate(
            {
                "id": file_id,
                "bytes": size,
                "created_at": created_at,
                "expires_at": created_at + int(self.ttl_s),
                "filename": filename,
                "purpose": purpose,
            }
        )

    async def save(self, owner: str, filename: str, purpose: str, data: bytes) -> FileObject:
        now = int(time.time())
        obj = self.describe(new_file_id(), filename, purpose, len(data), now)
        meta, body = self.keyspace.file(owner, obj.id)
        args: list[Any] = [obj.id, obj.model_dump_json(), data, now * 1000, int(self.ttl_s * 1000)]
        await self.store.call(self.store.scripts.save_file(keys=[meta, body, self.keyspace.files(owner)], args=args))
        return obj

    async def get(self, owner: str, file_id: str, param: str | None = None) -> FileObject:
        raw = await self.store.call(self.store.redis.hget(self.keyspace.file(owner, file_id)[0], "object"))
        if raw is None:
            raise file_not_found(file_id, param)
        return FileObject.model_validate_json(raw)

    async def content(self, owner: str, file_id: str, param: str | None = None) -> bytes:
        body = self.keyspace.file(owner, file_id)[1]
        data: Any = await self.store.call(self.store.redis.get(body))
        if data is None:
            raise file_not_found(file_id, param)
        return bytes(data)

    async def delete(self, owner: str, file_id: str) -> None:
        meta, body = self.keyspace.file(owner, file_id)
        keys = [meta, body, self.keyspace.files(owner)]
        if not await self.store.call(self.store.scripts.delete_file(keys=keys, args=[file_id])):
            raise file_not_found(file_id)

    async def page(self, owner: str, purpose: str | None, limit: int, after: str | None) -> FileList:
        """The owner's files, newest first; ``after``: a file id, the page starts past it."""
        index = self.keyspace.files(owner)
        redis = self.store.redis
        start = await start_after(self.store, index, after, file_not_found(str(after), "after"))
        out: list[FileObject] = []
        has_more = False
        while not has_more:
            found: Any = await self.store.call(redis.zrevrange(index, start, start + 99))
            ids = [text(i) for i in found]
            if not ids:
                break
            start += len(ids)
            objs = await self._objects(owner, ids)
            for file_id, raw in zip(ids, objs, strict=True):
                if raw is None:  # expired: drop it from the index
                    with contextlib.suppress(RedisError, OSError):
                        await redis.zrem(index, file_id)
                    continue
                obj = FileObject.model_validate(orjson.loads(raw))
                if purpose is not None and obj.purpose != purpose:
                    continue
                if len(out) == limit:
                    has_more = True
                    break
                out.append(obj)
        return FileList(
            data=out, first_id=out[0].id if out else None, last_id=out[-1].id if out else None, has_more=has_more
        )

    async def _objects(self, owner: str, ids: list[str]) -> list[bytes | None]:
        try:
            async with self.store.redis.pipeline(transaction=False) as pipe:
                for file_id in ids:
                    pipe.hget(self.keyspace.file(owner, file_id)[0], "object")
                return list(await pipe.execute())
        except (RedisError, OSError) as exc:
            self.store.metrics.redis_errors.inc()
            raise StoreUnavailable(f"file store unavailable: {type(exc).__name__}") from exc
