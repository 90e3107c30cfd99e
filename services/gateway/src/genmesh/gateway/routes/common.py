"""What the gateway's routes share: the gateway's state from a request."""

from __future__ import annotations

from fastapi import Request

from ..state import GatewayState


def gateway(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
