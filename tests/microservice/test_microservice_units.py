"""The microservice's pieces in process: OPEA normalisation, settings, and the app over a scripted engine.

The scripted engine (a real aiohttp server on loopback) lets these tests see exactly what the
microservice sends upstream (headers, paths, bodies) and feed it failures the real engine
cannot be made to produce on demand. Behaviour against the real engine is in the other modules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genmesh.microservice import MicroserviceSettings, create_app, parse_settings
from genmesh.microservice.normalise import CHAT_PATH, COMPLETIONS_PATH, normalise_chat, normalise_completion
from genmesh.protocol import OpenAIError
from support.service_cli import MICROSERVICE_FLAGS, check_flags, refusal

Engine = Callable[[web.Request], Awaitable[web.StreamResponse]]

# --- normalisation ---------------------------------------------------------------------------


def test_string_messages_become_a_completion_without_the_legacy_16_token_default() -> None:
    call = normalise_chat({"model": "${model_name}", "messages": "What is Deep Learning?"}, "m1")
    assert call.path == COMPLETIONS_PATH
    assert call.body == {"model": "m1", "prompt": "What is Deep Learning?", "max_tokens": None}
    assert call.stream is False


def test_list_messages_stay_a_chat_request() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    call = normalise_chat({"messages": msgs, "max_tokens": 17, "stream": True}, None)
    assert call.path == CHAT_PATH
    assert call.body == {"messages": msgs, "max_tokens": 17, "stream": True}
    assert call.stream is True


def test_opea_names_are_mapped() -> None:
    call = normalise_chat({"messages": "hi", "max_new_tokens": 5, "streaming": True, "top_k": 3}, None)
    assert call.body == {"prompt": "hi", "max_tokens": 5, "stream": True, "top_k": 3}
    assert call.stream is True


def test_max_completion_tokens_means_max_tokens_for_a_prompt() -> None:
    call = normalise_chat({"messages": "hi", "max_completion_tokens": 9}, None)
    assert call.body["max_tokens"] == 9
    assert "max_completion_tokens" not in call.body


@pytest.mark.parametrize(
    ("model", "default", "expected"),
    [
        ("${model_name}", "m1", "m1"),
        ("$model_name", "m1", "m1"),
        ("<model>", "m1", "m1"),
        ("", "m1", "m1"),
        (None, "m1", "m1"),
        ("real/name", "m1", "real/name"),
        ("${model_name}", None, None),
    ],
)
def test_model_defaults_to_llm_model_id(model: str | None, default: str | None, expected: str | None) -> None:
    raw: dict[str, Any] = {"messages": "hi"}
    if model is not None:
        raw["model"] = model
    call = normalise_chat(raw, default)
    assert call.body.get("model") == expected


def test_completions_pass_through_untouched_but_for_the_model() -> None:
    raw = {"prompt": "x", "max_tokens": 3, "stream": True, "whatever": 1}
    call = normalise_completion(raw, "m1")
    assert call.path == COMPLETIONS_PATH
    assert call.body == {**raw, "model": "m1"}
    assert call.stream is True


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({}, "messages"),
        ({"messages": 3}, "messages"),
        ({"messages": None}, "messages"),
        ({"messages": {"role": "user"}}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "   "}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": "hi", "max_tokens": -1}, "max_tokens"),
        ({"messages": "hi", "max_new_tokens": -3}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}, "max_tokens"),
        ({"messages": "hi", "temperature": 9}, "temperature"),
        ({"messages": "hi", "stream": True, "streaming": False}, "streaming"),
        ({"messages": "hi", "nonsense": 1}, "nonsense"),
    ],
)
def test_bad_input_is_refused_naming_the_parameter(raw: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        normalise_chat(raw, None)
    assert info.value.status == 400
    assert info.value.param == param


# --- settings ----------------------------------------------------------------------------------


def test_settings_read_opea_names_and_flags_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_ENDPOINT", raising=False)
    monkeypatch.delenv("LLM_MODEL_ID", raising=False)
    monkeypatch.setenv("vLLM_ENDPOINT", "http://engine:8008/v1/")
    monkeypatch.setenv("LLM_MODEL", "legacy-model")
    monkeypatch.setenv("OPENAI_API_KEY", "")
    monkeypatch.setenv("GENMESH_MICROSERVICE_PORT", "9100")
    s = parse_settings([])
    assert (s.llm_endpoint, s.llm_model_id, s.openai_api_key, s.port) == (
        "http://engine:8008",
        "legacy-model",
        None,
        9100,
    )
    s = parse_settings(["--llm-endpoint", "http://other:1", "--model-id", "flag-model", "--port", "9200"])
    assert (s.llm_endpoint, s.llm_model_id, s.port) == ("http://other:1", "flag-model", 9200)


def test_new_name_wins_over_legacy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_ENDPOINT", "http://new:1")
    monkeypatch.setenv("vLLM_ENDPOINT", "http://old:1")
    monkeypatch.setenv("LLM_MODEL_ID", "new")
    monkeypatch.setenv("LLM_MODEL", "old")
    s = parse_settings([])
    assert (s.llm_endpoint, s.llm_model_id) == ("http://new:1", "new")


def test_settings_refuse_a_non_http_endpoint() -> None:
    with pytest.raises(ValueError, match="http"):
        MicroserviceSettings(llm_endpoint="engine:8008")
    assert "--llm-endpoint" in refusal(parse_settings, ["--llm-endpoint", "engine:8008"])


def test_every_flag_of_before_is_accepted_and_in_the_help() -> None:
    check_flags(parse_settings, MicroserviceSettings, MICROSERVICE_FLAGS)


def test_the_api_key_stays_off_the_command_line() -> None:
    assert "OPENAI_API_KEY" in refusal(parse_settings, ["--openai-api-key", "sk-1"])
    assert "--port (GENMESH_MICROSERVICE_PORT)" in refusal(parse_settings, ["--port", "70000"])


# --- the app over a scripted engine ------------------------------------------------------------


def watching(app: ASGIApp, watch: Callable[[bytes], None]) -> ASGIApp:
    """``app``, with every response body chunk it sends shown to ``watch`` first."""

    async def watched(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_watched(message: Message) -> None:
            if message["type"] == "http.response.body":
                watch(message.get("body", b""))
            await send(message)

        await app(scope, receive, send_watched)

    return watched


@asynccontextmanager
async def app_client(
    engine: Engine, watch_body: Callable[[bytes], None] | None = None, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The app relaying to ``engine``, which answers every request on a loopback HTTP server;
    ``watch_body`` sees each body chunk the app sends back."""
    engine_app = web.Application()
    engine_app.router.add_route("*", "/{path:.*}", engine)
    async with TestServer(engine_app, host="127.0.0.1") as server:
        base = {"llm_endpoint": str(server.make_url("")), "llm_model_id": "m1", "ready_cache_ttl_s": 1.5}
        app = create_app(MicroserviceSettings(**{**base, **settings}))
        asgi = app if watch_body is None else watching(app, watch_body)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://ms.test") as client,
        ):
            yield client


@dataclass(frozen=True)
class Seen:
    """One request as the engine got it."""

    path: str
    headers: Mapping[str, str]
    body: bytes
    peer: tuple[str, int]  # the microservice's end of the connection

    @classmethod
    async def of(cls, request: web.Request) -> Seen:
        assert request.transport is not None
        return cls(request.path, request.headers, await request.read(), request.transport.get_extra_info("peername"))


def sse_data(text: str) -> list[str]:
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]


async def sse_reply(request: web.Request, *chunks: bytes) -> web.StreamResponse:
    """A streamed reply sending ``chunks`` one write each (the reply is not ended)."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for chunk in chunks:
        await response.write(chunk)
    return response


A = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
B = b'data: {"choices":[{"index":0,"text":"b"}]}\n\n'
X = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


async def test_request_id_and_api_key_reach_the_engine() -> None:
    seen: list[Seen] = []

    async def engine(request: web.Request) -> web.Response:
        seen.append(await Seen.of(request))
        return web.json_response({"object": "text_completion", "choices": [{"text": "ok"}]})

    async with app_client(engine, openai_api_key="sk-test") as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"model": "${model_name}", "messages": "hello", "max_new_tokens": 4},
            headers={"X-Request-ID": "rid-42"},
        )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "rid-42"
    assert r.json()["choices"][0]["text"] == "ok"
    (sent,) = seen
    assert sent.path == "/v1/completions"
    assert sent.headers["x-request-id"] == "rid-42"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["user-agent"] == "genmesh-microservice"
    assert "accept-encoding" not in sent.headers
    assert json.loads(sent.body) == {"model": "m1", "prompt": "hello", "max_tokens": 4}


async def test_ovms_prompt_lookup_parameters_reach_the_engine() -> None:
    seen: list[Seen] = []

    async def engine(request: web.Request) -> web.Response:
        seen.append(await Seen.of(request))
        return web.json_response({"object": "chat.completion", "choices": []})

    lookup = {"num_assistant_tokens": 4, "max_ngram_size": 2}
    async with app_client(engine) as client:
        r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], **lookup})
        refused = await client.post("/v1/chat/completions", json={"messages": "hi", "num_assistant_tokens": 0})
    assert r.status_code == 200, r.text
    assert json.loads(seen[0].body).items() >= lookup.items()
    assert refused.status_code == 400  # checked against the shared wire model before the engine sees it
    assert refused.json()["error"]["param"] == "num_assistant_tokens"
    assert len(seen) == 1


async def test_no_authorization_header_without_a_key() -> None:
    seen: list[Seen] = []

    async def engine(request: web.Request) -> web.Response:
        seen.append(await Seen.of(request))
        return web.json_response({"object": "list", "data": []})

    async with app_client(engine) as client:
        r = await client.get("/v1/models")
    assert r.status_code == 200
    assert r.json() == {"object": "list", "data": []}
    assert seen[0].path == "/v1/models"
    assert "authorization" not in seen[0].headers


async def test_engine_error_is_relayed_with_its_status() -> None:
    body = {"error": {"message": "nope", "type": "invalid_request_error", "param": "model", "code": "x"}}

    async def engine(_: web.Request) -> web.Response:
        return web.json_response(body, status=404)

    async with app_client(engine) as client:
        unary = await client.post("/v1/chat/completions", json={"messages": "hi"})
        streamed = await client.post("/v1/chat/completions", json={"messages": "hi", "stream": True})
    assert (unary.status_code, unary.json()) == (404, body)
    assert (streamed.status_code, streamed.json()) == (404, body)


async def test_non_json_engine_error_becomes_an_openai_error() -> None:
    async def engine(_: web.Request) -> web.Response:
        return web.Response(status=500, text="<html>boom</html>", content_type="text/html")

    async with app_client(engine) as client:
        r = await client.post("/v1/chat/completions", json={"messages": "hi"})
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "engine_error"
    assert "boom" in r.json()["error"]["message"]


async def test_a_stream_cut_by_the_engine_ends_with_an_error_event_then_done() -> None:
    relayed = asyncio.Event()

    async def engine(request: web.Request) -> web.StreamResponse:
        response = await sse_reply(request, A)
        # Once the relay reads as bytes arrive, what it got before a cut is relayed before the error.
        async with asyncio.timeout(5):
            await relayed.wait()
        await response.write(B)
        assert request.transport is not None
        request.transport.close()  # two chunks, then the connection breaks mid-body
        return response

    async with app_client(engine, watch_body=lambda chunk: relayed.set() if chunk else None) as client:
        r = await client.post("/v1/chat/completions", json={"messages": "hi", "stream": True})
        metrics = (await client.get("/metrics")).text
    data = sse_data(r.text)
    assert r.status_code == 200
    assert [json.loads(d)["choices"][0]["text"] for d in data[:2]] == ["a", "b"]
    assert json.loads(data[2])["error"]["code"] == "engine_connection_failed"
    assert data[3:] == ["[DONE]"]
    assert 'genmesh_microservice_stream_errors_total{endpoint="/v1/chat/completions"} 1.0' in metrics


async def test_a_stream_that_ends_without_done_gets_an_error_event_then_done() -> None:
    async def engine(request: web.Request) -> web.StreamResponse:
        response = await sse_reply(request, A)
        await response.write_eof()
        return response

    async with app_client(engine) as client:
        r = await client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    data = sse_data(r.text)
    assert json.loads(data[0])["choices"][0]["text"] == "a"
    assert json.loads(data[1])["error"]["code"] == "engine_stream_cut"
    assert data[2:] == ["[DONE]"]


async def test_upstream_done_is_relayed_exactly_once_and_the_connection_reused() -> None:
    seen: list[Seen] = []

    async def engine(request: web.Request) -> web.StreamResponse:
        seen.append(await Seen.of(request))
        response = await sse_reply(request, X, DONE)
        await response.write_eof()
        return response

    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    async with app_client(engine) as client:
        first = await client.post("/v1/chat/completions", json=body)
        second = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
    assert sse_data(first.text)[1:] == ["[DONE]"]
    assert sse_data(second.text)[1:] == ["[DONE]"]
    assert 'genmesh_microservice_time_to_first_token_seconds_count{endpoint="/v1/chat/completions"} 2.0' in metrics
    # A stream read to its end hands its connection back: the second request came on the same one.
    assert seen[0].peer == seen[1].peer


async def test_engine_silence_is_a_timeout_before_and_during_a_stream() -> None:
    release = asyncio.Event()

    async def engine(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        response = await sse_reply(request, A) if body.get("stream") else web.StreamResponse()
        await release.wait()  # then nothing more until the test is over
        return response

    try:
        async with app_client(engine, read_timeout_s=0.2) as client:
            unary = await client.post("/v1/completions", json={"prompt": "hi"})
            streamed = await client.post("/v1/completions", json={"prompt": "hi", "stream": True})
    finally:
        release.set()
    assert unary.status_code == 504
    assert unary.json()["error"]["code"] == "engine_timeout"
    data = sse_data(streamed.text)
    assert json.loads(data[0])["choices"][0]["text"] == "a"
    assert json.loads(data[1])["error"]["code"] == "engine_timeout"
    assert data[2:] == ["[DONE]"]


async def test_readiness_is_cached_and_concurrent_probes_share_one_engine_call() -> None:
    calls: list[str] = []

    async def engine(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"status": "ok"})

    async with app_client(engine, ready_cache_ttl_s=60) as client:
        replies = await asyncio.gather(*(client.get("/v1/ready") for _ in range(20)))
    assert {r.status_code for r in replies} == {200}
    assert replies[0].json()["engine"] == {"status": "ok", "http_status": 200}
    assert calls == ["/health"]


async def test_a_not_ready_answer_is_not_cached_so_a_recovered_engine_is_seen_at_once() -> None:
    status = [503]

    async def engine(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok" if status[0] == 200 else "restarting"}, status=status[0])

    async with app_client(engine, ready_cache_ttl_s=60) as client:
        assert (await client.get("/v1/ready")).status_code == 503
        status[0] = 200  # the engine's new core is up
        assert (await client.get("/v1/ready")).status_code == 200
        status[0] = 503
        assert (await client.get("/v1/ready")).status_code == 200  # a ready answer is reused for the TTL


async def test_readiness_with_zero_ttl_asks_every_time() -> None:
    calls: list[str] = []

    async def engine(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"status": "unavailable", "reason": "loading"}, status=503)

    async with app_client(engine, ready_cache_ttl_s=0) as client:
        first = await client.get("/v1/ready")
        await client.get("/v1/ready")
    assert first.status_code == 503
    assert first.json()["engine"]["reason"] == "loading"
    assert calls == ["/health", "/health"]
