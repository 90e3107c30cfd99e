"""Prefix affinity: which blocks of a prompt identify the upstream whose prefix cache holds it.

The gateway has no tokenizer, so it hashes the prompt's bytes (AIBrix hashes 16-token blocks;
``affinity_block_bytes`` defaults to 64 bytes, about 16 tokens of English). The prompt is the
request's ``messages`` (chat), ``prompt`` (completions) or ``input`` (Responses, with the stored
conversation in front), serialised canonically so that two requests whose conversations start
alike give bytes that start alike. Block ``k``'s hash covers blocks ``1..k`` (a chain), so a
block hash names a whole prefix; only whole blocks count, at most ``affinity_max_blocks``.

The map from a block hash to an upstream lives in Redis (``keys.ModelKeys.prefix``, with a TTL),
written by the admission script that grants the slot (``scripts.ADMIT``), so that every gateway
replica routes a prefix alike; the script also holds the imbalance guard.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .config import ModelRoute


def prompt_bytes(body: dict[str, Any]) -> bytes:
    """The prompt of a chat, completion or Responses request as bytes (b"" when there is none)."""
    for field in ("messages", "prompt", "input"):
        value = body.get(field)
        if isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")
        if isinstance(value, list):
            try:
                return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
            except TypeError:  # integers beyond 64 bits: not a prompt any upstream takes
                return b""
    return b""


def block_hashes(data: bytes, block_bytes: int, max_blocks: int) -> tuple[str, ...]:
    """Chained hashes of the first whole blocks of ``data``, shortest prefix first."""
    out: list[str] = []
    digest = b""
    for k in range(min(len(data) // block_bytes, max_blocks)):
        digest = hashlib.blake2b(digest + data[k * block_bytes : (k + 1) * block_bytes], digest_size=12).digest()
        out.append(digest.hex())
    return tuple(out)


def prefix_of(route: ModelRoute, body: dict[str, Any]) -> tuple[str, ...]:
    """The block hashes that route this request (none unless the route uses prefix-affinity)."""
    if route.routing != "prefix-affinity":
        return ()
    return block_hashes(prompt_bytes(body), route.affinity_block_bytes, route.affinity_max_blocks)
