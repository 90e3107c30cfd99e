"""Spans recorded on a service's hot path as plain data, for another process to export (``span_shipper``).

``RecordingTracer`` is an OpenTelemetry API ``Tracer``: it decides sampling with the SDK's sampler
(``OTEL_TRACES_SAMPLER``) and makes ids with the SDK's id generator, as the SDK's tracer does, but a
span it starts (``RecordedSpan``, an API ``Span``) only keeps what the span says: at its end, one
tuple goes to a sink. Building the SDK's span objects, applying its limits, batching and encoding
OTLP all happen in the exporter process (``span_export``), with the SDK. On this path a span costs a
few microseconds; the SDK's own span cost 25 µs to make and as much again to encode, on the
service's event loop (docs/observability.md, Cost).

A record is a tuple (``RECORD_FIELDS``) of built-in values only, so ``marshal`` can carry it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

# name, kind, trace id, span id, parent span id (0: a root), parent remote, trace flags, tracestate
# header, start ns, end ns, status code, status description, attributes, events (name, ns, attributes),
# links (trace id, span id, flags, tracestate header, attributes)
RECORD_FIELDS = (
    "name",
    "kind",
    "trace_id",
    "span_id",
    "parent_id",
    "parent_remote",
    "flags",
    "tracestate",
    "start_ns",
    "end_ns",
    "status",
    "status_description",
    "attributes",
    "events",
    "links",
)
Record = tuple[Any, ...]
_FLAGS = [TraceFlags(value) for value in range(4)]  # sampled (1) and random trace id (2), as the SDK sets them
Sink = Callable[[Record], None]


def _link_record(link: Link) -> tuple[Any, ...]:
    ctx = link.context
    state = ctx.trace_state.to_header() if ctx.trace_state else ""
    return (ctx.trace_id, ctx.span_id, int(ctx.trace_flags), state, dict(link.attributes or {}))


class RecordedSpan(trace.Span):
    """An API span that keeps its data in plain fields and hands one record to ``sink`` when it ends."""

    __slots__ = (
        "_attrs",
        "_context",
        "_end_ns",
        "_events",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_sink",
        "_start_ns",
        "_status",
        "_status_description",
    )

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attrs: dict[str, Any],
        links: Sequence[Link],
        start_ns: int,
        sink: Sink,
    ) -> None:
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attrs = attrs
        self._links = links
        self._events: list[tuple[str, int, dict[str, Any]]] | None = None
        self._start_ns = start_ns
        self._end_ns = 0
        self._status = StatusCode.UNSET
        self._status_description: str | None = None
        self._sink = sink

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._end_ns

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._end_ns:
            self._attrs.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._end_ns:
            self._attrs[key] = value

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        if self._end_ns:
            return
        if self._events is None:
            self._events = []
        self._events.append((name, timestamp or time.time_ns(), dict(attributes or {})))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if not self._end_ns and context.is_valid:
            self._links = [*self._links, Link(context, attributes)]

    def update_name(self, name: str) -> None:
        if not self._end_ns:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # as the SDK's span: OK is final, UNSET changes nothing, a description only with ERROR
        if self._end_ns or self._status is StatusCode.OK:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        if code is StatusCode.UNSET:
            return
        self._status = code
        self._status_description = description if code is StatusCode.ERROR else None

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The SDK's ``exception`` event (type, message, stack trace)."""
        kind = type(exception)
        module = kind.__module__
        qualified = f"{module}.{kind.__qualname__}" if module and module != "builtins" else kind.__qualname__
        attrs = {
            "exception.type": qualified,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        attrs.update(attributes or {})
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_ns:
            return
        self._end_ns = end_time or time.time_ns()
        context = self._context
        if not context.trace_flags & 1:  # recorded, not sampled (RECORD_ONLY): nothing to export
            return
        parent = self._parent
        state = context.trace_state
        self._sink(
            (
                self._name,
                self._kind.value,
                context.trace_id,
                context.span_id,
                parent.span_id if parent is not None else 0,
                parent.is_remote if parent is not None else False,
                int(context.trace_flags),
                state.to_header() if state else "",
                self._start_ns,
                self._end_ns,
                self._status.value,
                self._status_description,
                self._attrs,
                tuple(self._events) if self._events else (),
                tuple(_link_record(link) for link in self._links) if self._links else (),
            )
        )

    def __repr__(self) -> str:
        ctx = self._context
        return f"RecordedSpan({self._name!r}, trace_id={ctx.trace_id:032x}, span_id={ctx.span_id:016x})"


# the SDK's default sampler (OTEL_TRACES_SAMPLER unset or parentbased_always_on), and always_on, by their
# descriptions: decided here without the sampler's calls (a third of a span's cost), exactly as it decides
_PARENT_BASED_ALWAYS_ON = (
    "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,"
    "localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"
)
_ALWAYS_ON = "AlwaysOnSampler"


class RecordingTracer(trace.Tracer):
    """The SDK tracer's decisions (sampler, ids), with ``RecordedSpan``s that end into ``sink``."""

    def __init__(self, sampler: Any, id_generator: Any, sink: Sink) -> None:
        self.sampler = sampler
        self.id_generator = id_generator
        self.sink = sink
        description = sampler.get_description()
        self._parent_based_on = description == _PARENT_BASED_ALWAYS_ON
        self._always_on = description == _ALWAYS_ON
        self._random_ids = bool(id_generator.is_trace_id_random())

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            random_id = parent.trace_flags.random_trace_id
        else:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            random_id = self._random_ids
        if self._parent_based_on or self._always_on:
            sampled = parent is None or self._always_on or parent.trace_flags.sampled
            recording = sampled  # these samplers DROP what they do not sample
            state = parent.trace_state if parent is not None else None
            attrs = dict(attributes) if attributes else {}
        else:
            result = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
            sampled, recording = result.decision.is_sampled(), result.decision.is_recording()
            state = result.trace_state
            attrs = dict(result.attributes) if result.attributes else {}
        flags = (TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT) | (
            TraceFlags.RANDOM_TRACE_ID if random_id else 0
        )
        made = SpanContext(trace_id, self.id_generator.generate_span_id(), False, _FLAGS[flags], state)
        if not recording:
            return NonRecordingSpan(made)
        links = [link for link in links or () if link.context.is_valid]
        return RecordedSpan(name, made, parent, kind, attrs, links, start_time or time.time_ns(), self.sink)

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        made = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(made, end_on_exit, record_exception, set_status_on_exception) as current:
            yield current
