"""``NativeExchange``: TEI's ``/embed`` and ``/similarity``, TGI's ``/generate`` and
``/generate_stream``, and their ``POST /``, through the gateway: queued, limited and metered as
``/v1/embeddings`` and ``/v1/completions`` are, on the embedding or the chat model's slots (neither
body names a model: the one model of the kind).

The body is relayed untouched (no ``stream_options``: TGI has none); refusals are TEI's and TGI's
``{"error", "error_type"}``. Their replies carry no ``usage``: the tokens are the engine's headers
(TEI's ``x-compute-tokens``, TGI's ``x-prompt-tokens`` and ``x-generated-tokens``), else the
estimate (a stream: its ``max_new_tokens``, TGI's default when unset)."""

from __future__ import annotations

from typing import Any

import orjson

from genmesh.protocol import OpenAIError
from genmesh.protocol.native_errors import native_status_and_body
from genmesh.protocol.tei import COMPAT_PATH, TEI_EMBED_PATH, TEI_SIMILARITY_PATH
from genmesh.protocol.tgi import DEFAULT_MAX_NEW_TOKENS, TGI_STREAM_PATH, is_tgi_request
from genmesh.relay import Outcome, StreamEnd, UpstreamResponse
from genmesh.relay.native import TgiStreamEnd

from ..admission.auth import ApiKey
from ..admission.tickets import Ticket
from ..routing.config import ModelRoute
from . import metering
from .dispatch import route_of
from .exchange import Exchange


def _int(value: bytes | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


class NativeExchange(Exchange):
    def _embeds(self, body: dict[str, Any]) -> bool:
        if self.path == COMPAT_PATH:
            return not is_tgi_request(body)
        return self.path in (TEI_EMBED_PATH, TEI_SIMILARITY_PATH)

    def streams(self, body: dict[str, Any]) -> bool:
        return self.path == TGI_STREAM_PATH or (
            self.path == COMPAT_PATH and is_tgi_request(body) and body.get("stream") is True
        )

    async def _route(self, key: ApiKey, body: dict[str, Any]) -> ModelRoute:
        try:
            return route_of(self.st, body, self.path, "embeddings" if self._embeds(body) else "chat")
        except OpenAIError as err:
            if err.status == 404:
                await self.st.limiter.count_refused(key.key_id)
            raise

    def stream_end(self) -> StreamEnd | None:
        return TgiStreamEnd()  # a failure mid-stream is TGI's error event, with no [DONE]

    async def prepare(self, key: ApiKey, raw: bytes, body: dict[str, Any], stream: bool) -> tuple[bytes, bool]:
        self.native_body = body
        return raw, False

    def error_reply(self, err: OpenAIError) -> tuple[int, bytes]:
        status, native = native_status_and_body(err)
        return status, orjson.dumps(native)

    async def _finish(
        self, key: ApiKey, ticket: Ticket, resp: UpstreamResponse, out: Outcome, upstream: str, *, completed: bool
    ) -> None:
        body = getattr(self, "native_body", {})
        if self.request is not None:
            embeds = self._embeds(body)
            params = body.get("parameters")
            limit = params.get("max_new_tokens") if isinstance(params, dict) else None
            limit = limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_NEW_TOKENS
            self.request = metering.Request(self.request.size, None if embeds else limit, embeds)
        if not out.usage_seen and resp.status == 200:
            computed = _int(resp.header(b"x-compute-tokens"))
            prompt, generated = _int(resp.header(b"x-prompt-tokens")), _int(resp.header(b"x-generated-tokens"))
            if computed is not None:
                out.usage_seen, out.prompt_tokens = True, computed
            elif prompt is not None and generated is not None:
                out.usage_seen, out.prompt_tokens, out.completion_tokens = True, prompt, generated
        await super()._finish(key, ticket, resp, out, upstream, completed=completed)
