"""Batches (``/v1/batches``) in Redis: the batch object, its lines and their results.

A batch lives in its owner's hash slot (``KeySpace.batch``) beside the owner's files, so each
change is one Lua script (``lua/*.lua``): creation, claiming a line (``lua/claim_line.lua``, which
first puts lapsed leases back in front), writing a line's result once (``LINE_DONE``: HSETNX per
line index, with the counts), cancelling, deciding how it ends (``CLOSE_BATCH``: after that no
result is written) and ending it with its output and error files (``FINISH_BATCH``). The
``active`` index names the batches runners still have work on.

Creation checks the input file at once (``validation.py``), off the event loop, then copies its
lines into the batch: the batch either starts ``in_progress`` with every line queued or ends
``failed`` with line-numbered ``errors``; ``validating`` is never left behind by a crash.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from typing import Any

import orjson
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError
from genmesh.protocol.batches import (
    TERMINAL_BATCH_STATUSES,
    Batch,
    BatchErrors,
    BatchList,
    FileObject,
)

from ..admission.batch_capacity import no_room, room_args, room_keys
from ..redis.client import RedisClient, RedisUnavailable, start_after, text
from ..redis.keys import BatchKeys
from ..routing.config import RoutingConfig
from ..settings import GatewaySettings
from .batch_output import ordered_results, quota_line
from .batch_validation import LineRules, check, requests, served_model
from .files import Fenced, FileStore

ACTIVE_GRACE_S = 600  # a batch counts as in progress at most this long past its window (its end, unnoticed)
LOAD_CHUNK = 1000  # lines per Redis round trip while a batch's lines are copied in
_FIELDS = ("total", "completed", "failed")
_TIMES = (
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def batch_not_found(batch_id: str) -> OpenAIError:
    return OpenAIError(f"No batch found with id '{batch_id}'.", status=404, param="batch_id", code="batch_not_found")


def decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {text(k): text(v) for k, v in raw.items()}


def to_batch(meta: dict[str, str]) -> Batch:
    data: dict[str, Any] = {
        k: meta[k] for k in ("id", "endpoint", "input_file_id", "completion_window", "status") if k in meta
    }
    for k in _TIMES:
        if meta.get(k):
            data[k] = int(meta[k])
    for k in ("output_file_id", "error_file_id"):
        if meta.get(k):
            data[k] = meta[k]
    data["request_counts"] = {k: int(meta.get(k, 0)) for k in _FIELDS}
    if meta.get("metadata"):
        data["metadata"] = orjson.loads(meta["metadata"])
    if meta.get("errors"):
        data["errors"] = BatchErrors(data=orjson.loads(meta["errors"]))
    return Batch.model_validate(data)


def output_file_id(batch_id: str, kind: str) -> str:
    """The id of a batch's output (``o``) or error (``e``) file: the same whoever writes it."""
    return "file-" + uuid.uuid5(uuid.NAMESPACE_URL, f"genmesh:{batch_id}:{kind}").hex


class BatchStore:
    def __init__(
        self, store: RedisClient, files: FileStore, settings: GatewaySettings, config: RoutingConfig | None = None
    ) -> None:
        self.store = store
        # the served models (none for the keys CLI, which only purges: it creates no batch)
        self.kinds = {name: route.kind for name, route in config.models.items()} if config else {}
        self.files = files
        self.keyspace = store.keyspace
        self.settings = settings
        # a batch, its lines and its place in the indexes outlive its window by the files' TTL
        self.ttl_ms = int((settings.batch_window_s + settings.files_ttl_s) * 1000)

    def keys(self, owner: str, batch_id: str) -> BatchKeys:
        return self.keyspace.batch(owner, batch_id)

    async def meta(self, owner: str, batch_id: str) -> dict[str, str]:
        return decode(await self.store.call(self.store.redis.hgetall(self.keys(owner, batch_id).meta)))

    async def get(self, owner: str, batch_id: str) -> Batch:
        meta = await self.meta(owner, batch_id)
        if not meta.get("id") or not meta.get("status"):  # none, or a remnant after Redis lost data
            raise batch_not_found(batch_id)
        try:
            return to_batch(meta)
        except (ValueError, TypeError) as exc:  # never a 500 for what Redis holds
            raise batch_not_found(batch_id) from exc

    async def create(
        self,
        owner: str,
        input_file: FileObject,
        data: bytes,
        endpoint: str,
        window: str,
        metadata: dict[str, str] | None,
        output_ttl_s: int | None = None,
    ) -> Batch:
        served = functools.partial(served_model, await self._served_kinds(), endpoint)
        settings = self.settings
        rules = LineRules(settings.max_body_bytes, settings.max_json_depth, served, settings.max_json_containers)
        checked = await asyncio.to_thread(check, data, endpoint, self.settings.batch_max_lines, rules)
        if checked.unknown_models:  # as many refused requests, in the key's RPM window
            rate = self.keyspace.key_id(owner).rate
            await self.store.call(self.store.scripts.count_requests(keys=[rate], args=[checked.unknown_models]))
        now = int(time.time())
        batch_id = f"batch_{uuid.uuid4().hex}"
        keys = self.keys(owner, batch_id)
        fields: dict[str, str | int] = {
            "id": batch_id,
            "endpoint": endpoint,
            "input_file_id": input_file.id,
            "completion_window": window,
            "created_at": now,
            "expires_at": now + int(self.settings.batch_window_s),
        }
        if output_ttl_s is not None:
            fields["output_ttl_s"] = output_ttl_s
        if metadata is not None:
            fields["metadata"] = orjson.dumps(metadata).decode()
        if checked.errors:
            fields |= {"status": "failed", "failed_at": now, "total": 0}
            fields["errors"] = orjson.dumps([e.model_dump() for e in checked.errors]).decode()
        else:
            await self._check_room(owner, checked.models)
            await self._load(keys, data, checked.custom_ids)
            fields |= {"status": "in_progress", "in_progress_at": now, "total": len(checked.custom_ids)}
            fields |= {f"m:{model}": n for model, n in checked.models.items()}
            # named as active before it exists: a runner never drops a young entry (runner.py)
            active = self.keyspace.active_batches()
            await self.store.call(self.store.redis.zadd(active, {f"{owner}|{batch_id}": now * 1000}))
            await self.store.call(self.store.redis.pexpire(active, self.ttl_ms))
        cap = 0 if checked.errors else self.settings.batch_max_active_per_key
        end_ms = (now + int(self.settings.batch_window_s) + ACTIVE_GRACE_S) * 1000
        args: list[Any] = [self.ttl_ms, cap, end_ms, self.settings.batch_queue_max_lines]
        for k, v in fields.items():
            args += [k, v]
        index_keys = [self.keyspace.batches(owner), *room_keys(self.keyspace, owner)]
        room = await self.store.call(self.store.scripts.create_batch(keys=[*keys.all(), *index_keys], args=args))
        if int(room[0]):
            await self.store.call(self.store.redis.delete(*keys.all()))  # a race past a cap: its lines go
            raise no_room(self.settings, room)
        return to_batch({k: str(v) for k, v in fields.items()})

    async def _served_kinds(self) -> dict[str, str]:
        """The models a line may name: this replica's, and those other live replicas sharing this Redis
        route (``KeySpace.served_models``, renewed by each replica's runner; their kind unknown here, so
        a line must name them: a line without ``model`` takes one of this replica's)."""
        now_ms = int(time.time() * 1000)
        live = await self.store.call(self.store.redis.zrangebyscore(self.keyspace.served_models(), now_ms, "+inf"))
        return {**dict.fromkeys((text(m) for m in live if isinstance(m, bytes | str)), "elsewhere"), **self.kinds}

    async def _check_room(self, owner: str, models: dict[str, int]) -> None:
        """Refuse a batch past the key's batches in progress or enqueued lines before its lines are
        copied in (``create_batch.lua`` checks again, atomically)."""
        keys, args = room_keys(self.keyspace, owner), room_args(self.settings, models)
        room = await self.store.call(self.store.scripts.batch_room(keys=keys, args=args))
        if int(room[0]):
            raise no_room(self.settings, room)

    async def ended(self, owner: str, batch_id: str) -> None:
        """The batch no longer counts against its key's batches in progress, nor its lines as enqueued
        (the hash is small: at most one field per model of each batch in progress)."""
        redis, queued = self.store.redis, self.keyspace.queued_lines_of(owner)
        await self.store.call(redis.zrem(self.keyspace.active_batches_of(owner), batch_id))
        fields = [f for f in map(text, await self.store.call(redis.hkeys(queued))) if f.startswith(f"{batch_id}|")]
        if fields:
            await self.store.call(redis.hdel(queued, *fields))

    async def _load(self, keys: BatchKeys, data: bytes, custom_ids: list[str]) -> None:
        """Copy the lines in, in chunks (the batch object, written last, makes them live)."""
        chunk: dict[int, bytes] = {}
        for idx, (_, line) in enumerate(requests(data)):
            chunk[idx] = line
            if len(chunk) == LOAD_CHUNK or idx == len(custom_ids) - 1:
                ids = {i: custom_ids[i] for i in chunk}
                try:
                    async with self.store.redis.pipeline(transaction=False) as pipe:
                        pipe.hset(keys.input, mapping=chunk)  # type: ignore[arg-type]
                        pipe.hset(keys.ids, mapping=ids)  # type: ignore[arg-type]
                        pipe.rpush(keys.pending, *chunk)
                        for key in (keys.input, keys.ids, keys.pending):
                            pipe.pexpire(key, self.ttl_ms)
                        await pipe.execute()
                except (RedisError, OSError) as exc:
                    self.store.metrics.redis_errors.inc()
                    raise RedisUnavailable(f"batch store unavailable: {type(exc).__name__}") from exc
                chunk = {}
            if idx == len(custom_ids) - 1:
                break

    async def page(self, owner: str, limit: int, after: str | None) -> BatchList:
        index = self.keyspace.batches(owner)
        redis = self.store.redis
        missing = OpenAIError(f"No batch found with id '{after}'.", status=404, param="after", code="batch_not_found")
        start = await start_after(self.store, index, after, missing)
        found: Any = await self.store.call(redis.zrevrange(index, start, start + limit))
        ids = [text(i) for i in found]
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for batch_id in ids[:limit]:
                    pipe.hgetall(self.keys(owner, batch_id).meta)
                metas = [decode(m) for m in await pipe.execute()]
        except (RedisError, OSError) as exc:
            self.store.metrics.redis_errors.inc()
            raise RedisUnavailable(f"batch store unavailable: {type(exc).__name__}") from exc
        data = [to_batch(m) for m in metas if m.get("id") and m.get("status")]
        return BatchList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(ids) > limit,
        )

    async def cancel(self, owner: str, batch_id: str) -> Batch:
        keys = self.keys(owner, batch_id)
        status = text(await self.store.call(self.store.scripts.cancel_batch(keys=keys.all(), args=[int(time.time())])))
        if not status:
            raise batch_not_found(batch_id)
        if status in TERMINAL_BATCH_STATUSES or status == "finalizing":
            raise OpenAIError(
                f"Cannot cancel a batch with status '{status}'.",
                status=409,
                param="batch_id",
                code="batch_not_cancellable",
            )
        return await self.get(owner, batch_id)

    async def unfinished(self) -> dict[str, int]:
        """Lines of running batches not finished yet, per model (all replicas; for the metrics)."""
        entries: Any = await self.store.call(self.store.redis.zrange(self.keyspace.active_batches(), 0, -1))
        out: dict[str, int] = {}
        for raw in entries:
            owner, _, batch_id = text(raw).rpartition("|")
            meta = await self.meta(owner, batch_id)
            if meta.get("status") not in ("in_progress", "cancelling") or meta.get("closing"):
                continue
            for k, v in meta.items():
                if k.startswith("m:"):
                    model = k[2:]
                    out[model] = out.get(model, 0) + int(v) - int(meta.get(f"d:{model}", 0))
        return out

    # -- the runner's side -------------------------------------------------------------------------

    async def claim(self, owner: str, batch_id: str) -> list[Any]:
        ttl_ms = int(self.settings.batch_lease_ttl_s * 1000)
        return list(
            await self.store.call(self.store.scripts.claim_line(keys=self.keys(owner, batch_id).all(), args=[ttl_ms]))
        )

    async def done(self, owner: str, batch_id: str, idx: int, kind: str, line: bytes, model: str) -> list[int]:
        """Write a line's result once. A result over ``batch_output_line_max_bytes`` becomes an error line;
        one past the batch's ``batch_output_max_bytes`` closes the batch 'failed' (``lua/line_done.lua``);
        with Redis at its budget the line is not written (``RedisUnavailable``: its lease lapses and it
        runs again later)."""
        keys = self.keys(owner, batch_id)
        cap = self.settings.batch_output_line_max_bytes
        if len(line) > cap:
            found: Any = await self.store.call(self.store.redis.hget(keys.ids, str(idx)))
            custom_id = text(found or b"")
            kind, line = "e", quota_line(custom_id, "batch_output_line_max_bytes", cap, len(line))
        try:
            await self.files.quotas.budget(len(line))
        except OpenAIError as exc:
            raise RedisUnavailable(exc.message) from exc
        limit = self.settings.batch_output_max_bytes
        errors = orjson.dumps(
            [
                {
                    "code": "quota_exceeded",
                    "message": f"the batch's results passed batch_output_max_bytes ({limit} bytes); "
                    "the lines done so far are in its output and error files",
                    "param": None,
                    "line": None,
                }
            ]
        )
        args: list[Any] = [idx, kind, line, model, limit, int(time.time()), errors]
        res = await self.store.call(self.store.scripts.line_done(keys=keys.all(), args=args))
        return [int(v) for v in res]

    async def give_back(self, owner: str, batch_id: str, idx: int) -> None:
        await self.store.call(self.store.scripts.return_line(keys=self.keys(owner, batch_id).all(), args=[idx]))

    async def renew(self, owner: str, batch_id: str, indexes: list[int]) -> None:
        ttl_ms = int(self.settings.batch_lease_ttl_s * 1000)
        keys = self.keys(owner, batch_id).all()
        await self.store.call(self.store.scripts.renew_lines(keys=keys, args=[ttl_ms, *indexes]))

    async def close(self, owner: str, batch_id: str, target: str) -> str:
        keys = self.keys(owner, batch_id).all()
        res = await self.store.call(self.store.scripts.close_batch(keys=keys, args=[target, int(time.time())]))
        return text(res)

    async def finish(self, owner: str, batch_id: str, closing: str, token: str) -> None:
        """Write the output and error files of a batch whose end is decided, chunk by chunk in line
        order, and end it. Any replica may do it (again): the files' ids and bytes follow from what
        Redis holds; ``token`` is the finalizer lock's value, which fences every chunk written."""
        keys = self.keys(owner, batch_id)
        meta = await self.meta(owner, batch_id)
        if not meta.get("status") or meta.get("status") in TERMINAL_BATCH_STATUSES:
            await self.ended(owner, batch_id)
            return
        total = int(meta.get("total", 0))
        ttl_s = float(meta.get("output_ttl_s") or self.files.ttl_s)
        ttl_ms = int(ttl_s * 1000)
        ids = {kind: output_file_id(batch_id, kind) for kind in ("o", "e")}
        writers = {k: self.files.writer(owner, ids[k], ttl_ms, keys.finalizer, token) for k in ids}
        counts = {"o": 0, "e": 0}
        try:
            async for kind, value in ordered_results(
                self.store, keys, total, closing == "expired", self.files.chunk_bytes
            ):
                counts[kind] += 1
                await writers[kind].write(value + b"\n")
            for w in writers.values():
                await w.close()
        except Fenced:
            return  # another replica took the finish over
        now = int(time.time())
        args: list[Any] = [closing, now, counts["o"], counts["e"], ttl_ms, token]
        file_keys: list[str] = []
        for kind, w in writers.items():
            file_keys += self.keyspace.file(owner, ids[kind])
            if not w.size:
                args += ["", "", "", ""]
                continue
            name = f"{batch_id}_{'output' if kind == 'o' else 'error'}.jsonl"
            obj = self.files.describe(ids[kind], name, "batch_output", w.size, now, ttl_s)
            args += [ids[kind], obj.model_dump_json(), w.size, w.chunks]
        all_keys = [*keys.all(), *file_keys, self.keyspace.files(owner), keys.finalizer]
        if int(await self.store.call(self.store.scripts.finish_batch(keys=all_keys, args=args))) == 1:
            for kind, w in writers.items():  # counted in the total, never refused: admitted line by line
                if w.size:
                    await self.files.quotas.count_output(owner, ids[kind], w.size, ttl_ms)
        await self.store.call(self.store.redis.zrem(self.keyspace.active_batches(), f"{owner}|{batch_id}"))
        await self.ended(owner, batch_id)


def output_line(custom_id: str, status: int, request_id: str, body: bytes) -> bytes:
    """One line of the output or error file: the response as the endpoint gave it."""
    try:
        parsed = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        parsed = {"error": {"message": body[:500].decode("utf-8", "replace"), "type": "upstream_error"}}
    if not isinstance(parsed, dict):
        parsed = {"value": parsed}
    line = {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": parsed},
        "error": None,
    }
    return orjson.dumps(line)
