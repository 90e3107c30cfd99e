"""Spans recorded on the service's path and exported by its span exporter process (span_recorder,
span_shipper, span_export), against a real OTLP/HTTP receiver:

- what arrives is what the OpenTelemetry SDK itself exports for the same spans (a differential test:
  the same scenario through an in-process SDK tracer to the same receiver), limits and resource included;
- a stalled exporter never blocks the service, its buffer stays bounded (spans dropped and counted), and
  spans flow again once it runs;
- the service restarts an exporter that died, and an exporter never outlives its service.

Every process signalled here was started by this test (the exporter is the test process's child)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, StatusCode

from genmesh.protocol.server import tracing as tracing_module
from genmesh.protocol.server.limits import TracingLimits
from genmesh.protocol.server.tracing import Tracing, configure_tracing, extract, server_span, span, tracing
from support.polling import wait_until

from ._otlp_receiver import OtlpReceiver, ReceivedSpan, running

REMOTE_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
REMOTE_PARENT = "00f067aa0ba902b7"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with running() as r:
        yield r


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    tracing().shutdown(1.0)
    tracing_module._current = Tracing()


def _on(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, **env: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def scenario(tracer: trace.Tracer) -> None:
    """Spans of every kind of content: a remote parent with tracestate, attributes of each type (one
    over the length limit, one list), a child that fails with an exception, an event, a link, a status."""
    headers = [
        (b"traceparent", f"00-{REMOTE_TRACE}-{REMOTE_PARENT}-01".encode()),
        (b"tracestate", b"vendor=x"),
    ]
    context = extract(headers)
    root = tracer.start_span("POST /v1/chat/completions", context, SpanKind.SERVER, {"http.route": "/v1/x"})
    root.set_attributes(
        {
            "gen_ai.request.model": "a-model-name-longer-than-the-limit",
            "gen_ai.request.max_tokens": 64,
            "gen_ai.request.temperature": 0.5,
            "genmesh.request.stream": True,
            "gen_ai.response.finish_reasons": ["stop", "length"],
        }
    )
    root.add_event("queued", {"genmesh.queue.position": 3})
    with trace.use_span(root, end_on_exit=False):
        child = tracer.start_span("engine.decode", links=[Link(root.get_span_context(), {"why": "test"})])
        try:
            with trace.use_span(child, end_on_exit=True, record_exception=True, set_status_on_exception=True):
                raise ValueError("a bad thing")
        except ValueError:
            pass
    root.set_status(StatusCode.ERROR, "upstream failed")
    root.update_name("POST /v1/chat/completions (renamed)")
    root.end()


def received(receiver: OtlpReceiver, service: str, count: int) -> list[ReceivedSpan]:
    wait_until(lambda: len([s for s in receiver.spans if s.service == service]) >= count, 30, what=service)
    return sorted((s for s in receiver.spans if s.service == service), key=lambda s: s.name)


def comparable(s: ReceivedSpan, ids: dict[str, str]) -> dict[str, Any]:
    """A received span without what differs from run to run (ids made up, times), ids named by role."""
    return {
        "name": s.name,
        "kind": s.kind,
        "trace": ids.get(s.trace_id, "new"),
        "parent": ids.get(s.parent_id, "local" if s.parent_id else ""),
        "attributes": s.attributes,
        "dropped_attributes": s.dropped_attributes,
        "status": (s.status_code, s.status_message),
        "events": s.events,
        "links": [(ids.get(t, "local"), a) for t, _, a in s.links],
        "flags": s.flags,
        "scope": s.scope,
        "resource": {k: v for k, v in s.resource.items() if k not in ("service.name", "service.instance.id")},
    }


@pytest.mark.parametrize("limits", [True, False], ids=["limits-act", "no-limit-acts"])
def test_what_arrives_is_what_the_sdk_exports(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, limits: bool
) -> None:
    """With limits that act (the SDK's BoundedAttributes) and without (the exporter's fast path)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    _on(monkeypatch, receiver, OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test")
    if limits:
        monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "16")
        monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "6")
    ours = configure_tracing("ours")
    assert ours.enabled
    assert ours.exporter_pid is not None
    scenario(ours.tracer)
    ours.shutdown(5.0)

    # the same spans, made and exported by the SDK in this process (its settings from the same variables)
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    scenario(provider.get_tracer("genmesh"))
    provider.shutdown()

    ids = {REMOTE_TRACE: "remote", REMOTE_PARENT: "remote"}
    mine = [comparable(s, ids) for s in received(receiver, "ours", 2)]
    sdk = [comparable(s, ids) for s in received(receiver, "sdk", 2)]
    assert mine == sdk
    # and what that is, in case both were wrong the same way
    root, child = mine  # by name
    assert root["name"] == "POST /v1/chat/completions (renamed)"
    assert root["parent"] == "remote"
    model = "a-model-name-lon" if limits else "a-model-name-longer-than-the-limit"
    assert root["attributes"]["gen_ai.request.model"] == model  # the length limit, when set
    assert len(root["attributes"]) == 6
    assert root["dropped_attributes"] == 0
    assert root["status"] == (2, "upstream failed")
    assert root["events"] == [("queued", {"genmesh.queue.position": 3})]
    assert root["resource"]["deployment.environment"] == "test"
    assert child["parent"] == "local"
    assert child["trace"] == "remote"
    assert child["events"][0][0] == "exception"
    assert child["events"][0][1]["exception.type"] == "ValueError"
    assert "ValueError: a bad thing" in child["events"][0][1]["exception.stacktrace"]  # (events: no span limit)
    assert child["links"] == [("remote", {"why": "test"})]
    assert child["status"][0] == 2


def test_the_default_sampler_decides_as_the_sdks(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    """The recorder decides the SDK's default sampler itself (fast path); a ratio sampler goes to the SDK."""
    from opentelemetry.sdk.trace import TracerProvider

    _on(monkeypatch, receiver)
    ours = configure_tracing("ours").tracer
    sdk = TracerProvider(shutdown_on_exit=False).get_tracer("sdk")
    for flags in ("01", "00", None):
        headers = [] if flags is None else [(b"traceparent", f"00-{REMOTE_TRACE}-{REMOTE_PARENT}-{flags}".encode())]
        headers.append((b"tracestate", b"k=v"))
        context = extract(headers)
        made = [t.start_span("s", context, SpanKind.SERVER) for t in (ours, sdk)]
        a, b = (m.get_span_context() for m in made)
        assert a.trace_flags == b.trace_flags, flags
        assert a.trace_state == b.trace_state, flags
        assert made[0].is_recording() == made[1].is_recording()
        assert (a.trace_id == int(REMOTE_TRACE, 16)) == (flags is not None)
        inner = []
        for tracer, parent in zip((ours, sdk), made, strict=True):
            with trace.use_span(parent):  # a local parent
                inner.append(tracer.start_span("inner"))
            assert inner[-1].get_span_context().trace_id == parent.get_span_context().trace_id
        assert inner[0].is_recording() == inner[1].is_recording()
        assert inner[0].get_span_context().trace_flags == inner[1].get_span_context().trace_flags
    tracing().shutdown(1.0)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    never = configure_tracing("ours").tracer.start_span("s")
    assert not never.is_recording()
    assert not never.get_span_context().trace_flags.sampled


def _exporter(made: Tracing) -> psutil.Process:
    pid = made.exporter_pid
    assert pid is not None
    return psutil.Process(pid)


def _spans_of(receiver: OtlpReceiver, name: str) -> Callable[[], bool]:
    return lambda: any(s.name == name for s in list(receiver.spans))


def test_a_stalled_exporter_never_blocks_the_service_and_its_buffer_is_bounded(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver
) -> None:
    _on(monkeypatch, receiver)
    made = configure_tracing("svc")
    exporter = _exporter(made)
    me = psutil.Process()
    exporter.suspend()  # SIGSTOP: it reads nothing, the socket fills
    try:
        before = me.memory_info().rss
        big = "x" * 4096
        for i in range(40_000):  # ~160 MB of attributes: far more than the buffer and the socket hold
            with span("stalled", {"payload": f"{i:08d}{big}"}):  # each its own (marshal shares equal objects)
                pass
        made.shipper.flush()
        assert made.dropped_spans > 0  # counted, not queued without bound
        assert len(made.shipper._out) <= TracingLimits().trace_buffer_bytes
        growth = me.memory_info().rss - before
        assert growth < 64 * 2**20, f"the service grew by {growth / 2**20:.0f} MiB"
    finally:
        exporter.resume()
    with span("after the stall"):
        pass
    wait_until(_spans_of(receiver, "after the stall"), 60, what="spans after the exporter runs again")


def test_the_service_restarts_an_exporter_that_died(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    _on(monkeypatch, receiver)
    made = configure_tracing("svc", limits=TracingLimits(trace_exporter_restart_backoff_s=0.0))
    first = _exporter(made)
    first.kill()
    first.wait(10)
    wait_until(lambda: made.exporter_pid not in (None, first.pid), 30, what="a new exporter")
    assert _exporter(made).is_running()

    def sent() -> bool:
        with span("after the restart"):
            pass
        made.shipper.flush()
        return _spans_of(receiver, "after the restart")()

    wait_until(sent, 60, interval_s=0.5, what="spans through the new exporter")


def test_an_exporter_never_outlives_its_service(receiver: OtlpReceiver) -> None:
    """The service killed with SIGKILL (no clean-up runs): its exporter sees the socket close and exits."""
    code = textwrap.dedent(
        """
        import sys, time
        from genmesh.protocol.server.tracing import configure_tracing
        made = configure_tracing("doomed")
        print(made.exporter_pid, flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    service = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert service.stdout is not None
        exporter = psutil.Process(int(service.stdout.readline()))
        assert exporter.ppid() == service.pid
        service.send_signal(signal.SIGKILL)
        service.wait(10)
        exporter.wait(30)  # psutil.TimeoutExpired if it lingers
        assert not exporter.is_running()
    finally:
        if service.poll() is None:
            service.kill()
            service.wait(10)


def test_a_span_carries_the_server_span_of_the_request(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    """The module's helpers on the recorder: a server span with its status, a child under it."""
    _on(monkeypatch, receiver)
    configure_tracing("svc")
    with server_span("POST", "/v1/chat/completions", []) as root:
        assert root is not None
        assert root.is_recording()
        with span("child") as inner:
            assert inner is not None
        tracing_module.set_status(root, 503)
    tracing().shutdown(5.0)
    spans = {s.name: s for s in received(receiver, "svc", 2)}
    server, child = spans["POST /v1/chat/completions"], spans["child"]
    assert child.parent_id == server.span_id
    assert child.trace_id == server.trace_id
    assert server.parent_id == ""
    assert server.kind == 2
    assert server.attributes["http.response.status_code"] == 503
    assert server.status_code == 2
