"""Files (``/v1/files``) in Redis, each visible only to the API key that owns it.

The bytes live in Redis, beside the queues: every replica reads them, the AOF keeps them across
a restart, and nothing else needs to be deployed or shared. One file is one LIST of chunks of at
most ``files_chunk_bytes`` (just under 1 MiB by default: no Redis value or argument is larger) and one HASH of
its object, ``bytes`` and ``chunks``; the owner's index (a ZSET) lists them. All three sit in the
owner's hash slot (``KeySpace.file``), so saving and deleting are single Lua scripts, and another
key's lookup finds nothing: a 404, never someone else's file. Each lives ``files_ttl_s``.

A file is written chunk by chunk (``ChunkWriter``, ``lua/append_chunk.lua``) after its quota is
reserved (``admission/quotas.py``) and becomes visible at once when done (``lua/save_file.lua``); it is read
chunk by chunk (``FileStore.chunks``), so neither holds more than a chunk or two in memory.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError, file_too_large
from genmesh.protocol.batches import FileList, FileObject

from ..admission.quotas import Quotas, released
from ..redis.client import RedisClient, RedisUnavailable, start_after, text
from ..settings import GatewaySettings


def file_not_found(file_id: str, param: str | None = None) -> OpenAIError:
    """Missing, expired and another key's files all look the same."""
    return OpenAIError(f"No such File object: {file_id}", status=404, param=param, code="file_not_found")


def too_many_lines(lines: int, limit: int) -> OpenAIError:
    return OpenAIError(
        f"the file holds {lines} requests or more; a batch may hold at most {limit}",
        param="file",
        code="too_many_lines",
    )


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


class Fenced(Exception):
    """Another writer took the fence over (a batch's finish moved to another replica): stop."""


class ChunkWriter:
    """Write a file's data LIST in chunks of exactly ``chunk_bytes`` (the last one shorter), holding at
    most one chunk plus the piece being written; fenced by ``fence`` = ``token`` when given."""

    def __init__(
        self, store: RedisClient, data_key: str, chunk_bytes: int, ttl_ms: int, fence: str = "", token: str = ""
    ) -> None:
        self.store = store
        self.data_key = data_key
        self.chunk_bytes = chunk_bytes
        self.ttl_ms = ttl_ms
        self.fence, self.token = fence, token
        self.buf = bytearray()
        self.size = 0
        self.chunks = 0

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        self.buf += data
        while len(self.buf) >= self.chunk_bytes:
            await self._push(bytes(self.buf[: self.chunk_bytes]))
            del self.buf[: self.chunk_bytes]

    async def close(self) -> None:
        if self.buf:
            await self._push(bytes(self.buf))
            self.buf.clear()

    async def _push(self, piece: bytes) -> None:
        first = "1" if self.chunks == 0 else ""
        args: list[Any] = [piece, self.ttl_ms, self.token, first, FENCE_TTL_MS]
        keys = [self.data_key, self.fence or self.data_key]
        if int(await self.store.call(self.store.scripts.append_chunk(keys=keys, args=args))) < 0:
            raise Fenced(self.data_key)
        self.chunks += 1


FENCE_TTL_MS = 120_000  # a finishing replica's lock; renewed with each chunk it writes


class LineCount:
    """Non-blank lines of a JSONL file read in pieces (a line may span two pieces)."""

    def __init__(self) -> None:
        self.lines = 0
        self._open = False  # the current line has a non-blank byte

    def feed(self, piece: bytes) -> None:
        parts = piece.split(b"\n")
        for part in parts[:-1]:
            if self._open or part.strip():
                self.lines += 1
            self._open = False
        self._open = self._open or bool(parts[-1].strip())

    def total(self) -> int:
        return self.lines + (1 if self._open else 0)


class FileSink:
    """An uploaded file's bytes as they arrive: counted (at most ``bound`` bytes, ``max_lines`` lines)
    and written to Redis a chunk at a time (``ChunkWriter``: at most one chunk held)."""

    def __init__(self, file_id: str, writer: ChunkWriter, bound: int, max_lines: int) -> None:
        self.file_id = file_id
        self.writer = writer
        self.bound = bound
        self.max_lines = max_lines
        self.count = LineCount()
        self.saved = False

    async def write(self, piece: bytes) -> None:
        if self.writer.size + len(piece) > self.bound:
            raise file_too_large(self.bound)
        self.count.feed(piece)
        if self.count.lines > self.max_lines:
            raise too_many_lines(self.count.lines, self.max_lines)
        await self.writer.write(piece)


class FileStore:
    def __init__(self, store: RedisClient, settings: GatewaySettings, quotas: Quotas) -> None:
        self.store = store
        self.keyspace = store.keyspace
        self.settings = settings
        self.quotas = quotas
        self.ttl_s = settings.files_ttl_s
        self.chunk_bytes = settings.files_chunk_bytes

    def describe(
        self, file_id: str, filename: str, purpose: str, size: int, created_at: int, ttl_s: float | None = None
    ) -> FileObject:
        return FileObject.model_validate(
            {
                "id": file_id,
                "bytes": size,
                "created_at": created_at,
                "expires_at": created_at + int(self.ttl_s if ttl_s is None else ttl_s),
                "filename": filename,
                "purpose": purpose,
            }
        )

    def writer(self, owner: str, file_id: str, ttl_ms: int, fence: str = "", token: str = "") -> ChunkWriter:
        return ChunkWriter(self.store, self.keyspace.file(owner, file_id)[1], self.chunk_bytes, ttl_ms, fence, token)

    @contextlib.asynccontextmanager
    async def receiving(self, owner: str, bound: int) -> AsyncIterator[FileSink]:
        """A file of at most ``bound`` bytes on its way in: its quotas are reserved for ``bound`` first
        (refused: nothing is stored), then its bytes go to Redis chunk by chunk as they come
        (``FileSink.write``); ``save`` makes it visible. Left unsaved (an error, the client gone),
        its chunks and reservations are given back."""
        file_id = new_file_id()
        await self.quotas.reserve_file(owner, file_id, bound, per_key=True)
        self.quotas.pending += bound
        writer = self.writer(owner, file_id, int(self.ttl_s * 1000))
        sink = FileSink(file_id, writer, bound, self.settings.batch_max_lines)
        try:
            yield sink
            if not sink.saved:
                raise OpenAIError("missing required parameter: 'file' (a JSONL file)", param="file")
        except BaseException:
            with contextlib.suppress(Exception):
                await self.store.redis.delete(self.keyspace.file(owner, file_id)[1])
            await released(self.quotas, owner, file_id)
            raise
        finally:
            self.quotas.pending -= bound

    async def save(self, owner: str, sink: FileSink, filename: str, purpose: str) -> FileObject:
        """Store the rest of ``sink`` and make the file visible, counted at its own size. A file of more
        than ``batch_max_lines`` requests is refused."""
        limit = self.settings.batch_max_lines
        if sink.count.total() > limit:
            raise too_many_lines(sink.count.total(), limit)
        writer = sink.writer
        await writer.close()
        await self.quotas.shrink_file(owner, sink.file_id, writer.size)
        now = int(time.time())
        obj = self.describe(sink.file_id, filename, purpose, writer.size, now)
        meta, body = self.keyspace.file(owner, sink.file_id)
        args: list[Any] = [sink.file_id, obj.model_dump_json(), writer.size, writer.chunks, now * 1000, writer.ttl_ms]
        await self.store.call(self.store.scripts.save_file(keys=[meta, body, self.keyspace.files(owner)], args=args))
        sink.saved = True
        return obj

    async def get(self, owner: str, file_id: str, param: str | None = None) -> FileObject:
        raw = await self.store.call(self.store.redis.hget(self.keyspace.file(owner, file_id)[0], "object"))
        if raw is None:
            raise file_not_found(file_id, param)
        return FileObject.model_validate_json(raw)

    async def opened(self, owner: str, file_id: str, param: str | None = None) -> tuple[FileObject, int]:
        """The file's object and its chunk count (-1: an older file kept as one STRING)."""
        meta = self.keyspace.file(owner, file_id)[0]
        raw, chunks = await self.store.call(self.store.redis.hmget(meta, ["object", "chunks"]))
        if raw is None:
            raise file_not_found(file_id, param)
        return FileObject.model_validate_json(raw), -1 if chunks is None else int(chunks)

    async def chunks(self, owner: str, file_id: str, count: int) -> AsyncIterator[bytes]:
        """The file's bytes, one chunk per Redis call (ends early if the file is deleted meanwhile)."""
        body = self.keyspace.file(owner, file_id)[1]
        if count < 0:
            data: Any = await self.store.call(self.store.redis.get(body))
            if data is not None:
                yield bytes(data)
            return
        for i in range(count):
            piece: Any = await self.store.call(self.store.redis.lindex(body, i))
            if piece is None:
                return
            yield bytes(piece)

    async def content(self, owner: str, file_id: str, param: str | None = None) -> bytes:
        """The whole file (a batch's input, at most ``files_max_bytes``)."""
        _, count = await self.opened(owner, file_id, param)
        out = bytearray()
        async for piece in self.chunks(owner, file_id, count):
            out += piece
        return bytes(out)

    async def delete(self, owner: str, file_id: str) -> None:
        meta, body = self.keyspace.file(owner, file_id)
        keys = [meta, body, self.keyspace.files(owner), *self.keyspace.file_quota(owner)]
        deleted = await self.store.call(self.store.scripts.delete_file(keys=keys, args=[file_id]))
        await self.quotas.release_total(owner, file_id)
        if not deleted:
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
            raise RedisUnavailable(f"file store unavailable: {type(exc).__name__}") from exc
