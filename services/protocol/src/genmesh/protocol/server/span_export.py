"""A service's span exporter: ``python -m genmesh.protocol.server.span_export --fd N --service NAME``.

Started by the service (``span_shipper``) with one end of a Unix socket pair. It reads frames of span
records (``span_recorder``), makes each an OpenTelemetry SDK ``ReadableSpan`` (the SDK's attribute,
event and link limits from ``OTEL_SPAN_*`` / ``OTEL_ATTRIBUTE_*``, the resource from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``) and hands it to the SDK's
``BatchSpanProcessor`` with its OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_*``, ``OTEL_BSP_*``). A full
queue drops its oldest span, counted and reported back to the service, which serves the count on
``/metrics`` and says it in its log.

It answers ``ready`` once the SDK accepts the settings (or the SDK's refusal, and exits 78), and it
exits when the socket closes (the service stopped or died), after exporting what it holds for at most
``SHUTDOWN_TIMEOUT_S``. It runs only on CPU time nothing else wants (``SCHED_IDLE``): on a CPU with
none to spare, its queue, then the service's buffer, fill and spans are dropped (counted) rather than
requests slowed. SIGINT and SIGTERM are ignored: the terminal's or the supervisor's signal to
the group must not lose the service's last spans; the closed socket ends it in any case.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from .logs import configure_logging
from .span_shipper import frame, read_frames

log = logging.getLogger("genmesh.tracing.export")
_SCALARS = frozenset({str, bool, int, float})

SHUTDOWN_TIMEOUT_S = 3.0  # the most a stopping exporter waits to export its last spans
REPORT_INTERVAL_S = 0.5  # the dropped count goes back to the service at most this often
DEFAULT_QUEUE_SIZE = 2048  # the SDK's OTEL_BSP_MAX_QUEUE_SIZE default
EX_CONFIG = 78  # exit code: an OTEL_* setting the SDK refuses


def dropping_processor_class() -> type:
    """The SDK's ``BatchSpanProcessor``, with what ``serve`` needs to keep its queue from overflowing:
    whether the queue is full, its size, and a count of the spans dropped before they reach it (the
    SDK's own processor, given a span when full, drops it with a log record per span)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class DroppingBatchProcessor(BatchSpanProcessor):
        def __init__(self, exporter: Any) -> None:
            super().__init__(exporter)
            self.dropped = 0
            inner = getattr(self, "_batch_processor", None)  # the SDK's queue (a bounded deque), when it has one
            queue = getattr(inner, "_queue", None)
            self._queue: Any = queue if getattr(queue, "maxlen", None) else None

        def full(self) -> bool:
            queue = self._queue
            return queue is not None and len(queue) >= queue.maxlen

        @property
        def size(self) -> int:
            return int(self._queue.maxlen) if self._queue is not None else DEFAULT_QUEUE_SIZE

    return DroppingBatchProcessor


class SpanMaker:
    """Records made into the SDK's ``ReadableSpan``s of one resource and instrumentation scope."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

        defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
        resource = Resource.create(defaults)
        if resource.attributes.get(SERVICE_NAME) == "unknown_service":
            resource = resource.merge(Resource({SERVICE_NAME: service_name}))
        self.resource = resource
        self.limits = SpanLimits()
        self.scope = InstrumentationScope("genmesh")
        self._types = (Event, ReadableSpan, Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState)

    def attributes(self, values: dict[str, Any], count: int | None, length: int | None) -> Any:
        """The SDK's ``BoundedAttributes`` of ``values`` (its limits, its cleaning of values); when no limit
        acts and every value is already what the SDK keeps (a str, bool, int or float, or a list of str),
        the same values without the SDK's per-value checks (a quarter of a span's CPU here)."""
        from opentelemetry.attributes import BoundedAttributes

        if (count is None or len(values) <= count) and length is None:
            plain: dict[str, Any] = {}
            for key, value in values.items():
                kind = type(value)
                if kind in _SCALARS and key and type(key) is str:
                    plain[key] = value
                elif kind is list and key and type(key) is str and all(type(v) is str for v in value):
                    plain[key] = tuple(value)
                else:
                    break
            else:
                return MappingProxyType(plain)
        return BoundedAttributes(count, values, immutable=True, max_value_len=length)

    def make(self, record: Sequence[Any]) -> Any:
        """The SDK's span for a record, its limits applied as the SDK's own span applies them."""
        from opentelemetry.sdk.util import BoundedList

        Event, ReadableSpan, Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState = self._types
        (name, kind, trace_id, span_id, parent_id, parent_remote, flags, tracestate, start_ns, end_ns) = record[:10]
        status, description, attrs, events, links = record[10:15]
        state = TraceState.from_header([tracestate]) if tracestate else None
        context = SpanContext(trace_id, span_id, False, TraceFlags(flags), state)
        parent = SpanContext(trace_id, parent_id, parent_remote, TraceFlags(flags), state) if parent_id else None
        limits = self.limits
        made_events = [
            Event(n, self.attributes(a, limits.max_event_attributes, limits.max_attribute_length), ts)
            for n, ts, a in events
        ]
        made_links = [
            Link(
                SpanContext(t, s, True, TraceFlags(f), TraceState.from_header([h]) if h else None),
                self.attributes(a, limits.max_link_attributes, limits.max_attribute_length),
            )
            for t, s, f, h, a in links
        ]
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=self.attributes(attrs, limits.max_span_attributes, limits.max_span_attribute_length),
            events=BoundedList.from_seq(limits.max_events, made_events),
            links=BoundedList.from_seq(limits.max_links, made_links),
            kind=SpanKind(kind),
            status=Status(StatusCode(status), description),
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=self.scope,
        )


def serve(sock: socket.socket, service_name: str) -> int:
    """Export what arrives on ``sock`` until it closes; 0, or ``EX_CONFIG`` if the SDK refuses a setting."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        maker = SpanMaker(service_name)
        processor = dropping_processor_class()(OTLPSpanExporter())
    except ValueError as exc:  # an OTEL_* value the SDK refuses
        sock.sendall(frame(("error", f"the OpenTelemetry settings are invalid: {exc}")))
        return EX_CONFIG
    sock.sendall(frame(("ready",)))
    log.info("exporting OTLP spans of %s", maker.resource.attributes.get("service.name"))
    sock.settimeout(REPORT_INTERVAL_S)
    buffer = bytearray()
    # records waiting for room in the SDK's queue, the newest kept: with the collector slow or down, the
    # queue stays full, and a record is made into a span (the CPU of it) only once it can go somewhere
    backlog: deque[Any] = deque(maxlen=processor.size)  # full: the oldest record goes (counted)
    reported, reported_at = 0, 0.0
    try:
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                chunk = None
            if chunk == b"":
                break  # the service closed its end (stopped, or died)
            if chunk:
                buffer += chunk
                for records in read_frames(buffer):
                    kept = len(backlog) + len(records)
                    backlog.extend(records)
                    processor.dropped += kept - len(backlog)
            while backlog and not processor.full():
                try:
                    processor.on_end(maker.make(backlog.popleft()))
                except Exception:  # one bad record must not stop the others
                    log.exception("span exporter: cannot make a span of a record")
            now = time.monotonic()
            if processor.dropped != reported and now - reported_at >= REPORT_INTERVAL_S:
                reported, reported_at = processor.dropped, now
                with contextlib.suppress(OSError):  # the service not reading now (or gone): the next report says it
                    sock.send(frame(("dropped", reported)))
    finally:
        # the last spans, bounded: a collector that is down must not hold the exit (the exporter retries)
        stopping = threading.Thread(target=_last_spans, args=(processor, maker, backlog), daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_TIMEOUT_S)
    return 0


def _last_spans(processor: Any, maker: SpanMaker, backlog: deque[Any]) -> None:
    """The backlog into the queue as it empties, then the SDK's shutdown (it exports what is queued)."""
    while backlog:
        if processor.full():
            processor.force_flush()
            continue
        with contextlib.suppress(Exception):
            processor.on_end(maker.make(backlog.popleft()))
    processor.shutdown()


def yield_the_cpu() -> None:
    """Run only on CPU time nothing else wants (Linux's SCHED_IDLE; elsewhere the lowest nice): the
    exporter's work waits in its queue while the services are busy, so spans, not requests, pay."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="genmesh's span exporter (started by a service)")
    parser.add_argument("--fd", type=int, required=True, help="the socket from the service")
    parser.add_argument("--service", required=True, help="the default service.name")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    yield_the_cpu()
    configure_logging(args.log_level)
    sock = socket.socket(fileno=args.fd)
    try:
        return serve(sock, args.service)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
