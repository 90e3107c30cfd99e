"""The native launcher brings the whole mesh up, answers the seed's requests, and stops cleanly.

It runs as on a fresh machine without espeak-ng (issue 54): a ``PATH`` of the venv's bin folder and a
folder with redis-server alone (the launcher finds Redis on the PATH; the engine looks espeak-ng up with
``shutil.which``, audio/voice.py). The Piper voice cannot load, so it is reported and skipped: the
launcher names it and brings the whole mesh up, chat, embeddings and transcription serve at every hop,
and speech answers its 503 naming the model and the reason, at the engine and through the gateway.
One mesh serves both tests, in this order (the second ends with its Ctrl-C).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import soundfile

from support.audio import SPEECH_NAME, VOICE, WHISPER_MODEL, WHISPER_NAME
from support.mesh import Mesh, launch, wait_up
from support.polling import wait_until
from support.servers import EMBEDDING_NAME, MODEL_NAME, ROOT

ESPEAK_REASON = "espeak-ng is not installed"


def path_without_espeak(folder: Path) -> str:
    tools = folder / "tools"
    tools.mkdir()
    redis = shutil.which("redis-server")
    assert redis is not None, "run 'make redis' first (make test does it)"
    (tools / "redis-server").symlink_to(redis)
    path = os.pathsep.join([str(Path(sys.executable).parent), str(tools)])
    assert shutil.which("espeak-ng", path=path) is None
    return path


def tone_wav(seconds: float = 1.0, rate: int = 16_000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    soundfile.write(out, (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, format="WAV")
    return out.getvalue()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    assert (WHISPER_MODEL / "openvino_decoder_model.xml").is_file(), "run 'make model' first (make test does it)"
    assert VOICE.is_file(), "run 'make model' first (make test does it)"
    folder = tmp_path_factory.mktemp("native-mesh")
    m = launch(folder / "run", env={"PATH": path_without_espeak(folder)})
    try:
        wait_up(m, timeout_s=600)  # four models load on a shared machine
        yield m
    finally:
        m.stop()


def test_without_espeak_everything_but_the_voice_serves(mesh: Mesh) -> None:
    skipped = [line for line in mesh.lines if "failed to load and is skipped" in line]
    assert len(skipped) == 1, mesh.output(60)
    assert SPEECH_NAME in skipped[0]
    assert ESPEAK_REASON in skipped[0]
    engine, gateway = mesh.url("engine"), mesh.url("gateway")
    # every other servable serves, through the whole mesh
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    r = httpx.post(gateway + "/v1/chat/completions", json=chat, timeout=120)
    assert r.status_code == 200, r.text
    r = httpx.post(gateway + "/v1/embeddings", json={"model": EMBEDDING_NAME, "input": ["Hi"]}, timeout=120)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 384
    files = {"file": ("tone.wav", tone_wav(), "audio/wav")}
    r = httpx.post(gateway + "/v1/audio/transcriptions", data={"model": WHISPER_NAME}, files=files, timeout=120)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["text"], str)
    # speech: the engine's 503 names the model and why, with Retry-After; the gateway relays it
    speech = {"model": SPEECH_NAME, "voice": "alloy", "input": "Hello.", "response_format": "wav"}
    for url in (engine, gateway):
        r = httpx.post(url + "/v1/audio/speech", json=speech, timeout=60)
        assert r.status_code == 503, (url, r.text)
        message = r.json()["error"]["message"]
        assert SPEECH_NAME in message, (url, message)
        assert ESPEAK_REASON in message, (url, message)
        assert int(r.headers["retry-after"]) >= 1
    # the engine reports it everywhere an operator looks, and stays ready for the rest
    health = httpx.get(engine + "/health", timeout=10)
    assert health.status_code == 200, health.text
    assert health.json()["models"][SPEECH_NAME] == "FAILED"
    assert ESPEAK_REASON in health.json()["failed"][SPEECH_NAME]
    cards = {c["id"]: c for c in httpx.get(engine + "/v1/models", timeout=10).json()["data"]}
    assert cards[SPEECH_NAME]["state"] == "FAILED"
    assert ESPEAK_REASON in cards[SPEECH_NAME]["reason"]
    assert {cards[n]["state"] for n in (MODEL_NAME, EMBEDDING_NAME, WHISPER_NAME)} == {"AVAILABLE"}
    status = httpx.get(engine + "/v1/config", timeout=10).json()[SPEECH_NAME]["model_version_status"][0]
    assert status["status"]["error_code"] == "FAILED_PRECONDITION"
    assert ESPEAK_REASON in status["status"]["error_message"]
    for url in (engine, mesh.url("microservice")):  # KServe v2, at the engine and relayed by the microservice
        assert httpx.get(url + "/v2/health/ready", timeout=10).status_code == 200
        ready = httpx.get(f"{url}/v2/models/{SPEECH_NAME}/ready", timeout=10)
        assert ready.status_code == 503, (url, ready.text)
        assert ESPEAK_REASON in ready.json()["error"], (url, ready.text)
        assert int(ready.headers["retry-after"]) >= 1
        assert httpx.get(f"{url}/v2/models/{MODEL_NAME}/ready", timeout=10).status_code == 200
        assert httpx.get(f"{url}/v2/models/no-such-model/ready", timeout=10).status_code == 404
    meta = httpx.get(f"{engine}/v2/models/{WHISPER_NAME}", timeout=10).json()
    assert (meta["name"], meta["versions"]) == (WHISPER_NAME, ["1"])
    metrics = httpx.get(engine + "/metrics", timeout=10).text
    assert f'genmesh_engine_model_load_failed{{kind="speech",model="{SPEECH_NAME}"}} 1.0' in metrics

    def console_shows_the_voice_failed() -> bool:  # read from the engine's metrics by the gateway's console
        rows = httpx.get(gateway + "/console/status", timeout=10).json()["upstreams"]
        return {u["model"]: u["engine"]["model_state"] for u in rows} == {
            MODEL_NAME: "serving",
            EMBEDDING_NAME: "serving",
            WHISPER_NAME: "serving",
            SPEECH_NAME: "failed",
        }

    wait_until(console_shows_the_voice_failed, 15, what="the console to show the voice failed and the rest serving")


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
