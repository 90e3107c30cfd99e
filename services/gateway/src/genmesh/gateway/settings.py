"""The gateway's settings: one typed object, read once at start-up from CLI flags and environment.

Precedence: command-line flag > ``GENMESH_GATEWAY_*`` environment variable (``REDIS_URL`` also
works for the Redis address) > default.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Sequence
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

AuthMode = Literal["auto", "on", "off"]


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENMESH_GATEWAY_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8888, ge=1, le=65535)
    config: str = Field(default="gateway.yaml", description="routing config (YAML)")
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("redis_url", "GENMESH_GATEWAY_REDIS_URL", "REDIS_URL"),
    )
    redis_prefix: str = "genmesh:gw"
    redis_timeout_s: float = Field(default=2.0, gt=0)
    auth: AuthMode = "auto"
    admin_key: str | None = None
    auth_cache_s: float = Field(
        default=1.0, ge=0, description="how long a looked-up API key is reused; revocations are pushed at once"
    )
    lease_ttl_s: float = Field(default=10.0, gt=0)
    reclaim_interval_s: float = Field(default=0.0, ge=0, description="0: a third of the lease time")
    recheck_interval_s: float = Field(default=1.0, gt=0, description="safety re-check of a queued request")
    state_ttl_s: float = Field(default=3600.0, gt=0, description="TTL of queue and lease keys (refreshed on use)")
    health_interval_s: float = Field(default=2.0, gt=0)
    health_timeout_s: float = Field(default=1.0, gt=0)
    circuit_failures: int = Field(default=3, ge=1)
    circuit_cooldown_s: float = Field(default=5.0, gt=0)
    progress_timeout_s: float = Field(
        default=30.0, ge=0, description="streams in flight but no output from an upstream this long: circuit opens"
    )
    connect_timeout_s: float = Field(default=2.0, gt=0)
    default_priority: int = Field(default=5, ge=0, le=9)
    responses_ttl_s: float = Field(
        default=30 * 24 * 3600.0, gt=0, description="how long a stored /v1/responses conversation is kept"
    )
    responses_max_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="size cap of one stored response (its conversation and output)"
    )
    log_level: str = "info"

    def auth_required(self) -> bool:
        if self.auth != "auto":
            return self.auth == "on"
        return not is_loopback(self.host)

    def reclaim_every_s(self) -> float:
        return self.reclaim_interval_s or self.lease_ttl_s / 3


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="genmesh-gateway",
        description="OpenAI gateway with Redis-backed fair queues, exact per-upstream concurrency, auth and limits.",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8888)")
    p.add_argument("--config", help="routing config YAML (models -> upstream pools)")
    p.add_argument("--redis-url", dest="redis_url", help="Redis URL (default $REDIS_URL or redis://127.0.0.1:6379/0)")
    p.add_argument("--redis-prefix", help="prefix of every Redis key (default genmesh:gw)")
    p.add_argument("--redis-timeout-s", type=float, help="Redis socket timeout (default 2)")
    p.add_argument("--auth", choices=["auto", "on", "off"], help="API keys: auto = required unless bound to loopback")
    p.add_argument("--admin-key", help="secret for /admin endpoints (default: admin endpoints off)")
    p.add_argument("--auth-cache-s", type=float, help="reuse a looked-up API key this long (default 1; 0: off)")
    p.add_argument("--lease-ttl-s", type=float, help="slot lease time; a dead gateway's slots return after it")
    p.add_argument("--reclaim-interval-s", type=float, help="expired-lease sweep period (default lease/3)")
    p.add_argument("--recheck-interval-s", type=float, help="safety re-check period of a queued request (default 1)")
    p.add_argument("--state-ttl-s", type=float, help="TTL of queue/lease keys, refreshed on use (default 3600)")
    p.add_argument("--health-interval-s", type=float, help="upstream health probe period (default 2)")
    p.add_argument("--health-timeout-s", type=float, help="upstream health probe timeout (default 1)")
    p.add_argument("--circuit-failures", type=int, help="failures in a row that open an upstream's circuit")
    p.add_argument("--circuit-cooldown-s", type=float, help="seconds an open circuit waits before probing")
    p.add_argument(
        "--progress-timeout-s",
        type=float,
        help="an upstream whose streams all carry nothing this long has its circuit opened (default 30; 0: off)",
    )
    p.add_argument("--connect-timeout-s", type=float, help="upstream connect timeout (default 2)")
    p.add_argument("--default-priority", type=int, help="priority (0-9, higher first) without a key")
    p.add_argument("--responses-ttl-s", type=float, help="TTL of a stored /v1/responses response (default 30 days)")
    p.add_argument("--responses-max-bytes", type=int, help="size cap of one stored response (default 1 MiB)")
    p.add_argument("--log-level", help="debug, info, warning, error (default info)")
    return p


def parse_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    ns = build_parser().parse_args(argv)
    return GatewaySettings(**vars(ns))
