"""OpenTelemetry traces for every genmesh service: off, and then nearly free, unless an OTLP endpoint is set.

``configure_tracing`` (each service's CLI calls it next to ``configure_logging``) turns tracing on
only when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``). Everything else is the SDK's, configured by the standard
``OTEL_*`` variables: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the service's own name
by default), ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based, always on),
``OTEL_EXPORTER_OTLP_*`` (OTLP over HTTP/protobuf), ``OTEL_BSP_*`` and ``OTEL_SPAN_*`` limits.

The service itself only records: its tracer (``span_recorder``) samples and makes ids as the SDK's
does, and an ended span becomes one plain record, carried without blocking (``span_shipper``) to the
service's span exporter, a child process (``span_export``) where the SDK's ``BatchSpanProcessor``
and OTLP exporter do the rest: a bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048); when the
collector is slow or down it fills and its oldest spans are dropped (counted, one warning a minute),
so a request never waits for the collector, and the span's SDK objects and protobuf encoding are
paid off the service's event loop, on another core.

Cheap per request: a span is started with ``start_span`` and made current by a plain context manager
(no generator context managers), the upstream's ``traceparent`` is formatted directly
(``trace_headers``), and a caller may gather attributes and set them once (the gateway makes one span
per request; docs/observability.md gives the cost).

W3C ``traceparent`` / ``tracestate`` are accepted on every hop; a malformed one is ignored (a new
trace starts). ``inject`` writes the current span's context into the headers of an upstream call.
Prompt and completion text are never recorded unless the service's ``--trace-content`` setting asks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, SpanKind, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..common import output_token_limit
from .limits import TracingLimits

log = logging.getLogger("genmesh.tracing")

SHUTDOWN_TIMEOUT_S = 3.0  # the most a stopping service waits to export its last spans
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# GenAI semantic conventions' operation names, by OpenAI path
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/responses": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/v1/score": "rerank",
}
Attributes = Mapping[str, Any]


class Tracing:
    """The process's tracer (a no-op one when tracing is off) and whether text may be recorded."""

    def __init__(self, tracer: Tracer | None = None, shipper: Any = None, record_content: bool = False) -> None:
        self.enabled = tracer is not None
        self.tracer: Tracer = tracer if tracer is not None else trace.NoOpTracer()
        self.shipper = shipper  # a SpanShipper: the way to the span exporter process
        self.record_content = record_content

    @property
    def dropped_spans(self) -> int:
        """Spans dropped so far because the export queue was full (a slow or absent collector)."""
        return int(getattr(self.shipper, "dropped", 0))

    @property
    def exporter_pid(self) -> int | None:
        """The span exporter process's id (None when tracing is off)."""
        return getattr(self.shipper, "pid", None)

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Export what is queued and stop, giving up after ``timeout_s`` (a collector that is down must not
        hold a stopping service: the exporter would retry for its whole timeout)."""
        if self.shipper is not None:
            self.shipper.shutdown(timeout_s)


_current = Tracing()


def tracing() -> Tracing:
    """The process's tracing (off until ``configure_tracing`` turns it on)."""
    return _current


def tracing_wanted(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure_tracing(
    service_name: str, record_content: bool = False, log_level: str = "INFO", limits: TracingLimits | None = None
) -> Tracing:
    """Turn tracing on when an OTLP endpoint is configured (see the module's docstring); else leave it off."""
    global _current
    if not tracing_wanted():
        _current = Tracing(record_content=record_content)
        return _current
    # imported only when on: a service that does not trace never loads the SDK
    from opentelemetry.sdk.trace import TracerProvider

    from .span_recorder import RecordingTracer
    from .span_shipper import ExporterRefused, SpanShipper

    try:
        # the SDK's sampler (OTEL_TRACES_SAMPLER) and id generator; nothing else of the provider is used here
        provider = TracerProvider(shutdown_on_exit=False)
        shipper = SpanShipper(service_name, log_level, limits)
        shipper.start()
    except (ValueError, ExporterRefused, OSError) as exc:  # a setting the SDK refuses: serve, untraced, say why
        log.error("tracing off: %s", exc)
        _current = Tracing(record_content=record_content)
        return _current
    tracer = RecordingTracer(provider.sampler, provider.id_generator, shipper.add)
    _current = Tracing(tracer, shipper, record_content)
    log.info("tracing on: spans of %s exported by process %s", service_name, shipper.pid)
    return _current


def extract(headers: Iterable[tuple[bytes, bytes]]) -> Context | None:
    """The trace context of W3C ``traceparent`` / ``tracestate`` headers (None: none, or malformed)."""
    carrier: dict[str, str] = {}
    for key, value in headers:
        if key in _TRACE_HEADERS:
            carrier[key.decode("latin-1")] = value.decode("latin-1")
    if "traceparent" not in carrier:
        return None
    context = _PROPAGATOR.extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def inject(headers: MutableMapping[str, str], span: Span | None = None) -> MutableMapping[str, str]:
    """``traceparent`` (and ``tracestate``) of ``span``, or of the current span, added to ``headers``."""
    if _current.enabled:
        context = trace.set_span_in_context(span) if span is not None else None
        _PROPAGATOR.inject(headers, context)
    return headers


def inject_raw(headers: list[tuple[bytes, bytes]], span: Span | None = None) -> list[tuple[bytes, bytes]]:
    """``inject`` for raw ASGI-style header lists."""
    if _current.enabled:
        carrier: dict[str, str] = {}
        inject(carrier, span)
        headers.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items())
    return headers


def current_trace_id() -> str:
    """The current trace's id in hex, for the logs ("-" when none)."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else "-"


def request_attributes(path: str, body: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
    """GenAI request attributes of an OpenAI request body (never its text)."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": OPERATIONS.get(path, "chat")}
    name = model if model is not None else body.get("model")
    if isinstance(name, str):
        attrs["gen_ai.request.model"] = name
    limit = output_token_limit(body)
    if limit is not None:
        attrs["gen_ai.request.max_tokens"] = limit
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        attrs["gen_ai.request.temperature"] = float(temperature)
    return attrs


def span_name(attrs: Attributes) -> str:
    """The GenAI convention's span name: ``{operation} {model}``."""
    model = attrs.get("gen_ai.request.model")
    operation = str(attrs.get("gen_ai.operation.name", "chat"))
    return f"{operation} {model}" if model else operation


def usage_attributes(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}


def annotate(attrs: Attributes) -> None:
    """Attributes on the current span (nothing when tracing is off)."""
    if _current.enabled:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(attrs)


_OFF: AbstractContextManager[None] = nullcontext()  # reusable: nullcontext keeps no state


class _CurrentSpan:
    """A started span, current in the block and ended at its end: ``start_as_current_span``'s work
    without its generator-based context managers (a third of a span's cost on the event loop). An
    exception escaping the block is recorded on the span, which is marked failed, as the SDK does."""

    __slots__ = ("end", "made", "token")

    def __init__(self, made: Span, end: bool = True) -> None:
        self.made = made
        self.end = end  # False: current in the block, ended by the caller
        self.token: Token[Context] | None = None

    def __enter__(self) -> Span:
        self.token = attach(set_span_in_context(self.made))
        return self.made

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            # an error only: not GeneratorExit, CancelledError (BaseExceptions), as the SDK does
            if isinstance(exc, Exception) and self.made.is_recording():
                self.made.record_exception(exc)
                self.made.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if self.token is not None:
                detach(self.token)
            if self.end:
                self.made.end()


def span(
    name: str, attrs: Attributes | None = None, kind: SpanKind = SpanKind.INTERNAL
) -> AbstractContextManager[Span | None]:
    """A child of the current span around a block (None, and nothing done, when tracing is off)."""
    if not _current.enabled:
        return _OFF
    return _CurrentSpan(_current.tracer.start_span(name, kind=kind, attributes=attrs))


def current(made: Span | None) -> AbstractContextManager[Span | None]:
    """``made`` as the current span in the block (not ended by it)."""
    return _OFF if made is None else _CurrentSpan(made, end=False)


def start_span(
    name: str, attrs: Attributes | None = None, kind: SpanKind = SpanKind.INTERNAL, context: Context | None = None
) -> Span | None:
    """A span the caller ends (``end_span``), a child of ``context`` or of the current span."""
    if not _current.enabled:
        return None
    return _current.tracer.start_span(name, context=context, kind=kind, attributes=attrs)


def end_span(made: Span | None, attrs: Attributes | None = None, error: str | None = None) -> None:
    if made is None:
        return
    if attrs:
        made.set_attributes(attrs)
    if error is not None:
        made.set_status(trace.StatusCode.ERROR, error)
    made.end()


def clock_anchor() -> tuple[int, float]:
    """The wall clock (ns) and ``time.perf_counter()`` read together, to place perf-counter readings in time."""
    return time.time_ns(), time.perf_counter()


def past_span(
    name: str,
    start_s: float,
    end_s: float,
    context: Context | None,
    attrs: Attributes | None = None,
    anchor: tuple[int, float] | None = None,
) -> None:
    """A span recorded afterwards from two ``time.perf_counter()`` readings (the engine's phases); spans
    placed with one ``anchor`` meet exactly where their readings do."""
    if not _current.enabled:
        return
    now_ns, now_pc = anchor or clock_anchor()
    start_ns = now_ns - int((now_pc - start_s) * 1e9)
    made = _current.tracer.start_span(name, context=context, attributes=attrs, start_time=start_ns)
    made.end(end_time=now_ns - int((now_pc - end_s) * 1e9))


def current_context() -> Context | None:
    """The current context, to parent spans made later elsewhere (None when tracing is off)."""
    if not _current.enabled:
        return None
    from opentelemetry.context import get_current

    return get_current()


def server_span(method: str, path: str, headers: Iterable[tuple[bytes, bytes]]) -> AbstractContextManager[Span | None]:
    """The SERVER span of one request, current in the block: a child of the request's ``traceparent``,
    else the root of a new trace (None, and nothing done, when tracing is off)."""
    if not _current.enabled:
        return _OFF
    attrs = {"gen_ai.operation.name": OPERATIONS.get(path, "chat"), "http.route": path}
    context = extract(headers)
    return _CurrentSpan(_current.tracer.start_span(f"{method} {path}", context, SpanKind.SERVER, attrs))


def root_span(name: str, attrs: Attributes | None = None) -> AbstractContextManager[Span | None]:
    """The root of a new trace, current in the block, whatever span is current now: work a service
    starts itself (a batch line), never linked to the request that happens to be running (None, and
    nothing done, when tracing is off)."""
    if not _current.enabled:
        return _OFF
    return _CurrentSpan(_current.tracer.start_span(name, context=Context(), kind=SpanKind.INTERNAL, attributes=attrs))


def trace_headers(made: Span | None) -> list[tuple[bytes, bytes]]:
    """W3C ``traceparent`` (and ``tracestate``) naming ``made`` as the parent, for an upstream call's raw
    headers; formatted directly, once per request (none when ``made`` is None)."""
    if made is None:
        return []
    ctx = made.get_span_context()
    if not ctx.is_valid:
        return []
    value = b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, ctx.trace_flags)
    headers = [(b"traceparent", value)]
    if ctx.trace_state:
        headers.append((b"tracestate", ctx.trace_state.to_header().encode("latin-1")))
    return headers


def set_status(made: Span | None, status: int) -> None:
    """The HTTP status on a SERVER span (a 5xx marks it failed)."""
    if made is not None:
        made.set_attribute("http.response.status_code", status)
        if status >= 500:
            made.set_status(trace.StatusCode.ERROR)
