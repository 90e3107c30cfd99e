"""Relaying one upstream reply to our client: whole events as they come, with deadlines, never buffered whole.

Streams are relayed as the upstream framed them, in whole SSE events (``data: ...`` and a blank
line): every whole event one read brought goes out, as one chunk, before the next read, so what a
stream holds is one read in hand plus what the sockets buffer (bounded by
``genmesh.protocol.server.http_server``). When the client keeps up that is one event per chunk; when
it is behind, the events that piled up meanwhile go out in one socket write. The upstream's bytes
pass unchanged and are not parsed: the relay only scans them (C-speed ``bytes`` searches) for the
first generated text (the first-token deadline is met by text, not by keep-alive comments), the
stream's last event (``StreamEnd``: ``[DONE]`` for chat and completions,
``response.completed``/``incomplete``/``failed`` for the Responses API), and a usage chunk, the one
event it parses (accounted, and dropped when ``strip_usage``: the gateway asked for it, not its
client). ``split_events`` gives a chunk's events to a consumer that rewrites them one by one.
Every way a stream can fail (connection cut, garbage, a deadline, the end without its last event)
ends it with the ``StreamEnd``'s failure events (by default one error
event and ``[DONE]``, written by sse-starlette); what the error says is the hop's own (``Failures``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from genmesh.protocol import OpenAIError
from genmesh.protocol.sse import DONE_EVENT, error_event

from .client import UpstreamError, UpstreamResponse

# A chunk carrying generated text: a non-empty chat delta "content", completion "text" or Responses "delta".
_TOKEN = re.compile(rb'"(?:content|text|delta)":"(?!")')
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_USAGE = re.compile(rb'"usage":\s*\{')
# A whole event's data is [DONE] (not the text "[DONE]" inside a chunk), or a Responses stream's
# terminal event (quotes inside generated text are escaped, so these bytes are the event's own).
_LAST = re.compile(rb'^data: ?\[DONE\]\r?$|"type":"response\.(?:completed|incomplete|failed)"', re.MULTILINE)
_MAX_EVENT = 1024 * 1024  # past this without an event's end, it is not SSE we understand: passed on as is
_MAX_UNARY_SCAN = 4 * 1024 * 1024  # a unary reply up to this is parsed whole for its usage
_USAGE_TAIL = 64 * 1024  # past it, usage is read from this many last bytes (OpenAI bodies end with it)
_USAGE_TRIES = 8  # closing braces tried as the end of the usage object (its details nest one level)


def split_events(chunk: bytes) -> list[bytes]:
    """The whole SSE events of a relayed chunk, each with its blank line (a tail without one last)."""
    events: list[bytes] = []
    start = 0
    for end in _EVENT_END.finditer(chunk):
        events.append(chunk[start : end.end()])
        start = end.end()
    if start < len(chunk):
        events.append(chunk[start:])
    return events


def _last_event_end(buf: bytes) -> int:
    """Where the last whole event in ``buf`` ends (0: none yet): after its ``\n\n`` or ``\n\r\n``."""
    lf, crlf = buf.rfind(b"\n\n"), buf.rfind(b"\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)


class StreamEnd:
    """How a relayed stream ends: ``ended`` sees whole events (one, or several in a chunk) and says
    whether the stream's last is among them; ``failure`` is what the client gets when the upstream fails before that. By
    default (chat, completions) an error event and ``[DONE]``; the Responses API says it with its
    own events (a subclass). One instance per stream: a subclass may keep what it saw."""

    def ended(self, event: bytes) -> bool:
        if b"[DONE]" not in event and b'"type":"response.' not in event:
            return False  # (a plain search first: most events are neither)
        return _LAST.search(event) is not None

    def failure(self, err: OpenAIError) -> bytes:
        return error_event(err) + DONE_EVENT


@dataclass(frozen=True)
class Failures:
    """What each failure is called at this hop: ``timeout(which)`` for a missed deadline
    ("first token" or "total"), ``broken(exc)`` for a failed connection, ``cut`` for a stream that
    ended without its last event (None: relay the end as it is)."""

    timeout: Callable[[str], OpenAIError]
    broken: Callable[[BaseException], OpenAIError]
    cut: OpenAIError | None = None


@dataclass
class Outcome:
    """What the relay learned: usage for accounting and whether it ended cleanly."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    first_token_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    usage_seen: bool = False  # the reply said its usage (else the gateway charges an estimate)
    reply_bytes: int = 0  # relayed so far
    audio_seconds: float = 0.0  # a spoken chat turn's usage: the audio transcribed (the gateway meters it)
    speech_characters: int = 0  # and the characters spoken


def _usage_from(obj: Any, out: Outcome) -> None:
    """Usage of a chat or completion reply (or chunk), or of a response (``/v1/responses``: the
    reply itself, or its final stream event)."""
    if isinstance(obj, dict) and isinstance(obj.get("response"), dict):
        obj = obj["response"]
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(usage, dict):
        out.usage_seen = True
        out.prompt_tokens = int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        out.completion_tokens = int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
        if "audio_seconds" in usage or "speech_characters" in usage:  # a spoken chat turn (genmesh's fields)
            out.audio_seconds = float(usage.get("audio_seconds") or 0.0)
            out.speech_characters = int(usage.get("speech_characters") or 0)


async def relay_stream(
    resp: UpstreamResponse,
    out: Outcome,
    failures: Failures,
    *,
    strip_usage: bool,
    first_token_deadline: float,
    total_deadline: float,
    ending: StreamEnd | None = None,
) -> AsyncGenerator[bytes, None]:
    """SSE relay, whole events as they come (deadlines are ``time.monotonic()`` values)."""
    last_event = ending or StreamEnd()
    buf = b""
    saw_done = False
    try:
        while True:
            waiting_first = out.first_token_at is None
            deadline = min(first_token_deadline, total_deadline) if waiting_first else total_deadline
            try:
                chunk = await resp.read(deadline)
            except TimeoutError as exc:
                if time.monotonic() < deadline:  # the client's own socket timeout, not our deadline
                    raise UpstreamError(str(exc)) from exc
                which = "first token" if waiting_first and first_token_deadline < total_deadline else "total"
                out.error = f"{which} timeout"
                yield buf + last_event.failure(failures.timeout(which))
                return
            if not chunk:
                break
            out.reply_bytes += len(chunk)
            buf = buf + chunk if buf else chunk
            cut = _last_event_end(buf)
            if not cut:
                if len(buf) > _MAX_EVENT:
                    yield buf
                    buf = b""
                continue
            events, buf = (buf, b"") if cut == len(buf) else (buf[:cut], buf[cut:])
            if last_event.ended(events):
                saw_done = True
            if waiting_first and (saw_done or _TOKEN.search(events)):
                out.first_token_at = time.monotonic()
            if _USAGE.search(events):
                events = _account(events, out, strip_usage)
                if not events:
                    continue
            yield events
        if buf:
            yield buf
        if not saw_done and failures.cut is not None:
            out.error = "cut"
            yield last_event.failure(failures.cut)
    except UpstreamError as exc:
        out.error = type(exc).__name__
        if not saw_done:
            yield buf + last_event.failure(failures.broken(exc.__cause__ or exc))


def _account(events: bytes, out: Outcome, strip_usage: bool) -> bytes:
    """Usage read from the events that carry it; with ``strip_usage`` the usage-only chunk
    (``choices: []``) taken out. The other events pass as they are."""
    kept: list[bytes] = []
    for event in split_events(events):
        if _USAGE.search(event):
            payload = event.split(b"data:", 1)[-1].strip()
            try:
                obj = orjson.loads(payload)
            except ValueError:
                obj = None
            _usage_from(obj, out)
            if strip_usage and isinstance(obj, dict) and obj.get("choices") == []:
                continue
        kept.append(event)
    return b"".join(kept)


async def relay_unary(resp: UpstreamResponse, out: Outcome, *, total_deadline: float) -> AsyncGenerator[bytes, None]:
    """A whole reply, chunk by chunk as it comes, its usage read at the end (for accounting): from
    the whole body up to ``_MAX_UNARY_SCAN``, past that from its last ``_USAGE_TAIL`` bytes, so
    that a reply of any size is metered while what is kept stays bounded."""
    seen: list[bytes] | None = []
    tail = b""
    while True:
        try:
            chunk = await resp.read(total_deadline)
        except (TimeoutError, UpstreamError) as exc:
            out.error = type(exc).__name__
            return  # headers are sent: all we can do is end the body short
        if not chunk:
            break
        out.reply_bytes += len(chunk)
        if seen is not None:
            seen.append(chunk)
            if out.reply_bytes > _MAX_UNARY_SCAN:
                tail, seen = b"".join(seen)[-_USAGE_TAIL:], None
        else:
            tail = (tail + chunk)[-_USAGE_TAIL:] if len(chunk) < _USAGE_TAIL else chunk[-_USAGE_TAIL:]
        yield chunk
    if b"json" not in (resp.header(b"content-type") or b""):
        return
    if seen is not None:
        with contextlib.suppress(ValueError):
            _usage_from(orjson.loads(b"".join(seen) if len(seen) != 1 else seen[0]), out)
    else:
        usage_in_tail(tail, out)


def usage_in_tail(tail: bytes, out: Outcome) -> None:
    """The usage object of a JSON body from the body's last bytes: the last ``"usage":{`` (a key
    of the body's own: inside a string its quotes are escaped), up to the first closing brace after
    it that ends a JSON object."""
    begin = max((m.end() - 1 for m in _USAGE.finditer(tail)), default=-1)
    if begin < 0:
        return
    end = begin
    for _ in range(_USAGE_TRIES):
        end = tail.find(b"}", end + 1)
        if end < 0:
            return
        try:
            usage = orjson.loads(tail[begin : end + 1])
        except ValueError:
            continue
        _usage_from({"usage": usage}, out)
        return
