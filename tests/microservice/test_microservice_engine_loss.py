"""An engine that dies under the microservice: the open stream ends cleanly, later calls get a quick 503."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from support.polling import wait_until
from support.servers import Server, metric_value, start_engine


@pytest.mark.slow
def test_engine_killed_mid_stream(tmp_path: Path, start_microservice: Callable[..., Server]) -> None:
    engine = start_engine(tmp_path)
    try:
        ms = start_microservice(engine.url, "--connect-timeout-s", "1")
        body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 4000}
        body |= {"ignore_eos": True, "stream": True}
        with httpx.Client(timeout=60) as client, client.stream("POST", ms.url + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            events = (line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: "))
            first = json.loads(next(events))
            assert first["object"] == "chat.completion.chunk"
            wait_until(lambda: metric_value(engine.url, "genmesh_engine_requests_running") == 1, 30, what="generation")
            # Kill the API process (the connection is cut, no goodbye), then its orphaned engine core.
            core = psutil.Process(engine.proc.pid).children(recursive=True)
            engine.proc.kill()
            engine.proc.wait(10)
            for proc in core:
                proc.kill()
            rest = list(events)
        assert rest[-1] == "[DONE]"
        assert rest.count("[DONE]") == 1
        error = json.loads(rest[-2])["error"]
        assert error["type"] == "upstream_error"
        assert error["code"] == "engine_connection_failed"
        assert all("choices" in json.loads(e) for e in rest[:-2])

        started = time.monotonic()
        after = httpx.post(ms.url + "/v1/chat/completions", json={"messages": "hi"}, timeout=10)
        assert time.monotonic() - started < 2.0
        assert after.status_code == 503
        assert after.json()["error"]["code"] == "engine_unavailable"
        assert int(after.headers["retry-after"]) >= 1
        wait_until(lambda: httpx.get(ms.url + "/v1/ready").status_code == 503, 5, what="readiness to turn 503")
        assert httpx.get(ms.url + "/v1/ready").headers["retry-after"] == "1"
    finally:
        engine.stop()
