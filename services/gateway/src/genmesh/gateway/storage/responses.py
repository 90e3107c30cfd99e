"""Stored ``/v1/responses`` conversations in Redis, shared by every gateway replica.

One HASH per response (``KeySpace.response``): ``owner`` (the id of the API key that made it;
empty without keys) and ``record``, JSON of the response object and the conversation it answered
(``input``: every input item sent to the model, ids included, history first). A follow-up with
``previous_response_id`` is that input plus that response's output plus its own input, so any
replica rebuilds it from one read. Each key lives ``responses_ttl_s`` and a record over
``responses_max_bytes`` is never written. Writing (two fields and the TTL) and deleting (only by
its owner) are Lua scripts, so neither is seen half done.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError, service_unavailable

from ..admission.quotas import Quotas
from ..metrics import GatewayMetrics
from ..redis.client import RedisUnavailable
from ..redis.keys import KeySpace

log = logging.getLogger("genmesh.gateway.responses")

_SAVE = """
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'record', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
_DELETE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def not_found(response_id: str, param: str | None = None) -> OpenAIError:
    """Missing, expired and another key's responses all look the same: 404."""
    shown = response_id if len(response_id) <= 100 else response_id[:100] + "…"
    what = "Previous response" if param == "previous_response_id" else "Response"
    code = "previous_response_not_found" if param == "previous_response_id" else "response_not_found"
    return OpenAIError(f"{what} with id '{shown}' not found.", status=404, param=param, code=code)


def too_large(limit: int, param: str) -> OpenAIError:
    return OpenAIError(
        f"the stored conversation would exceed this gateway's limit of {limit} bytes per response; "
        "start a new conversation (without 'previous_response_id') or send less input",
        status=413,
        param=param,
        code="conversation_too_large",
    )


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    input: list[Any]

    def conversation(self) -> list[Any]:
        """The input a follow-up continues: this response's input, then its output."""
        output = self.response.get("output")
        return [*self.input, *(output if isinstance(output, list) else [])]


def input_items(value: str | list[Any]) -> list[Any]:
    """A request's ``input`` as items in the form OpenAI stores them: each item (an object) with an
    id, and a message's text as a content part."""
    items: list[Any] = [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value
    out: list[Any] = []
    for raw in items:
        item: Any = raw
        if isinstance(raw, dict):
            kind = raw.get("type", "message")
            item = dict[str, Any](raw)
            if not isinstance(item.get("id"), str):
                item["id"] = f"{_ID_PREFIX.get(str(kind), 'item')}_{uuid.uuid4().hex}"
            if kind == "message" and isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["type"] = "message"
                item["content"] = [{"type": part, "text": item["content"]}]
        out.append(item)
    return out


class ResponseStore:
    def __init__(
        self,
        redis: Redis,
        keyspace: KeySpace,
        metrics: GatewayMetrics,
        ttl_s: float,
        max_bytes: int,
        quotas: Quotas | None = None,
    ) -> None:
        self.quotas = quotas
        self.redis = redis
        self.keyspace = keyspace
        self.metrics = metrics
        self.ttl_ms = int(ttl_s * 1000)
        self.max_bytes = max_bytes
        self._save = redis.register_script(_SAVE)
        self._delete = redis.register_script(_DELETE)

    def _unavailable(self, exc: BaseException) -> OpenAIError:
        self.metrics.redis_errors.inc()
        message = f"response store unavailable: {type(exc).__name__}; try again shortly"
        return service_unavailable(message, code="queue_store_unavailable")

    async def load(self, response_id: str, owner: str, param: str | None = None) -> StoredResponse:
        try:
            stored_owner, record = await self.redis.hmget(self.keyspace.response(response_id), ["owner", "record"])
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        if isinstance(stored_owner, bytes):
            stored_owner = stored_owner.decode()
        if record is None or stored_owner != owner:
            raise not_found(response_id, param)
        data = json.loads(record)
        return StoredResponse(data["response"], data["input"])

    def encode(self, response: dict[str, Any], conversation: list[Any]) -> bytes | None:
        """The record to store, or None when it is over the size cap."""
        try:
            record = orjson.dumps({"response": response, "input": conversation})
        except TypeError:  # integers beyond 64 bits, which orjson refuses and json does not
            record = json.dumps({"response": response, "input": conversation}, separators=(",", ":")).encode()
        return record if len(record) <= self.max_bytes else None

    async def save(self, response_id: str, owner: str, record: bytes) -> None:
        """Store a response once the owner's quota (``responses_key_max_count``) and the Redis budget
        admit it; refused: an ``OpenAIError`` and nothing stored."""
        key = self.keyspace.response(response_id)
        if self.quotas is not None:
            try:
                await self.quotas.reserve_response(owner, response_id, len(record))
            except RedisUnavailable as exc:
                raise self._unavailable(exc) from exc
        try:
            await self._save(keys=[key], args=[owner, record, self.ttl_ms])
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc

    async def delete(self, response_id: str, owner: str) -> None:
        try:
            deleted = await self._delete(keys=[self.keyspace.response(response_id)], args=[owner])
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        if not deleted:
            raise not_found(response_id)
        if self.quotas is not None:
            try:
                await self.quotas.release_response(owner, response_id)
            except RedisUnavailable:  # the entry lapses with the response's TTL
                log.warning("stored response %s deleted; its quota entry lapses with its TTL", response_id)
