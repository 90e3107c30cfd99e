"""What the gateway meters and bounds of audio: the seconds transcribed and the characters spoken, per
key (``usage``: ``audio_milliseconds``, ``speech_characters``) and per tenant (``/metrics``), for the
audio endpoints and for a spoken chat turn alike; a streamed speech reply cut short is charged the
characters it sent, as its engine counted them (``characters_sent``); and a spoken chat turn's
``input_audio`` parts, each bounded by ``--audio-max-bytes`` once decoded (413 naming the part's data),
before it is queued."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from pydantic import ValidationError
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError
from genmesh.protocol.audio import SPEECH_SENT_PATH, SpeechSent
from genmesh.relay import UpstreamError

from ..admission.auth import ApiKey
from ..redis.keys import USAGE_TTL_S
from ..state import GatewayState

log = logging.getLogger("genmesh.gateway.audio")
SENT_ASK_S = 8.0  # the most a cut speech reply's charge waits for its engine's count (it waits 5 s at most)
_ASK_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json")]


async def meter_audio(st: GatewayState, key: ApiKey, seconds: float, characters: int, *, request: bool = False) -> None:
    """Count a reply's audio seconds and spoken characters for ``key`` (its usage, and its minute's
    window that ``aspm`` limits) and its tenant; ``request``: an audio endpoint's request, counted in
    the key's ``requests`` here (a spoken chat turn's is counted with its tokens)."""
    if seconds > 0:
        st.metrics.audio_seconds.labels(key.tenant).inc(seconds)
    if characters > 0:
        st.metrics.speech_characters.labels(key.tenant).inc(characters)
    millis = round(seconds * 1000)
    if not key.key_id or not (millis > 0 or characters > 0 or request):
        return
    k = st.limiter.keyspace.key_id(key.key_id)
    with contextlib.suppress(RedisError, OSError):  # lost with Redis away, as a token charge is
        await st.scripts.audio_charge(keys=[k.rate, k.usage], args=[millis, characters, USAGE_TTL_S, int(request)])


async def characters_sent(st: GatewayState, base_url: str, speech_id: str, rid: bytes) -> int | None:
    """The characters a streamed speech reply sent before it was cut (asked of the upstream that
    streamed it, once, after it ended: ``SPEECH_SENT_PATH``); None when it cannot say (the caller
    then charges the whole input)."""
    deadline = time.monotonic() + SENT_ASK_S
    body = orjson.dumps({"speech_id": speech_id})
    headers = [*_ASK_HEADERS, (b"x-request-id", rid)]
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + SENT_ASK_S):
            resp = await st.upstream.post(base_url, SPEECH_SENT_PATH, body, headers)
        try:
            pieces = []
            while piece := await resp.read(deadline):
                pieces.append(piece)
                if sum(map(len, pieces)) > 4096:
                    return None
        finally:
            resp.close()
        if resp.status != 200:
            return None
        return max(0, SpeechSent.model_validate_json(b"".join(pieces)).characters)
    except (TimeoutError, UpstreamError, ValidationError) as exc:
        log.warning("the characters a cut speech reply sent are unknown (%s): charged its whole input", exc)
        return None


def check_input_audio(body: dict[str, Any], limit: int) -> None:
    """413 naming ``messages[i].content[j].input_audio.data`` when a part's audio is over ``limit``
    bytes once decoded (base64: 3 bytes per 4 characters); everything else is the engine's to check."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "input_audio":
                continue
            audio = part.get("input_audio")
            data = audio.get("data") if isinstance(audio, dict) else None
            if isinstance(data, str) and len(data) // 4 * 3 - data[-2:].count("=") > limit:
                raise OpenAIError(
                    f"the audio is larger than this server's limit of {limit} bytes",
                    status=413,
                    param=f"messages[{i}].content[{j}].input_audio.data",
                    code="file_too_large",
                )
