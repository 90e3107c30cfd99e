"""Bad input, an engine that is not there, and clients that leave: the microservice's failure paths."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from support.servers import GENMESH_ENGINE_ONLY as OURS
from support.servers import Server, engine_running, free_port, metric_value, wait_until

StartMicroservice = Callable[..., Server]

IN_FLIGHT = "genmesh_microservice_requests_in_flight"
LONG = {"max_tokens": 4000, "ignore_eos": True}


@pytest.mark.parametrize(
    ("content", "status", "param", "code"),
    [
        (b"not json", 400, None, "invalid_json"),
        (b'["a", "list"]', 400, None, "invalid_json"),
        (b'{"max_tokens": 5}', 400, "messages", None),
        (b'{"messages": 42}', 400, "messages", None),
        (b'{"messages": {"role": "user", "content": "x"}}', 400, "messages", None),
        (b'{"messages": null}', 400, "messages", None),
        (b'{"messages": []}', 400, "messages", None),
        (b'{"messages": ""}', 400, "messages", None),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "messages[0].role", None),
        (b'{"messages": [{"content": "x"}]}', 400, "messages[0].role", None),
        (b'{"messages": "hi", "max_tokens": -1}', 400, "max_tokens", None),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400, "max_tokens", None),
        (b'{"messages": "hi", "max_new_tokens": -4}', 400, "max_tokens", None),
        (b'{"messages": "hi", "stream": "sometimes"}', 400, "stream", None),
        (b'{"messages": "hi", "temperature": -1}', 400, "temperature", None),
        (b'{"messages": "hi", "no_such_key": 1}', 400, "no_such_key", None),
        pytest.param(
            b'{"messages": "hi", "max_tokens": 100000}', 400, "max_tokens", "context_length_exceeded", marks=OURS
        ),
        pytest.param(
            b'{"messages": "hi", "max_tokens": 100000, "stream": true}',
            400,
            "max_tokens",
            "context_length_exceeded",
            marks=OURS,
        ),
    ],
)
def test_bad_input_is_an_openai_error(
    microservice_url: str, content: bytes, status: int, param: str | None, code: str | None
) -> None:
    r = httpx.post(
        microservice_url + "/v1/chat/completions", content=content, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code


def test_wrong_method_and_path_are_openai_errors(microservice_url: str) -> None:
    missing = httpx.get(microservice_url + "/v1/nothing-here")
    wrong_method = httpx.get(microservice_url + "/v1/chat/completions")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 405
    assert "error" in wrong_method.json()


def _unavailable_within(url: str, body: dict[str, Any] | None, limit_s: float) -> httpx.Response:
    started = time.monotonic()
    r = httpx.get(url, timeout=10) if body is None else httpx.post(url, json=body, timeout=10)
    elapsed = time.monotonic() - started
    assert elapsed < limit_s, f"took {elapsed:.2f}s"
    return r


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A port whose accept queue is full: the kernel drops new SYNs, so a connect hangs (a dead host)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(3):
                filler = socket.socket()
                filler.setblocking(False)
                fillers.append(filler)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            yield f"http://127.0.0.1:{port}"
        finally:
            for filler in fillers:
                filler.close()


@pytest.fixture(params=["closed-port", "black-hole"])
def dead_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "closed-port":
        yield f"http://127.0.0.1:{free_port()}"
    else:
        with black_hole() as url:
            yield url


def test_no_engine_is_a_503_within_two_seconds(start_microservice: StartMicroservice, dead_endpoint: str) -> None:
    ms = start_microservice(dead_endpoint, "--connect-timeout-s", "1")
    for body in (
        {"messages": "hi", "max_tokens": 3},
        {"messages": [{"role": "user", "content": "hi"}], "stream": True},
    ):
        r = _unavailable_within(ms.url + "/v1/chat/completions", body, 2.0)
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == "engine_unavailable"
        assert "unreachable" in error["message"]
    assert _unavailable_within(ms.url + "/v1/models", None, 2.0).status_code == 503
    ready = _unavailable_within(ms.url + "/v1/ready", None, 2.5)
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    # Liveness does not depend on the engine.
    assert httpx.get(ms.url + "/v1/health_check").status_code == 200


def _first_sse_event(lines: Any) -> dict[str, Any]:
    for line in lines:
        if line.startswith("data: "):
            event: dict[str, Any] = json.loads(line.removeprefix("data: "))
            return event
    raise AssertionError("no event")


def test_a_client_leaving_a_stream_aborts_the_generation(microservice_url: str, engine_url: str) -> None:
    wait_until(lambda: engine_running(engine_url) == 0, 60, what="an idle engine")
    body = {"messages": "Tell me a long story.", "stream": True, **LONG}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", microservice_url + "/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        assert _first_sse_event(lines)["object"] == "text_completion"
        wait_until(lambda: engine_running(engine_url) == 1, 30, what="the engine to run the request")
        assert metric_value(microservice_url, IN_FLIGHT) == 1
    # Leaving the block closed the connection mid-stream.
    wait_until(lambda: engine_running(engine_url) == 0, 10, what="the engine to abort the generation")
    wait_until(lambda: metric_value(microservice_url, IN_FLIGHT) == 0, 10, what="the microservice to finish")


def test_a_client_leaving_a_unary_request_aborts_the_generation(microservice_url: str, engine_url: str) -> None:
    wait_until(lambda: engine_running(engine_url) == 0, 60, what="an idle engine")
    payload = json.dumps({"messages": [{"role": "user", "content": "Tell me a long story."}], **LONG}).encode()
    host, port = httpx.URL(microservice_url).host, httpx.URL(microservice_url).port
    with socket.create_connection((host, port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wait_until(lambda: engine_running(engine_url) == 1, 30, what="the engine to run the request")
    wait_until(lambda: engine_running(engine_url) == 0, 10, what="the engine to abort the generation")
    wait_until(lambda: metric_value(microservice_url, IN_FLIGHT) == 0, 10, what="the microservice to finish")
