"""How a TGI token stream (``/generate_stream``) ends when relayed: its last event carries
``generated_text``; a failure before it is TGI's error event ``{"error", "error_type"}``, with no
``[DONE]`` (TGI sends none)."""

from __future__ import annotations

import orjson
from sse_starlette import ServerSentEvent

from genmesh.protocol import OpenAIError
from genmesh.protocol.native_errors import native_status_and_body

from .stream import StreamEnd


class TgiStreamEnd(StreamEnd):
    def ended(self, event: bytes) -> bool:
        return b'"generated_text":"' in event or b'"error_type"' in event

    def failure(self, err: OpenAIError) -> bytes:
        body = native_status_and_body(err)[1]
        return ServerSentEvent(data=orjson.dumps(body).decode(), sep="\n").encode()
