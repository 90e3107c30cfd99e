"""The HTTP limits every genmesh server enforces, as one typed fragment of each service's settings.

Each service's settings class inherits these fields through ``settings.ServiceSettings`` (so each is
read from that service's own ``GENMESH_<SERVICE>_*`` variable and flag) and hands ``http_limits()`` to the server
(``http_server.py``) and to the JSON checks (``inputs.py``). docs/limits.md lists them with their
defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

MIB = 1024 * 1024


class HttpLimits(BaseModel):
    max_body_bytes: int = Field(
        default=4 * MIB, ge=1024, description="largest request body; past it 413, counted as the bytes arrive"
    )
    max_header_bytes: int = Field(default=16384, ge=1024, description="request line and headers together; past it 431")
    max_header_count: int = Field(default=100, ge=8, description="headers per request; past it 431")
    header_timeout_s: float = Field(
        default=5.0, gt=0, description="time for a request's line and headers to arrive; then 408 and closed"
    )
    body_timeout_s: float = Field(default=8.0, gt=0, description="time for a body to arrive once the headers are in")
    keep_alive_timeout_s: int = Field(default=5, ge=1, description="an idle keep-alive connection is closed after")
    max_client_connections: int = Field(
        default=1024, ge=1, description="open client connections per process; past it 503 + Retry-After"
    )
    send_timeout_s: float = Field(
        default=20.0, gt=0, le=30, description="a client that takes nothing of the reply this long is cut off"
    )
    send_buffer_bytes: int = Field(
        default=16384,
        ge=4096,
        description="socket buffer per connection (to a client, from an upstream): bounds what a stream holds",
    )
    max_json_depth: int = Field(default=64, ge=2, le=512, description="deepest JSON nesting a body may have")
    max_json_containers: int = Field(
        default=100_000,
        ge=16,
        description="most arrays and objects a JSON body may hold (counted at C speed before it is parsed)",
    )

    def http_limits(self) -> HttpLimits:
        """The limits alone (a service's settings object carries other fields too)."""
        return HttpLimits.model_validate({name: getattr(self, name) for name in HttpLimits.model_fields})

    def body_limit(self, path: str) -> int:
        """The largest body a request to ``path`` may send."""
        return self.max_body_bytes

    def body_time(self, path: str) -> float:
        """The time a request to ``path`` has for its body."""
        return self.body_timeout_s

    def unadmitted_body_time(self, path: str) -> float:
        """The time a request to ``path`` has for its body until the app admits it (``http_server.admitted``)."""
        return self.body_time(path)


class TracingLimits(BaseModel):
    """The bounds of the way spans leave a traced service for its span exporter (``span_shipper``);
    used only when tracing is on (docs/observability.md)."""

    trace_batch_records: int = Field(
        default=128, ge=1, le=4096, description="span records per frame sent to the span exporter"
    )
    trace_flush_interval_s: float = Field(
        default=0.2, gt=0, le=10, description="span records waiting for a frame are sent at least this often"
    )
    trace_buffer_bytes: int = Field(
        default=8 * MIB,
        ge=64 * 1024,
        description="span frames the exporter has not taken yet, at most; past it spans are dropped (counted)",
    )
    trace_exporter_start_timeout_s: float = Field(
        default=30.0, gt=0, description="the span exporter says ready within this, or the service serves untraced"
    )
    trace_exporter_restart_backoff_s: float = Field(
        default=5.0, ge=0, description="at most one span exporter start this often, when it has exited"
    )

    def tracing_limits(self) -> TracingLimits:
        """The tracing limits alone."""
        return TracingLimits.model_validate({name: getattr(self, name) for name in TracingLimits.model_fields})


class UploadLimits(HttpLimits):
    """``HttpLimits`` with upload paths (files, audio) allowed a larger body and more time for it:
    ``upload_path``/``upload_max_bytes`` for one, ``uploads`` (path -> largest body) for more."""

    upload_path: str | None = None
    upload_max_bytes: int = 0
    upload_timeout_s: float
    uploads: dict[str, int] = Field(default_factory=dict)
    admission_timeout_s: float | None = None  # an upload's body time until the app admits it (None: all of it)

    def _upload_limit(self, path: str) -> int | None:
        if path == self.upload_path:
            return self.upload_max_bytes
        return self.uploads.get(path)

    def body_limit(self, path: str) -> int:
        limit = self._upload_limit(path)
        return self.max_body_bytes if limit is None else limit

    def body_time(self, path: str) -> float:
        return self.body_timeout_s if self._upload_limit(path) is None else self.upload_timeout_s

    def unadmitted_body_time(self, path: str) -> float:
        full = self.body_time(path)
        if self._upload_limit(path) is None or self.admission_timeout_s is None:
            return full
        return min(full, self.admission_timeout_s)
