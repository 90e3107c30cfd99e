"""Gateway test fixtures: a real Redis, a fake upstream and gateway processes (see support.gateway_helpers)."""

from support.gateway_helpers import (  # noqa: F401  (fixtures are found by name)
    _flush_redis,
    fake,
    fake_upstream,
    gw,
    helpers,
    mesh_microservice,
    redis_server,
    shared_gateway,
    start_gateway,
)
