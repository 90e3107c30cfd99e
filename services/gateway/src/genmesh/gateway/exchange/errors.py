"""Admission failures as OpenAI errors, and the caller's key: shared by the routes and the batch runner."""

from __future__ import annotations

from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError, service_unavailable

from ..admission.auth import ApiKey
from ..admission.tickets import NoUpstream, QueueFull, QueueTimeout
from ..redis.client import RedisUnavailable
from ..replies import too_many_requests, with_retry_after
from ..state import GatewayState


class ClientGone(Exception):
    """The client disconnected before a response started."""


def admission_error(exc: Exception, retry_after_s: int) -> OpenAIError:
    if isinstance(exc, QueueFull):
        err = too_many_requests(str(exc), code="queue_full")
    elif isinstance(exc, QueueTimeout):
        err = service_unavailable(str(exc), code="queue_timeout")
    elif isinstance(exc, NoUpstream):
        err = service_unavailable(str(exc), code="no_healthy_upstream")
        retry_after_s = exc.retry_after_s or retry_after_s
    elif isinstance(exc, RedisUnavailable):
        err = service_unavailable(f"{exc}; try again shortly", code="queue_store_unavailable")
    else:
        raise exc
    return with_retry_after(err, retry_after_s)


def store_unavailable(st: GatewayState, exc: BaseException, store: str = "queue store") -> OpenAIError:
    """Redis away (``exc``): counted, and a 503 with Retry-After, code ``queue_store_unavailable``."""
    st.metrics.redis_errors.inc()
    return admission_error(RedisUnavailable(f"{store} unavailable: {type(exc).__name__}"), 1)


async def authenticate(st: GatewayState, authorization: str | None, required: bool | None = None) -> ApiKey:
    """The caller's API key (``required``: the gateway's setting unless given); Redis down: 503."""
    try:
        return await st.keys.authenticate(authorization, st.auth_required if required is None else required)
    except (RedisError, OSError) as exc:
        raise store_unavailable(st, exc) from exc
