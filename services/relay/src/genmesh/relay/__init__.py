"""The one streaming relay the microservice and the gateway share.

``client``: the upstream HTTP client (aiohttp; a read deadline per read, abort to cancel the
upstream's generation). ``stream``: relaying a reply in whole events with first-token and total
deadlines, one read in hand at a time (so buffering per stream is what the sockets hold, which
the server bounds: ``genmesh.protocol.server.http_server``), an error event and ``[DONE]`` when the
upstream fails. Not imported by the wire models (``genmesh.protocol``).
"""

from genmesh.protocol.sse import DONE_EVENT, error_event  # the one SSE framing, re-exported for relaying hops

from .client import (
    RelayClient,
    UpstreamAborted,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamResponse,
)
from .stream import Failures, Outcome, StreamEnd, relay_stream, relay_unary, split_events

__all__ = [
    "DONE_EVENT",
    "Failures",
    "Outcome",
    "RelayClient",
    "StreamEnd",
    "UpstreamAborted",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamResponse",
    "error_event",
    "relay_stream",
    "relay_unary",
    "split_events",
]
