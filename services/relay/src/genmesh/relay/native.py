"""How a TGI token stream (``/generate_stream``) ends when relayed: its last event carries
``generated_text``; a failure before it is TGI's error event ``{"error", "error_type"}``, with no
``[DONE]`` (TGI sends none)."""

from __future__ import annotations

from genmesh.protocol import OpenAIError
from genmesh.protocol.sse import native_error_event

from .stream import StreamEnd


class TgiStreamEnd(StreamEnd):
    def ended(self, event: bytes) -> bool:
        return b'"generated_text":"' in event or b'"error_type"' in event

    def failure(self, err: OpenAIError) -> bytes:
        return native_error_event(err)
