"""End-to-end fixtures: a real Redis and gateway processes of a test's own (see support.gateway_helpers)."""

from support.gateway_helpers import (  # noqa: F401  (fixtures are found by name)
    _flush_redis,
    redis_server,
    start_gateway,
)
