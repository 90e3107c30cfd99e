"""An API key's room for one more batch: its batches in progress (``batch_max_active_per_key``) and
its enqueued lines per model (``batch_queue_max_lines``, OpenAI's batch queue limit counted in lines),
both checked in Lua (``lua/_batch_room.lua``) before a batch's lines are copied in and again, atomically,
when the batch is created."""

from __future__ import annotations

from typing import Any

from genmesh.protocol import OpenAIError
from genmesh.protocol.errors import quote

from ..redis.client import text
from ..redis.keys import KeySpace
from ..settings import GatewaySettings


def room_keys(keyspace: KeySpace, owner: str) -> list[str]:
    return [keyspace.active_batches_of(owner), keyspace.queued_lines_of(owner)]


def room_args(settings: GatewaySettings, models: dict[str, int]) -> list[Any]:
    args: list[Any] = [settings.batch_max_active_per_key, settings.batch_queue_max_lines]
    for model, lines in models.items():
        args += [model, lines]
    return args


def no_room(settings: GatewaySettings, room: list[Any]) -> OpenAIError:
    """The 429 for a script's answer ``{1}`` (batches in progress) or ``{2, model}`` (enqueued lines)."""
    if int(room[0]) == 1:
        cap = settings.batch_max_active_per_key
        message = (
            f"quota exceeded: this API key already has {cap} batches in progress "
            f"(--batch-max-active-per-key {cap}); wait for one to end or cancel one"
        )
    else:
        cap, model = settings.batch_queue_max_lines, quote(repr(text(room[1])), 80)
        message = (
            f"quota exceeded: this batch would take this API key's enqueued lines of model {model} past {cap} "
            f"(--batch-queue-max-lines {cap}, across its batches in progress); wait for one to end or cancel one"
        )
    return OpenAIError(
        message, status=429, type="rate_limit_error", code="quota_exceeded", headers={"Retry-After": "60"}
    )
