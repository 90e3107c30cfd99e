"""The gateway's settings: one typed object, read once at start-up from CLI flags and environment.

Each field is declared once (genmesh.protocol.server.settings): flag, variable, default and help.
Precedence: command-line flag > ``GENMESH_GATEWAY_*`` environment variable (``REDIS_URL`` also
works for the Redis address) > default.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, UploadLimits
from genmesh.protocol.server.settings import EnvOnly, ServiceSettings

AuthMode = Literal["auto", "on", "off"]


class GatewaySettings(ServiceSettings):
    """OpenAI gateway with Redis-backed fair queues, exact per-upstream concurrency, auth and limits."""

    model_config = SettingsConfigDict(env_prefix="GENMESH_GATEWAY_", cli_prog_name="genmesh-gateway")

    port: int = Field(default=8888, ge=1, le=65535, description="HTTP port")
    config: str = Field(default="gateway.yaml", description="routing config YAML (models -> upstream pools)")
    trace_content: bool = Field(
        default=False,
        description="record each request's prompt in its trace span (off: no text in traces; docs/observability.md)",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("redis_url", "GENMESH_GATEWAY_REDIS_URL", "REDIS_URL"),
        description="Redis URL (a password belongs in $REDIS_URL, not here)",
    )
    redis_prefix: str = Field(default="genmesh:gw", description="prefix of every Redis key")
    redis_timeout_s: float = Field(default=2.0, gt=0, description="Redis socket timeout")
    auth: AuthMode = Field(default="auto", description="API keys: auto = required unless bound to loopback")
    # The admin secret comes from the environment or a file, never from the command line.
    admin_key: Annotated[SecretStr | None, EnvOnly("or use --admin-key-file")] = Field(
        default=None, description="the secret for /admin and /metrics"
    )
    admin_key_file: Path | None = Field(
        default=None,
        description="file holding the secret for /admin and /metrics (or set GENMESH_GATEWAY_ADMIN_KEY; unset: off)",
    )
    auth_cache_s: float = Field(
        default=1.0, ge=0, description="reuse a looked-up API key this long (0: off); revocations are pushed at once"
    )
    lease_ttl_s: float = Field(
        default=10.0, gt=0, description="slot lease time; a dead gateway's slots return after it"
    )
    reclaim_interval_s: float = Field(default=0.0, ge=0, description="expired-lease sweep period (0: lease/3)")
    recheck_interval_s: float = Field(default=1.0, gt=0, description="safety re-check period of a queued request")
    state_ttl_s: float = Field(default=3600.0, gt=0, description="TTL of queue/lease keys, refreshed on use")
    health_interval_s: float = Field(default=2.0, gt=0, description="upstream health probe period")
    health_timeout_s: float = Field(default=1.0, gt=0, description="upstream health probe timeout")
    circuit_failures: int = Field(default=3, ge=1, description="failures in a row that open an upstream's circuit")
    circuit_cooldown_s: float = Field(default=5.0, gt=0, description="seconds an open circuit waits before probing")
    circuit_probe_interval_s: float = Field(
        default=0.5, gt=0, description="probe period of an open circuit once its cool-down has passed (half-open)"
    )
    progress_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="an upstream whose streams all carry nothing this long has its circuit opened (0: off)",
    )
    connect_timeout_s: float = Field(default=2.0, gt=0, description="upstream connect timeout")
    default_priority: int = Field(default=5, ge=0, le=9, description="priority (0-9, higher first) without a key")
    responses_ttl_s: float = Field(
        default=30 * 24 * 3600.0, gt=0, description="TTL of a stored /v1/responses response (30 days)"
    )
    responses_max_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="size cap of one stored response (its conversation and output)"
    )

    console_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="console: while a console is open, status computed (and a history sample taken) this often",
    )
    console_viewed_ttl_s: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="console: replicas keep publishing (and the viewed one computing) this long after the last "
        "/console/status call; with no console open the status loop only checks a Redis marker",
    )
    console_window_s: float = Field(
        default=300.0, gt=0, le=3600, description="console: queue wait and TTFT percentiles over this recent window"
    )
    console_history_s: float = Field(
        default=900.0, gt=0, le=86400, description="console: chart history kept in Redis (TTL and trim horizon)"
    )
    console_max_keys: int = Field(default=200, ge=0, le=10000, description="console: API keys shown (0: none)")
    console_max_batches: int = Field(default=50, ge=0, le=1000, description="console: batches shown (0: none)")
    console_login_attempts: int = Field(
        default=10, ge=1, le=10000, description="console: failed logins one client address may make per window"
    )
    console_login_user_attempts: int = Field(
        default=100,
        ge=1,
        le=100000,
        description="console: failed logins for one user name (all addresses together) per window (429 past it)",
    )
    console_cookie_secure: bool = Field(
        default=False,
        description="console: mark the login cookie Secure whatever the request's scheme (behind a TLS proxy)",
    )
    trust_forwarded_proto: bool = Field(
        default=False,
        description="take the scheme from X-Forwarded-Proto (set it only behind a proxy that overwrites that "
        "header): the console's cookie is Secure and its same-origin check expects https when it says https",
    )
    console_login_window_s: float = Field(
        default=300.0, gt=0, le=86400, description="console: the window of --console-login-attempts (429 past it)"
    )
    console_session_s: float = Field(default=12 * 3600.0, gt=0, description="console: lifetime of a login cookie")
    # the Files and Batch API (docs/batch.md)
    files_max_bytes: int = Field(
        default=100 * 1024 * 1024,
        ge=1024,
        description="largest file /v1/files accepts (OpenAI: 200 MB; the bytes live in Redis)",
    )
    audio_max_bytes: int = Field(
        default=25 * 1000 * 1000,
        ge=1024,
        description="largest audio file /v1/audio/transcriptions accepts (OpenAI: 25 MB); past it 413",
    )
    files_upload_timeout_s: float = Field(
        default=300.0, gt=0, description="time an upload's body may take to arrive (other bodies: --body-timeout-s)"
    )
    unadmitted_body_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="time an upload's body has before the gateway admits it (its key authenticated, within its "
        "limits); then --files-upload-timeout-s. A refused upload's connection is closed at once, unread",
    )
    files_ttl_s: float = Field(
        default=30 * 24 * 3600.0, gt=0, description="TTL of an uploaded or output file and of a batch (30 days)"
    )
    files_chunk_bytes: int = Field(
        default=1024 * 1024 - 512,  # under 1 MiB: Redis' allocator would round a chunk just over it up to 1.25 MiB
        ge=1024,
        le=64 * 1024 * 1024,
        description="a stored file is a Redis LIST of chunks of at most this many bytes: the largest value or "
        "argument a file upload, download or batch output sends to Redis",
    )
    files_key_max_bytes: int | None = Field(
        default=None,
        ge=0,
        description="quota: bytes of uploaded files one API key may hold (0: none; unset: a third of the file "
        "store's total, docs/limits.md)",
    )
    files_key_max_count: int = Field(
        default=1000,
        ge=1,
        description="quota: uploaded files one API key may hold (expired or deleted ones free theirs)",
    )
    files_total_max_bytes: int | None = Field(
        default=None,
        ge=0,
        description="quota: bytes of files (uploads and batch outputs) all keys together may hold (0: none); keep "
        "it below Redis' maxmemory minus --storage-headroom-bytes (unset: 6/7 of that, or 1.5 GiB when Redis "
        "has no maxmemory)",
    )
    storage_headroom_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Redis budget: new stored bytes (files, outputs, stored responses) are refused (507 "
        "storage_full) once Redis' used_memory plus them would come within this of its maxmemory, so queues, "
        "leases and rate windows always have room (no check when Redis has no maxmemory; unset: a quarter of "
        "maxmemory, at most 256 MiB)",
    )
    files_max_concurrent: int = Field(
        default=4,
        ge=1,
        description=(
            "uploads, batch creations and spooled transcriptions one replica handles at once; "
            "past it: 429 with Retry-After"
        ),
    )
    batch_output_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="quota: bytes of one batch's results (output and error lines); past it the batch ends "
        "'failed' with its lines done so far in its files",
    )
    batch_output_line_max_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024,
        description="quota: bytes of one batch line's result; a larger reply becomes an error line",
    )
    responses_key_max_count: int = Field(
        default=10_000, ge=1, description="quota: stored /v1/responses responses one API key may hold"
    )
    batch_max_lines: int = Field(default=50_000, ge=1, description="most requests in one batch (OpenAI: 50,000)")
    batch_max_active_per_key: int = Field(
        default=100,
        ge=1,
        description="batches one API key may have in progress at once; past it POST /v1/batches is a 429 "
        "quota_exceeded (its lines are never copied in)",
    )
    batch_queue_max_lines: int = Field(
        default=250_000,
        ge=0,
        description="quota: lines one API key may have enqueued per model across its batches in progress "
        "(OpenAI's batch queue limit, in lines; 0: none); past it POST /v1/batches is a 429 quota_exceeded",
    )
    batch_window_s: float = Field(
        default=24 * 3600.0, gt=0, description="how long completion_window '24h' lasts before a batch expires"
    )
    batch_slot_share: float = Field(
        default=0.5, gt=0, le=1, description="share of each model's slots that batch lines may hold (all replicas)"
    )
    batch_preempt: bool = Field(
        default=True,
        description="an interactive request that finds no free slot while batch lines hold slots aborts the "
        "youngest batch line and takes its slot (the line runs again later); off: it waits for a slot to free",
    )
    batch_preempt_after_s: float = Field(
        default=0.0, ge=0, description="how long an interactive request waits for a slot before it preempts"
    )
    batch_concurrency: int = Field(default=8, ge=1, description="batch lines this replica's runner runs at once")
    batch_lease_ttl_s: float = Field(
        default=30.0, gt=0, description="lease of a claimed batch line; a dead replica's lines run again after it"
    )
    batch_poll_interval_s: float = Field(default=1.0, gt=0, description="how often an idle runner looks for work")
    batch_max_attempts: int = Field(
        default=3, ge=1, description="tries of a line whose upstream failed (5xx) before it goes to the error file"
    )

    def http_limits(self) -> HttpLimits:
        """The HTTP limits, with the larger body and time ``POST /v1/files`` allows."""
        base = super().http_limits().model_dump()
        return UploadLimits(
            **base,
            upload_path="/v1/files",
            upload_max_bytes=self.files_max_bytes + 64 * 1024,  # the multipart envelope around the file
            upload_timeout_s=self.files_upload_timeout_s,
            uploads={"/v1/audio/transcriptions": self.audio_max_bytes + 64 * 1024},  # and its multipart form
            admission_timeout_s=self.unadmitted_body_timeout_s,
        )

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


def parse_settings(argv: Sequence[str] | None = None) -> GatewaySettings:
    return GatewaySettings.from_cli(argv)
