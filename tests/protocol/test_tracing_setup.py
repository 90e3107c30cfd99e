"""genmesh.protocol.server.tracing in-process: when tracing turns on, what a bad OTEL_* value does,
that a malformed traceparent is ignored, that an incoming sampled flag is honoured and carried on,
that a full span queue drops spans with a count (not a warning each), and that a stopping service
waits for a collector that is down no longer than its bound."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from genmesh.protocol.server import tracing as tracing_module
from genmesh.protocol.server.tracing import (
    Tracing,
    configure_tracing,
    extract,
    inject,
    server_span,
    span,
    trace_headers,
    tracing,
    tracing_wanted,
)
from support.polling import wait_until


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    tracing().shutdown(0.1)
    tracing_module._current = Tracing()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed


def test_only_an_endpoint_turns_tracing_on() -> None:
    assert not tracing_wanted({})
    assert not tracing_wanted({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"})
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": " "})


def test_off_means_no_spans_and_no_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not configure_tracing("svc").enabled
    with span("x") as made:
        assert made is None
    assert inject({}) == {}


def test_a_refused_setting_leaves_the_service_untraced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port_url())
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")  # larger than the queue: the SDK refuses it
    assert not configure_tracing("svc").enabled
    assert "tracing off" in caplog.text


@pytest.mark.parametrize(
    "value",
    ["", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "00-" + "a" * 32 + "-" + "0" * 16 + "-01", "00-xyz"],
)
def test_a_malformed_traceparent_is_ignored(value: str) -> None:
    assert extract([(b"traceparent", value.encode()), (b"tracestate", b"a=b")]) is None


def test_a_valid_traceparent_is_the_parent_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port_url())
    configure_tracing("svc")
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    context = extract([(b"traceparent", f"00-{trace_id}-{parent}-01".encode())])
    assert context is not None
    with tracing().tracer.start_as_current_span("server", context=context):
        headers = inject({})
    assert headers["traceparent"].startswith(f"00-{trace_id}-")
    assert parent not in headers["traceparent"]  # the new span is the next hop's parent


def test_stopping_with_the_collector_down_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port_url())
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    made = configure_tracing("svc")
    assert made.enabled
    for _ in range(50):
        with span("s"):
            pass
    started = time.monotonic()
    made.shutdown(1.0)
    assert time.monotonic() - started < 5  # the exporter alone would retry for its 10 s timeout


@pytest.mark.parametrize("flags", ["01", "00"])
def test_the_callers_sampled_flag_is_honoured_and_carried_on(monkeypatch: pytest.MonkeyPatch, flags: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port_url())
    configure_tracing("svc")  # the default sampler: parent-based, always on
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = [(b"traceparent", f"00-{trace_id}-{parent}-{flags}".encode()), (b"tracestate", b"vendor=x")]
    with server_span("POST", "/v1/chat/completions", headers) as made:
        assert made is not None
        assert made.is_recording() == (flags == "01")
        sent = {k.decode(): v.decode() for k, v in trace_headers(made)}
        assert sent == inject({})  # what the SDK's propagator writes
    assert sent["traceparent"].startswith(f"00-{trace_id}-")
    assert sent["traceparent"].endswith(f"-{flags}")
    assert parent not in sent["traceparent"]
    assert sent["tracestate"] == "vendor=x"
    assert trace_headers(None) == []


def test_a_full_span_queue_drops_with_a_count_not_a_warning_each(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port_url())
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    made = configure_tracing("svc")
    caplog.set_level(logging.WARNING)
    for _ in range(200):  # the collector is down: the exporter's queue fills at once
        with span("s"):
            pass
    made.shipper.flush()
    # counted in the exporter process and reported back to the service
    # the queue, the exporter's backlog of records, and a batch being exported: 8 each
    wait_until(lambda: made.dropped_spans >= 200 - 3 * 8, 30, what="the exporter's drop count")
    wait_until(lambda: any("dropping" in r.getMessage().lower() for r in caplog.records), 10, what="the warning")
    drops = [r for r in caplog.records if "dropping" in r.getMessage().lower()]
    assert len(drops) == 1, [r.getMessage() for r in drops]  # one line, not one per span
    assert "spans" in drops[0].getMessage()
    assert "dropping" not in capfd.readouterr().err.lower()  # nor one per span from the exporter's SDK


def test_dropped_spans_are_a_prometheus_counter_of_every_service(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from genmesh.protocol.server import tracing as tracing_module
    from genmesh.protocol.server.metrics import Metrics

    assert b"genmesh_tracing_dropped_spans_total 0.0" in Metrics().render()  # tracing off: none
    monkeypatch.setattr(tracing_module, "_current", tracing_module.Tracing(shipper=SimpleNamespace(dropped=7)))
    assert b"genmesh_tracing_dropped_spans_total 7.0" in Metrics().render()
