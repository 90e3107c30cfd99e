"""``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/rerank`` and
``/v1/score`` (each also at its other paths: ``aliases.py``): the hot path, as plain ASGI.

Bodies pass through untouched (OPEA string ``messages`` included); the gateway reads only
``model`` and ``stream``. A model's ``kind`` (config.py) says which endpoints serve it: a chat
request to an embedding model, or the reverse, is a 400 naming ``model``; rerank and score take a
``rerank`` model or an embedding model (a cosine scorer). Embeddings and reranks are queued,
limited (their input tokens count against the key's tokens per minute) and metered as chat is, on
their model's own slots. Flow (``exchange.py``): authenticate -> per-key limits -> slot lease (maybe
after waiting in Redis) -> upstream (a connect failure is retried on another upstream:
``dispatch.py``) -> relay -> release.

These two endpoints do not go through FastAPI's routing, middleware stack and
``StreamingResponse`` (an anyio task group per response): on a 2-core machine that machinery
cost more than everything else the gateway does per request. One watcher task per request reads
the ASGI ``receive`` channel; when the client goes it cancels the request's task, wherever it is
(queued, connecting, relaying), and the clean-up releases the slot and closes the upstream
connection so that the engine aborts (``exchange.py``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable

from starlette.types import Receive, Scope, Send

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.http_server import admitted
from genmesh.protocol.server.logs import request_id_var
from genmesh.protocol.server.tracing import server_span

from ..exchange.dispatch import EMBEDDINGS_PATH
from ..exchange.exchange import Exchange
from ..state import GatewayState
from .aliases import RERANK_PATH, SCORE_PATH

PATHS = frozenset(("/v1/chat/completions", "/v1/completions", EMBEDDINGS_PATH, RERANK_PATH, SCORE_PATH))
__all__ = ["EMBEDDINGS_PATH", "PATHS", "serve"]
ExchangeFactory = Callable[[GatewayState, str, Receive, Send, str], Exchange]


async def serve(
    st: GatewayState, scope: Scope, receive: Receive, send: Send, exchange: ExchangeFactory | None = None
) -> None:
    """Serve one completion request (``scope["path"]`` is one of ``PATHS``; ``exchange``: what makes
    the ``Exchange`` of another endpoint, ``/v1/responses`` on this path or the audio endpoints)."""
    authorization = priority_header = rid = None
    for k, v in scope["headers"]:
        if k == b"authorization":
            authorization = v.decode("latin-1")
        elif k == b"x-priority":
            priority_header = v.decode("latin-1")
        elif k == b"x-request-id":
            rid = v.decode("latin-1")[:128]
    rid = rid or uuid.uuid4().hex
    token = request_id_var.set(rid)
    try:
        if scope["method"] != "POST":
            err = OpenAIError("Method Not Allowed", status=405, type="invalid_request_error")
            await (exchange or Exchange)(st, scope["path"], receive, send, rid).send_error(err)
            return
        with server_span("POST", scope["path"], scope["headers"]) as root:
            ex = (exchange or Exchange)(st, scope["path"], receive, send, rid)
            ex.admitted = functools.partial(admitted, scope)
            ex.trace(root)
            try:
                await ex.run(authorization, priority_header)
            finally:
                ex.end_trace()
    finally:
        request_id_var.reset(token)
