"""One request against a scripted server (real HTTP on loopback); the load loop's concurrency cap and arrivals."""

from __future__ import annotations

import math

import pytest

from genmesh.bench.client import Endpoint, send, session
from genmesh.bench.datasets import RequestSpec
from genmesh.bench.load import run_load
from genmesh.bench.rounds import idle_ttfts
from support.bench_fakes import ScriptedServer

REQ = RequestSpec("hello", 5, 4)


def test_chat_and_completion_bodies() -> None:
    chat = Endpoint("http://x", "m").body(RequestSpec("q", 1, 9, system="sys"))
    assert chat["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    assert chat["max_tokens"] == 9
    assert chat["ignore_eos"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["temperature"] == 0.0
    comp = Endpoint("http://x", "m", api="completions", ignore_eos=False, stream=False).body(
        RequestSpec("q", 1, 9, system="sys")
    )
    assert comp["prompt"] == "sys\n\nq"
    assert "ignore_eos" not in comp
    assert "stream" not in comp
    assert Endpoint("http://x", api="completions", prefix="/v3").path == "/v3/completions"


async def test_streamed_request_times_tokens_from_usage() -> None:
    async with ScriptedServer(tokens=4) as server, session(server.url, 2) as client:
        out = await send(client, Endpoint(server.url, "m"), REQ)
    assert out.success, out.error
    assert (out.prompt_tokens, out.output_tokens) == (7, 4)
    assert out.ttft_s is not None
    assert 0 < out.ttft_s <= out.e2e_s
    assert len(out.itl_s) == 3  # four content chunks: three gaps
    assert server.bodies[0]["model"] == "m"


async def test_stream_without_usage_fails_the_request() -> None:
    async with ScriptedServer(tokens=2, usage=False) as server, session(server.url, 2) as client:
        out = await send(client, Endpoint(server.url), REQ)
    assert not out.success
    assert out.error is not None
    assert "usage" in out.error


async def test_http_error_is_a_failed_request_not_an_exception() -> None:
    async with ScriptedServer(status=503) as server, session(server.url, 2) as client:
        out = await send(client, Endpoint(server.url), REQ)
    assert not out.success
    assert out.error is not None
    assert "503" in out.error


@pytest.mark.parametrize("cap", [1, 3])
async def test_load_never_exceeds_max_concurrency(cap: int) -> None:
    async with ScriptedServer(tokens=2) as server:
        result = await run_load(Endpoint(server.url), [REQ] * 9, max_concurrency=cap)
    assert len(result.outputs) == 9
    assert result.errors == []
    assert result.output_tokens == 18
    assert server.max_in_flight == cap


async def test_load_without_a_cap_sends_everything_at_once() -> None:
    async with ScriptedServer(tokens=1) as server:
        result = await run_load(Endpoint(server.url), [REQ] * 6)
    assert server.max_in_flight == 6
    assert result.output_tokens_per_s > 0


async def test_request_rate_spreads_the_sends() -> None:
    rate = 40.0
    async with ScriptedServer(tokens=1) as server:
        result = await run_load(Endpoint(server.url), [REQ] * 8, request_rate=rate, seed=5)
    starts = sorted(o.start_s for o in result.outputs)
    from genmesh.bench.arrivals import arrival_offsets

    planned = arrival_offsets(8, rate, seed=5)
    assert starts[-1] >= planned[-1]  # nobody leaves before its arrival time
    assert result.duration_s >= planned[-1]
    assert not math.isinf(planned[-1])


async def test_idle_ttfts_send_one_request_at_a_time_to_each_target() -> None:

    async with ScriptedServer(tokens=2) as a, ScriptedServer(tokens=2) as b:
        ttfts = await idle_ttfts({"a": Endpoint(a.url), "b": Endpoint(b.url)}, 3, 2)
    assert {name: len(v) for name, v in ttfts.items()} == {"a": 3, "b": 3}
    assert all(t > 0 for v in ttfts.values() for t in v)
    assert a.max_in_flight == b.max_in_flight == 1
    assert [body["max_tokens"] for body in a.bodies] == [2, 2, 2]
