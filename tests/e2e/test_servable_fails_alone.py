"""Issue 54: the mesh as ``make run`` starts it (scripts/launch_mesh.py: chat, embeddings, Whisper and the
Piper voice) on a machine without espeak-ng. The voice cannot load, so it is reported and skipped: the
launcher names it and brings the whole mesh up, chat, embeddings and transcription serve at every hop, and
speech answers its 503 naming the model and the reason, at the engine and through the gateway.

espeak-ng is hidden by a ``PATH`` of the venv's bin folder and a folder with redis-server alone (the
launcher finds Redis on the PATH); the engine finds espeak-ng with ``shutil.which`` (audio/voice.py).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import httpx
import numpy as np
import soundfile

from support.audio import SPEECH_NAME, VOICE, WHISPER_MODEL, WHISPER_NAME
from support.mesh import launch, wait_up
from support.servers import EMBEDDING_NAME, MODEL_NAME

ESPEAK_REASON = "espeak-ng is not installed"


def path_without_espeak(tmp_path: Path) -> str:
    tools = tmp_path / "tools"
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


def test_make_run_without_espeak_serves_everything_but_the_voice(tmp_path: Path) -> None:
    assert (WHISPER_MODEL / "openvino_decoder_model.xml").is_file(), "run 'make model' first (make test does it)"
    assert VOICE.is_file(), "run 'make model' first (make test does it)"
    mesh = launch(tmp_path / "run", env={"PATH": path_without_espeak(tmp_path)})
    try:
        wait_up(mesh, timeout_s=600)  # four models load on a shared machine
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
        assert mesh.proc.poll() is None
    finally:
        assert mesh.stop() == 0, mesh.output(40)
