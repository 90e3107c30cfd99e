"""The Lua scripts: every multi-key change of the queue, leases, limits, files and batches happens atomically.

Each script is a file in ``lua/`` named after its field of :class:`Scripts` (``lua/admit.lua`` is
``Scripts.admit``), as arq and rq keep theirs. A line ``--! include NAME`` inlines the fragment
``lua/NAME.lua`` (``_prelude``: the model queue's state and helpers, documented at its top; ``_now``:
Redis' clock; ``_batch_room``: an owner's room for one more batch). Adding a script is adding its file
and its field.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

_LUA = files(__package__) / "lua"
_INCLUDE = re.compile(r"^--! include (\w+)\n", re.MULTILINE)


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` with its includes inlined."""
    text = (_LUA / f"{name}.lua").read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: source(m.group(1)), text)


@dataclass(frozen=True)
class Scripts:
    admit: AsyncScript
    release: AsyncScript
    renew: AsyncScript
    reclaim: AsyncScript
    limit: AsyncScript
    account: AsyncScript
    account_once: AsyncScript
    count_requests: AsyncScript
    renew_concurrent: AsyncScript
    remember: AsyncScript
    sample: AsyncScript
    save_file: AsyncScript
    delete_file: AsyncScript
    append_chunk: AsyncScript
    reserve: AsyncScript
    unreserve: AsyncScript
    create_batch: AsyncScript
    batch_room: AsyncScript
    claim_line: AsyncScript
    line_done: AsyncScript
    return_line: AsyncScript
    renew_lines: AsyncScript
    cancel_batch: AsyncScript
    close_batch: AsyncScript
    finish_batch: AsyncScript
    take_batch_slot: AsyncScript
    renew_batch_slots: AsyncScript
    preempt_batch: AsyncScript
    audio_charge: AsyncScript
    login_attempt: AsyncScript

    @classmethod
    def register(cls, redis: Redis) -> Scripts:
        return cls(**{f.name: redis.register_script(source(f.name)) for f in dataclasses.fields(cls)})
