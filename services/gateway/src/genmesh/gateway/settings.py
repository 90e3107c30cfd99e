"""The gateway's settings: one typed object, read once at start-up from CLI flags and environment.

Precedence: command-line flag > ``GENMESH_GATEWAY_*`` environment variable (``REDIS_URL`` also
works for the Redis address) > default.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, add_limit_flags

AuthMode = Literal["auto", "on", "off"]


class GatewaySettings(BaseSettings, HttpLimits):
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
    # The admin secret comes from the environment (GENMESH_GATEWAY_ADMIN_KEY) or a file, never
    # from the command line, where every local user could read it in ps.
    admin_key: SecretStr | None = None
    admin_key_file: Path | None = None
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

    def admin_secret(self) -> str | None:
        """The admin key (the file's first line when ``admin_key_file`` is set); None: admin endpoints off."""
        if self.admin_key_file is not None:
            secret = self.admin_key_file.read_text(encoding="utf-8").strip()
            return secret or None
        if self.admin_key is not None and self.admin_key.get_secret_value().strip():
            return self.admin_key.get_secret_value().strip()
        return None

    def redis_location(self) -> str:
        """``redis_url`` without its password, for messages and logs."""
        parts = urlsplit(self.redis_url)
        if parts.password is None:
            return self.redis_url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))

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
        allow_abbrev=False,  # --admin-key must not pass for --admin-key-file
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8888)")
    p.add_argument("--config", help="routing config YAML (models -> upstream pools)")
    p.add_argument(
        "--redis-url",
        dest="redis_url",
        help="Redis URL (default $REDIS_URL or redis://127.0.0.1:6379/0; a password belongs in $REDIS_URL, not here)",
    )
    p.add_argument("--redis-prefix", help="prefix of every Redis key (default genmesh:gw)")
    p.add_argument("--redis-timeout-s", type=float, help="Redis socket timeout (default 2)")
    p.add_argument("--auth", choices=["auto", "on", "off"], help="API keys: auto = required unless bound to loopback")
    p.add_argument(
        "--admin-key-file",
        help="file holding the secret for /admin and /metrics (or set GENMESH_GATEWAY_ADMIN_KEY; default: off)",
    )
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
    add_limit_flags(p)
    return p


def parse_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    parser = build_parser()
    args = list(argv) if argv is not None else None
    ns, rest = parser.parse_known_args(args)
    if any(a == "--admin-key" or a.startswith("--admin-key=") for a in rest):
        parser.error(
            "--admin-key is not accepted (ps shows it to every user): "
            "set GENMESH_GATEWAY_ADMIN_KEY or use --admin-key-file"
        )
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return GatewaySettings(**vars(ns))
