"""The native launcher brings the whole mesh up, answers the seed's requests, and stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from support.mesh import Mesh, launch, wait_up
from support.polling import wait_until
from support.servers import EMBEDDING_NAME, MODEL_NAME, ROOT


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    m = launch(tmp_path / "run")
    try:
        wait_up(m)
        yield m
    finally:
        m.stop()


def test_mesh_serves_the_seed_requests_and_stops_clean(mesh: Mesh) -> None:
    children = psutil.Process(mesh.proc.pid).children(recursive=True)
    assert len(children) >= 4  # redis, engine (+ its core), microservice, gateway
    # the seed's curl to the microservice: messages as a string
    r = httpx.post(
        mesh.url("microservice") + "/v1/chat/completions",
        json={"model": "${model_name}", "messages": "What is Deep Learning?", "max_tokens": 17},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion"
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 17  # (the end-of-text token counts)
    # and through the gateway, as the launcher's summary line says (a sample: its text may be empty)
    said = {"messages": [{"role": "user", "content": "What is Deep Learning?"}], "max_tokens": 17}
    r = httpx.post(mesh.url("gateway") + "/v1/chat/completions", json=said, timeout=120)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["choices"][0]["message"]["content"], str)
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 17
    # greedy to a fixed length, the answer's text comes back whole
    fixed = {**said, "temperature": 0, "ignore_eos": True}
    r = httpx.post(mesh.url("gateway") + "/v1/chat/completions", json=fixed, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    assert r.json()["usage"]["completion_tokens"] == 17
    assert any("curl" in line for line in mesh.lines)
    # the embedding model is served beside it, and the launcher prints its curl line too
    assert any("/v1/embeddings" in line for line in mesh.lines)
    emb = {"model": EMBEDDING_NAME, "input": ["What is Deep Learning?"]}
    r = httpx.post(mesh.url("gateway") + "/v1/embeddings", json=emb, timeout=120)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384
    # and it is the rerank model out of the box (a cosine scorer), at OVMS's /v3 path: the RAG notebook's chain
    assert any("/v3/rerank" in line for line in mesh.lines)
    docs = ["Paris is in France.", "Deep learning trains neural networks with many layers."]
    rerank = {"model": EMBEDDING_NAME, "query": "What is Deep Learning?", "documents": docs}
    r = httpx.post(mesh.url("gateway") + "/v3/rerank", json=rerank, timeout=120)
    assert r.status_code == 200, r.text
    assert [x["index"] for x in r.json()["results"]] == [1, 0]
    assert r.json()["meta"]["scoring"] == "embedding_cosine"
    models = httpx.get(mesh.url("gateway") + "/v1/models", timeout=10).json()["data"]
    # the chat and embedding models, and the speech pair make run serves by default (docs/audio.md)
    kinds = {m["id"]: m.get("kind") for m in models}
    assert kinds == {
        MODEL_NAME: "chat",
        EMBEDDING_NAME: "embeddings",
        "whisper-tiny.en": "transcription",
        "piper-joe": "speech",
    }, kinds
    # beside it, the console's URL: open on loopback, as the API is, with each engine's own metrics
    console = next(line for line in mesh.lines if "console" in line and "/console" in line).split()[-1]
    assert console == mesh.url("gateway") + "/console"
    assert httpx.get(console, timeout=10).status_code == 200

    def engine_metrics_seen() -> bool:
        status = httpx.get(console + "/status", timeout=10).json()
        return status["upstreams"][0]["engine"]["kv_cache_usage"] is not None

    wait_until(engine_metrics_seen, 15, what="the console to read the engine's KV-cache use")
    assert any("the private Redis is ephemeral" in line for line in mesh.lines)  # and says so
    # a second launch on the same run dir does not start another copy
    again = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "launch_mesh.py"), "--run-dir", str(mesh.run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0
    assert "already running" in again.stdout
    # Ctrl-C stops every process the launcher started
    mesh.proc.send_signal(signal.SIGINT)
    assert mesh.proc.wait(60) == 0
    wait_until(
        lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children),
        30,
        what="every mesh process to exit",
    )
    assert (mesh.run_dir / "logs" / "engine.log").stat().st_size > 0
