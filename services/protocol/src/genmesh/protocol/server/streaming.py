"""A streamed reply (SSE, or a relayed body) with one ASGI call per chunk: its body goes around the middleware.

Every message a response sends passes each ASGI middleware's ``send`` wrapper: the request id,
tracing, the microservice's access log, and Starlette's two error handlers, a Python call each.
For a unary reply that is two messages; for a stream it is one message per chunk, and with one
event per token per stream that is per-token work, at every hop. None of those wrappers reads a
body message (each looks at ``http.response.start`` only: its status, or a header added), so an
``EventStream`` sends its start through them all and its body chunks straight to the send that
``RequestIdMiddleware``, the outermost of ours, was given (``BODY_SEND`` in the scope).

It also replaces ``StreamingResponse``'s anyio task group (two tasks per response) by one watcher
task, as the gateway's hot path does: when the client goes, the watcher cancels the response's
task wherever it is, and the chunks' generator is closed, which is how the stream's source
learns to stop (the engine aborts the generation, a relay closes its upstream connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

BODY_SEND = "genmesh.body_send"  # scope key: where a streamed body's messages go (RequestIdMiddleware)


class EventStream(Response):
    """``chunks`` as the body of a reply (``status``: 200; an SSE stream unless ``headers`` name
    another content type), each chunk one ASGI message (one socket write)."""

    media_type = "text/event-stream"

    def __init__(
        self, chunks: AsyncIterator[bytes], headers: Mapping[str, str] | None = None, status: int = 200
    ) -> None:
        self.chunks = chunks
        self.status_code = status
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        body_send: Send = scope.get(BODY_SEND, send)
        chunks = self.chunks
        watcher = asyncio.ensure_future(watch())
        try:
            async for chunk in chunks:
                await body_send({"type": "http.response.body", "body": chunk, "more_body": True})
            watcher.cancel()  # the client may go once it has the last message: that is the normal end
            await body_send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # the client went: this reply is over, not the server
        finally:
            watcher.cancel()
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
