"""What the gateway's routes share: the gateway's state from a request, and a JSON reply."""

from __future__ import annotations

from fastapi import Request, Response

from ..state import GatewayState


def gateway(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


def json_reply(body: str | bytes, status: int = 200) -> Response:
    """An already serialised JSON body as the reply."""
    return Response(body, status_code=status, media_type="application/json")
