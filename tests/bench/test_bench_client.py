"""One request against a scripted server (real HTTP on loopback); the load loop's concurrency cap and arrivals."""

from __future__ import annotations

import asyncio
import math

import pytest

from genmesh.bench.datasets import RequestSpec
from genmesh.bench.hops import idle_ttfts
from genmesh.bench.load import Endpoint, arrival_offsets, measure, send, session
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
        result = await measure(Endpoint(server.url), [REQ] * 9, label="capped", max_concurrency=cap)
    assert (result["completed"], result["failed"], result["errors"]) == (9, 0, [])
    assert result["total_output_tokens"] == 18
    assert result["output_lens"] == [2] * 9
    assert result["max_concurrency"] == cap
    assert server.max_in_flight == cap


async def test_load_without_a_cap_sends_everything_at_once() -> None:
    async with ScriptedServer(tokens=1) as server:
        result = await measure(Endpoint(server.url), [REQ] * 6, label="burst")
    assert server.max_in_flight == 6
    assert result["output_throughput"] > 0
    assert result["request_rate"] is None
    assert 0 <= result["steal_percent"] <= 100


async def test_a_health_poller_runs_beside_the_load() -> None:
    async with ScriptedServer(tokens=8) as server:
        result = await measure(Endpoint(server.url), [REQ] * 2, health_url="/health", health_interval_s=0.005)
    assert result["health_polls"] >= 1
    assert result["health_failures"] == 0
    assert 0 < result["health_p50_ms"] <= result["health_p99_ms"] <= result["health_max_ms"]


async def test_request_rate_spreads_the_sends() -> None:
    rate = 40.0
    async with ScriptedServer(tokens=1) as server:
        result = await measure(Endpoint(server.url), [REQ] * 8, request_rate=rate, seed=5)
    planned = arrival_offsets(8, rate, seed=5)
    assert not math.isinf(planned[-1])
    assert result["request_rate"] == rate
    assert result["duration_s"] >= planned[-1]  # nobody leaves before its arrival time
    assert server.max_in_flight < 8  # spread out, not all at once


async def test_idle_ttfts_send_one_request_at_a_time_to_each_target() -> None:
    async with ScriptedServer(tokens=2) as a, ScriptedServer(tokens=2) as b:
        ttfts = await idle_ttfts({"a": Endpoint(a.url), "b": Endpoint(b.url)}, 3, 2)
    assert {name: len(v) for name, v in ttfts.items()} == {"a": 3, "b": 3}
    assert all(t > 0 for v in ttfts.values() for t in v)
    assert a.max_in_flight == b.max_in_flight == 1
    assert [body["max_tokens"] for body in a.bodies] == [2, 2, 2]


BODY = b"".join(
    b"data: " + line + b"\n\n"
    for line in (
        b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
        b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}',
        b"[DONE]",
    )
)


class DroppingServer:
    """Answers one request per connection and drops the connection when a second request arrives on it,
    before any byte of response (what a keep-alive close racing a reuse looks like; cpp-httplib's)."""

    def __init__(self) -> None:
        self.answered = 0
        self.dropped = 0

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                await reader.readexactly(int(length.split(b":")[1]))
                if served:
                    self.dropped += 1
                    return  # closes without a byte of response
                served += 1
                self.answered += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_a_reused_connection_the_server_dropped_is_retried_once() -> None:
    server = DroppingServer()
    async with server as url:
        run = await measure(Endpoint(url, "m"), [REQ] * 4, max_concurrency=1)
    assert run["completed"] == 4, run["errors"]
    assert run["failed"] == 0
    assert server.answered == 4
    assert server.dropped >= 1  # connections were reused and dropped, and each such request sent again


async def test_the_retry_never_takes_another_stale_connection_from_the_pool() -> None:
    server = DroppingServer()
    async with server as url, session(url, 3) as client:
        endpoint = Endpoint(url, "m")
        first = await asyncio.gather(*(send(client, endpoint, REQ) for _ in range(3)))  # 3 pooled connections
        assert all(o.success for o in first)
        out = await send(client, endpoint, REQ)  # on a stale one; the pool still holds two more
    assert out.success, out.error
    assert (server.answered, server.dropped) == (4, 1)


async def test_a_request_the_server_answered_is_not_sent_again() -> None:
    async with ScriptedServer(status=500) as server, session(server.url, 1) as client:
        out = await send(client, Endpoint(server.url, "m"), REQ)
    assert not out.success
    assert len(server.bodies) == 1
