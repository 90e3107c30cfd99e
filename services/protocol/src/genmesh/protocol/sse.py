"""Server-Sent Events as every hop writes them: one event (sse-starlette's framing), the error event
a chat or completion stream ends with, ``[DONE]``, and a Responses stream's failed ending (an
``error`` event, then ``response.failed``). The engine, the relay and the gateway all frame with
these, so a stream reads the same whichever hop ended it."""

from __future__ import annotations

import orjson
from sse_starlette import ServerSentEvent

from .errors import OpenAIError
from .native_errors import native_status_and_body
from .response_objects import ErrorEvent, ResponseErrorDetail, ResponseLifecycleEvent, ResponseObject


def event(data: str, name: str | None = None) -> bytes:
    """One event: ``data: ...`` (after ``event: <name>`` when named) and a blank line."""
    return ServerSentEvent(data=data, event=name, sep="\n").encode()


def error_event(err: OpenAIError) -> bytes:
    """A chat or completion stream's error: the OpenAI error body as one event."""
    return event(err.to_response().model_dump_json())


DONE_EVENT = event("[DONE]")


def native_error_event(err: OpenAIError) -> bytes:
    """A TGI token stream's error: TGI's ``{"error", "error_type"}`` body as one event (TGI sends no ``[DONE]``)."""
    return event(orjson.dumps(native_status_and_body(err)[1]).decode())


def response_failed(sequence: int, response: ResponseObject, err: OpenAIError) -> bytes:
    """How a Responses stream ends on ``err``: an ``error`` event numbered ``sequence``, then
    ``response.failed`` numbered ``sequence + 1`` with ``response`` marked failed (``server_error``
    for a 5xx, ``invalid_prompt`` otherwise)."""
    error = ErrorEvent(sequence_number=sequence, code=err.code, message=err.message, param=err.param)
    code = "server_error" if err.status >= 500 else "invalid_prompt"
    detail = ResponseErrorDetail(code=code, message=err.message)
    failed = response.model_copy(update={"status": "failed", "error": detail})
    end = ResponseLifecycleEvent(type="response.failed", sequence_number=sequence + 1, response=failed)
    return event(error.model_dump_json(), error.type) + event(end.model_dump_json(), end.type)
