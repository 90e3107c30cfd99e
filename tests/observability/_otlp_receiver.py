"""A real OTLP/HTTP trace receiver for the tests: aiohttp on a loopback port, decoding each
``ExportTraceServiceRequest`` with opentelemetry-proto. ``mode`` makes it a bad collector:
"ok" (200), "error" (500 to every export), "slow" (answers after ``slow_s``); ``stop`` takes it
down (connections refused) and ``start`` brings it back on the same port."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from support.mesh import free_port_block


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status_code: int = 0
    status_message: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    links: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    flags: int = 0
    scope: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    dropped_attributes: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@dataclass
class OtlpReceiver:
    port: int
    mode: str = "ok"
    slow_s: float = 5.0
    spans: list[ReceivedSpan] = field(default_factory=list)
    exports: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.exports += 1
        if self.mode == "error":
            return web.Response(status=500, text="collector error")
        if self.mode == "slow":
            await asyncio.sleep(self.slow_s)
        message = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in message.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    attributes = {a.key: _value(a.value) for a in s.attributes}
                    self.spans.append(
                        ReceivedSpan(
                            service=str(attrs.get("service.name")),
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes=attributes,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                            status_message=s.status.message,
                            events=[(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in s.events],
                            links=[
                                (x.trace_id.hex(), x.span_id.hex(), {a.key: _value(a.value) for a in x.attributes})
                                for x in s.links
                            ],
                            flags=s.flags,
                            scope=scope.scope.name,
                            resource=attrs,
                            dropped_attributes=s.dropped_attributes_count,
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._call(self._start())

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    def stop(self) -> None:
        if self._runner is not None:
            self._call(self._runner.cleanup())
            self._runner = None

    def close(self) -> None:
        self.stop()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in list(self.spans) if s.trace_id == trace_id]


@contextmanager
def running() -> Iterator[OtlpReceiver]:
    """A receiver on a free loopback port, closed after the block."""
    receiver = OtlpReceiver(free_port_block(1))
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.close()
