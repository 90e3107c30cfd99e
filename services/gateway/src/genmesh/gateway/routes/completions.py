"""``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings``: the hot path, as plain ASGI.

Bodies pass through untouched (OPEA string ``messages`` included); the gateway reads only
``model`` and ``stream``. A model's ``kind`` (config.py) says which endpoints serve it: a chat
request to an embedding model, or the reverse, is a 400 naming ``model``. Embeddings are queued,
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

import uuid

from starlette.types import Receive, Scope, Send

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.logs import request_id_var
from genmesh.protocol.server.tracing import server_span

from ..exchange.exchange import EMBEDDINGS_PATH, Exchange
from ..state import GatewayState

PATHS = frozenset(("/v1/chat/completions", "/v1/completions", EMBEDDINGS_PATH))
__all__ = ["EMBEDDINGS_PATH", "PATHS", "serve"]


async def serve(
    st: GatewayState, scope: Scope, receive: Receive, send: Send, exchange: type[Exchange] | None = None
) -> None:
    """Serve one completion request (``scope["path"]`` is one of ``PATHS``; ``exchange``: the
    ``Exchange`` subclass of another endpoint on this path, ``/v1/responses``)."""
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
            await Exchange(st, scope["path"], receive, send, rid).send_error(err)
            return
        with server_span("POST", scope["path"], scope["headers"]) as root:
            ex = (exchange or Exchange)(st, scope["path"], receive, send, rid)
            ex.trace(root)
            try:
                await ex.run(authorization, priority_header)
            finally:
                ex.end_trace()
    finally:
        request_id_var.reset(token)
