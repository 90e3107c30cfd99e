"""The gateway's --trace-content opt-in: with it, the prompt is in the request's span; tracing on
without it is tested in test_tracing_mesh.py (no text anywhere). A real gateway process, a real
Redis, the fake upstream (a stand-in engine: this test is about the gateway's span only) and the
real OTLP receiver."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from support.gateway_helpers import StartGateway, chat, model_config
from support.polling import wait_until
from support.servers import Server

from ._otlp_receiver import OtlpReceiver, running


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with running() as r:
        yield r


@pytest.mark.parametrize("opt_in", [True, False])
def test_the_prompt_is_recorded_only_when_asked(
    start_gateway: StartGateway,
    fake_upstream: Server,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    opt_in: bool,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url + "/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gw-under-test")
    flags = ("--trace-content",) if opt_in else ()
    gw = start_gateway({"m": model_config(fake_upstream.url)}, *flags)
    body = chat("m")
    body["messages"][0]["content"] = "secret words"
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text

    def server_span() -> list[dict[str, object]]:
        return [s.attributes for s in receiver.spans if s.service == "gw-under-test" and s.kind == 2]

    wait_until(server_span, 30, interval_s=0.1, what="the gateway's span")
    (attrs,) = server_span()
    assert attrs["gen_ai.request.model"] == "m"
    if opt_in:
        assert json.loads(str(attrs["gen_ai.input.messages"])) == body["messages"]
    else:
        assert "gen_ai.input.messages" not in attrs
        assert not any("secret words" in json.dumps(s.attributes) for s in receiver.spans)
