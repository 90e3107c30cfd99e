"""``NativeExchange``: TEI's ``/embed`` and ``/similarity``, TGI's ``/generate`` and
``/generate_stream``, and their ``POST /``, through the gateway: queued, limited and metered as
``/v1/embeddings`` and ``/v1/completions`` are, on the embedding or the chat model's slots (neither
body names a model: the one model of the kind). ``RerankExchange``: every rerank path, where TEI's
body (``texts``) is served as TEI's ``/rerank``.

The body is relayed untouched (no ``stream_options``: TGI has none); refusals are TEI's and TGI's
``{"error", "error_type"}`` (``Retry-After`` kept). Their replies carry no ``usage``: the tokens are
the engine's headers (TEI's ``x-compute-tokens``, TGI's ``x-prompt-tokens`` and
``x-generated-tokens``: ``usage_from_headers``), the counts ``/v1/embeddings``, ``/v1/rerank`` and
``/v1/completions`` report in ``usage``; else the estimate (a stream: its ``max_new_tokens``, TGI's
default when unset)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Receive, Send

from genmesh.protocol import OpenAIError
from genmesh.protocol.native_errors import TEI_PATHS, native_status_and_body
from genmesh.protocol.tei import COMPAT_PATH, TEI_TOKENIZE_PATH, is_tei_rerank
from genmesh.protocol.tgi import DEFAULT_MAX_NEW_TOKENS, TGI_STREAM_PATH, is_tgi_request
from genmesh.relay import Outcome, StreamEnd, UpstreamResponse
from genmesh.relay.native import TgiStreamEnd

from ..admission.auth import ApiKey
from ..admission.tickets import Ticket
from ..routing.config import ModelRoute
from ..state import GatewayState
from . import metering
from .dispatch import route_of
from .exchange import Exchange


def _int(value: bytes | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def native_reply(err: OpenAIError) -> tuple[int, bytes]:
    """A refusal as TEI and TGI send it: their status and ``{"error", "error_type"}``."""
    status, body = native_status_and_body(err)
    return status, orjson.dumps(body)


def usage_from_headers(resp: UpstreamResponse, out: Outcome) -> None:
    """A TEI or TGI reply's tokens, from the engine's headers, unless its body said its usage."""
    if out.usage_seen or resp.status != 200:
        return
    computed = _int(resp.header(b"x-compute-tokens"))
    prompt, generated = _int(resp.header(b"x-prompt-tokens")), _int(resp.header(b"x-generated-tokens"))
    if computed is not None:
        out.usage_seen, out.prompt_tokens = True, computed
    elif prompt is not None and generated is not None:
        out.usage_seen, out.prompt_tokens, out.completion_tokens = True, prompt, generated


class NativeExchange(Exchange):
    def _embeds(self, body: dict[str, Any]) -> bool:
        if self.path == COMPAT_PATH:
            return not is_tgi_request(body)
        return self.path in TEI_PATHS or self.path == TEI_TOKENIZE_PATH

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
        return native_reply(err)

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
        usage_from_headers(resp, out)
        await super()._finish(key, ticket, resp, out, upstream, completed=completed)


class RerankExchange(Exchange):
    """Rerank at any of its paths (relayed as ``/v1/rerank``): Cohere's and Jina's body
    (``documents``) as the OpenAI endpoints are served, TEI's (``texts``) with TEI's refusals and
    metered by TEI's ``x-compute-tokens`` (the tokens ``/v1/rerank``'s ``usage`` counts). The body
    decides once it is read; before that (no key, a key over its limits, a body too large or not
    JSON) the path does: TEI's ``/rerank`` (``tei_path``) refuses in TEI's shape, the others in OpenAI's."""

    def __init__(self, st: GatewayState, path: str, receive: Receive, send: Send, rid: str, *, tei_path: bool) -> None:
        super().__init__(st, path, receive, send, rid)
        self.tei = tei_path

    async def parse(self, raw: bytes) -> dict[str, Any]:
        body = await super().parse(raw)
        self.tei = is_tei_rerank(body)
        return body

    def error_reply(self, err: OpenAIError) -> tuple[int, bytes]:
        return native_reply(err) if self.tei else super().error_reply(err)

    async def _finish(
        self, key: ApiKey, ticket: Ticket, resp: UpstreamResponse, out: Outcome, upstream: str, *, completed: bool
    ) -> None:
        if self.tei:
            usage_from_headers(resp, out)
        await super()._finish(key, ticket, resp, out, upstream, completed=completed)
