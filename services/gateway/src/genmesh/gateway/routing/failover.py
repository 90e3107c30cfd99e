"""Mid-stream failover (route key ``mid_stream_failover: true``): a stream whose upstream dies goes on
from another upstream, and the client sees one stream.

``Continuation`` watches the relayed events of a chat or completion stream: the text so far, how
many events carried text (one per generated token with our engine and vLLM's, which stream every
token), the first chunk's ``id`` and ``created``. When an event says the stream failed (the relay's
own error event, or one the upstream sent: a microservice whose engine died), the request is resent
with the text so far as a prefill -- chat: an assistant message continued with vLLM's
``continue_final_message: true`` and ``add_generation_prompt: false``; a completion, or an OPEA
string ``messages``: the text appended to the prompt -- and ``max_tokens`` less what was generated.
The new upstream's chunks get the first ``id`` and ``created``, its role-only opening chunk is
dropped, and its usage is put right: ``completion_tokens`` adds the tokens generated before,
``prompt_tokens`` takes them off again (the prefill counted them as prompt).

Only plain text streams fail over: one choice, no tools, no structured output, no ``echo`` or
``best_of``, and not ``/v1/responses``. A stream that missed its total deadline does not.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from genmesh.protocol.common import OUTPUT_TOKEN_LIMITS
from genmesh.protocol.sse import event as sse_event
from genmesh.relay import DONE_EVENT, Outcome, split_events

_ERROR = b'data: {"error"'
_NOT_AGAIN = (b'"code":"total_timeout"', b'"code": "total_timeout"')


def eligible(path: str, body: dict[str, Any]) -> bool:
    """Whether this streamed request can be resent with its text so far as a prefill."""
    if path not in ("/v1/chat/completions", "/v1/completions"):
        return False
    if (body.get("n") or 1) != 1 or (body.get("best_of") or 1) != 1 or body.get("echo"):
        return False
    if body.get("tools") or body.get("functions") or body.get("guided_json") or body.get("guided_regex"):
        return False
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return False
    prompt = body.get("messages") if path == "/v1/chat/completions" else body.get("prompt")
    return isinstance(prompt, str) or (path == "/v1/chat/completions" and isinstance(prompt, list))


class Continuation:
    """What one stream has produced so far, across the upstreams that served it."""

    def __init__(self, path: str, body: dict[str, Any]) -> None:
        self.path = path
        self.body = body
        self.text: list[str] = []
        self.tokens = 0  # events that carried text: tokens generated, before this leg and in it
        self.before = 0  # of which before this leg
        self.legs = 1
        self.id: Any = None
        self.created: Any = None
        self.failure = b""  # the failure events of the last leg, sent when no failover is possible
        self.finished = False  # a finish_reason or [DONE] went out: nothing is left to generate

    # -- watching a leg ------------------------------------------------------------------------------

    def see_all(self, chunk: bytes) -> tuple[bytes, bool]:
        """A relayed chunk's events (``see``): what to send on, and whether the leg failed in it
        (what came before the failure is sent on)."""
        sent: list[bytes] = []
        for event in split_events(chunk):
            out = self.see(event)
            if out is None:
                return b"".join(sent), True
            sent.append(out)
        return b"".join(sent), False

    def see(self, event: bytes) -> bytes | None:
        """The event to send on (maybe rewritten), b"" to drop it, or None: the leg failed here."""
        at = event.find(_ERROR)
        if at != -1:
            self.failure = event[at:] if event.rstrip().endswith(b"[DONE]") else event[at:] + DONE_EVENT
            return None
        payload = event.split(b"data:", 1)[-1].strip()
        if payload == b"[DONE]":
            self.finished = True
            return event
        try:
            chunk = orjson.loads(payload)
        except ValueError:
            return event  # a comment or keep-alive: passed on as it is
        if not isinstance(chunk, dict):
            return event
        if self.id is None:
            self.id, self.created = chunk.get("id"), chunk.get("created")
        text, finish, role_only = _text_of(chunk)
        if text:
            self.text.append(text)
            self.tokens += 1
        self.finished = self.finished or finish
        if self.legs == 1:
            return event
        if role_only:
            return b""  # the new upstream's opening chunk: the client has had one
        chunk["id"], chunk["created"] = self.id, self.created
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            _shift(usage, self.before)
        return sse_event(orjson.dumps(chunk).decode())

    def ended_early(self, failure: bytes) -> bool:
        """The leg ended without its last event: a failure (``failure`` is what to say) unless the
        choice had finished (then the end is relayed as it came)."""
        if self.finished:
            return False
        self.failure = failure
        return True

    def retry(self) -> bool:
        """A failure worth resending: text is still to come and the deadline was not the cause."""
        return not self.finished and not any(marker in self.failure for marker in _NOT_AGAIN)

    # -- the next leg --------------------------------------------------------------------------------

    def resend(self) -> bytes:
        """The request for the next upstream: the original with the text so far as a prefill."""
        self.legs += 1
        self.before = self.tokens
        body = dict(self.body)
        so_far = "".join(self.text)
        if so_far:
            if self.path == "/v1/chat/completions" and isinstance(body.get("messages"), list):
                body["messages"] = [*body["messages"], {"role": "assistant", "content": so_far}]
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
            elif self.path == "/v1/chat/completions":
                body["messages"] = str(body["messages"]) + so_far
            else:
                body["prompt"] = str(body["prompt"]) + so_far
            for limit in OUTPUT_TOKEN_LIMITS:
                if isinstance(body.get(limit), int):
                    body[limit] = max(1, body[limit] - self.tokens)
        try:
            return orjson.dumps(body)
        except TypeError:  # integers beyond 64 bits, which orjson refuses and json does not
            return json.dumps(body, separators=(",", ":")).encode()

    def account(self, out: Outcome) -> None:
        """The whole stream's usage, for accounting, from the last leg's (its prompt held the earlier tokens)."""
        usage = {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens}
        _shift(usage, self.before)
        out.prompt_tokens, out.completion_tokens = usage["prompt_tokens"], usage["completion_tokens"]


def _text_of(chunk: dict[str, Any]) -> tuple[str, bool, bool]:
    """A chunk's text, whether it finishes the choice, and whether it is a role-only opening chunk."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", False, False
    choice = choices[0]
    finish = choice.get("finish_reason") is not None
    delta = choice.get("delta")
    if isinstance(delta, dict):
        text = delta.get("content") or ""
        return (text if isinstance(text, str) else ""), finish, (not text and not finish and "role" in delta)
    text = choice.get("text") or ""
    return (text if isinstance(text, str) else ""), finish, False


def _shift(usage: dict[str, Any], before: int) -> None:
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    usage["prompt_tokens"] = max(0, prompt - before)
    usage["completion_tokens"] = completion + before
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
