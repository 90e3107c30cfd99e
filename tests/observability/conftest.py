"""Observability fixtures: a real Redis, the fake upstream and gateways of a test's own (support.gateway_helpers)."""

from support.gateway_helpers import (  # noqa: F401  (fixtures are found by name)
    _flush_redis,
    fake_upstream,
    redis_server,
    start_gateway,
)
