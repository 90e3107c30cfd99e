"""Speech in and speech out through the microservice and the gateway (issue 43): the OpenAI SDK's
audio calls (every transcription format, streaming both ways) relayed hop by hop, the gateway's
metering (audio seconds and characters per key, in usage and metrics) and its answers to bad input."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import soundfile

from support.audio import (
    SPEECH_NAME,
    SPOKEN,
    WHISPER_NAME,
    assert_heard_and_spoken,
    input_audio,
    pcm16_wav,
    spoken_turn,
    wer,
)
from support.embeddings_mesh import ADMIN, Mesh
from support.hostile import memory_status
from support.polling import wait_until
from support.servers import MODEL_NAME

pytestmark = pytest.mark.timeout(900)
TEXT = "The library is quiet and full of old books. Our teacher asked us to write a short story."


@pytest.fixture(scope="module", params=["microservice", "gateway"])
def hop(request: pytest.FixtureRequest, audio_mesh: Mesh) -> tuple[str, str]:
    """The base URL and API key of one hop in front of the engine."""
    if request.param == "microservice":
        return audio_mesh.microservice.url, "unused"
    secret, _ = audio_mesh.key()
    return audio_mesh.gateway.url, secret


def client(hop: tuple[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=hop[0] + "/v1", api_key=hop[1], max_retries=0, timeout=300)


def test_speech_and_every_transcription_format_at_the_hop(hop: tuple[str, str]) -> None:
    c = client(hop)
    with c.audio.speech.with_streaming_response.create(
        model=SPEECH_NAME, voice="nova", input=TEXT, response_format="wav"
    ) as reply:
        audio = b"".join(reply.iter_bytes())
    assert soundfile.info(io.BytesIO(audio)).duration > 3
    file = ("s.wav", audio, "audio/wav")
    plain = c.audio.transcriptions.create(model="whisper-1", file=file)
    assert wer(TEXT, plain.text) <= 0.2, plain.text
    assert c.audio.transcriptions.create(model=WHISPER_NAME, file=file, response_format="text").strip() == plain.text
    assert c.audio.transcriptions.create(model=WHISPER_NAME, file=file, response_format="srt").startswith(
        "1\n00:00:00,000"
    )
    assert c.audio.transcriptions.create(model=WHISPER_NAME, file=file, response_format="vtt").startswith("WEBVTT")
    verbose = c.audio.transcriptions.create(
        model=WHISPER_NAME, file=file, response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert verbose.segments
    assert verbose.words
    assert verbose.duration > 3
    events = list(c.audio.transcriptions.create(model=WHISPER_NAME, file=file, stream=True))
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(done) == 1
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta").strip() == done[0].text


def test_gateway_meters_audio_seconds_and_characters_per_key(audio_mesh: Mesh) -> None:
    secret, key_id = audio_mesh.key()
    c = client((audio_mesh.gateway.url, secret))
    said = "We planted tomatoes and beans in the garden."
    audio = c.audio.speech.create(model=SPEECH_NAME, voice="alloy", input=said, response_format="flac").content
    seconds = soundfile.info(io.BytesIO(audio)).duration
    c.audio.transcriptions.create(model=WHISPER_NAME, file=("s.flac", audio, "audio/flac"))
    usage = httpx.get(f"{audio_mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=10).json()
    assert usage["speech_characters"] == len(said)
    assert abs(usage["audio_milliseconds"] - seconds * 1000) < 50
    metrics = httpx.get(audio_mesh.gateway.url + "/metrics", headers=ADMIN, timeout=10).text
    assert "genmesh_gateway_audio_seconds_total" in metrics
    assert "genmesh_gateway_speech_characters_total" in metrics


# several of the voice's chunks (--speech-chunk-phonemes 200: about 165 characters each)
SENTENCES = (
    "The library is quiet and full of old books. Our teacher asked us to write a short story. "
    "We planted tomatoes and beans in the garden. The train left the station early in the morning. "
    "My brother likes to read about ships and the sea. The baker sells fresh bread every day. "
    "Children played football in the park after school. The museum opens at nine on Saturdays. "
    "She painted the fence white before the summer rain. We watched the stars from the hill at night."
)


def _speech_characters(mesh: Mesh, key_id: str) -> int:
    usage = httpx.get(f"{mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=10).json()
    return int(usage["speech_characters"])


def test_a_speech_reply_cut_short_is_charged_the_characters_it_sent(audio_mesh: Mesh) -> None:
    """Issue 55 item 5: a client that takes the first 64 KiB of a streamed multi-sentence speech reply
    (less than its first chunk's audio) and leaves is charged that chunk's share of the text, asked of
    the engine through the microservice (more than 0, fewer than all of the characters); one that takes
    the whole reply is charged every character; the engine's count of an id it never saw is a 404."""
    body = {"model": SPEECH_NAME, "voice": "alloy", "input": SENTENCES, "response_format": "pcm"}
    secret, key_id = audio_mesh.key()
    with httpx.stream(
        "POST", audio_mesh.gateway.url + "/v1/audio/speech", json=body, headers=_auth(secret), timeout=120
    ) as r:
        assert r.status_code == 200
        got = 0
        for piece in r.iter_raw():
            got += len(piece)
            if got >= 64 * 1024:
                break
    assert got >= 64 * 1024
    wait_until(lambda: _speech_characters(audio_mesh, key_id) > 0, 30, what="the cut reply charged")
    charged = _speech_characters(audio_mesh, key_id)
    print(f"\n[a cut speech reply: {got} bytes taken, {charged} of {len(SENTENCES)} characters charged]")
    assert 0 < charged < len(SENTENCES), charged
    secret, key_id = audio_mesh.key()
    r = httpx.post(audio_mesh.gateway.url + "/v1/audio/speech", json=body, headers=_auth(secret), timeout=300)
    assert r.status_code == 200
    wait_until(lambda: _speech_characters(audio_mesh, key_id) > 0, 30, what="the whole reply charged")
    assert _speech_characters(audio_mesh, key_id) == len(SENTENCES)
    unknown = httpx.post(audio_mesh.microservice.url + "/v1/audio/speech/sent", json={"speech_id": "x"}, timeout=30)
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["param"] == "speech_id"


def test_the_microservice_relays_an_upload_as_it_comes_and_refuses_one_past_its_limit(audio_mesh: Mesh) -> None:
    """The microservice sends the transcription's form on to the engine as it arrives: a chunked one
    (no Content-Length) transcribes, and one whose body passes --audio-max-bytes + 64 KiB (25 MB) is
    its 413, counted as it came, not a 502 for the engine request it cut off; the microservice's peak
    RSS grows less than 8 MiB meanwhile (0.0 and 0.4 MiB measured; holding the body whole, as it did, 22.3 MiB)."""
    speech = {"model": SPEECH_NAME, "voice": "alloy", "input": "Hello there.", "response_format": "wav"}
    audio = httpx.post(audio_mesh.microservice.url + "/v1/audio/speech", json=speech, timeout=120).content
    boundary = "genmeshboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{WHISPER_NAME}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    url = audio_mesh.microservice.url + "/v1/audio/transcriptions"

    def pieces(*parts: bytes) -> Iterator[bytes]:
        for part in parts:
            for i in range(0, len(part), 1 << 18):
                yield part[i : i + (1 << 18)]

    r = httpx.post(url, content=pieces(head, audio, tail), headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    assert wer("Hello there.", r.json()["text"]) <= 0.5, r.text
    assert audio_mesh.microservice.proc is not None
    pid = audio_mesh.microservice.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory_status(pid, "VmRSS")
    r = httpx.post(url, content=pieces(head, b"\0" * 25_100_000, tail), headers=headers, timeout=120)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["type"] == "invalid_request_error", r.text
    growth = memory_status(pid) - before
    print(f"\n[microservice peak RSS growth for a 25 MB upload: {growth / 2**20:.1f} MiB]")
    assert growth < 8 * 2**20, growth


def _auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def _post(mesh: Mesh, secret: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(mesh.gateway.url + path, headers={"Authorization": f"Bearer {secret}"}, timeout=120, **kwargs)


def _named(r: httpx.Response, status: int, param: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_bad_audio_input_at_the_gateway_is_a_4xx_naming_the_field(audio_mesh: Mesh) -> None:
    secret, _ = audio_mesh.key()
    t = "/v1/audio/transcriptions"
    model = {"model": WHISPER_NAME}
    _named(_post(audio_mesh, secret, t, files={"file": ("e.wav", b"")}, data=model), 400, "file")
    _named(_post(audio_mesh, secret, t, files={"file": ("n.mp3", b"not audio at all " * 50)}, data=model), 400, "file")
    good = _post(
        audio_mesh, secret, "/v1/audio/speech", json={"model": SPEECH_NAME, "input": "Hello there.", "voice": "alloy"}
    )
    assert good.status_code == 200
    samples, rate = soundfile.read(io.BytesIO(good.content))
    whole = io.BytesIO()
    soundfile.write(whole, samples, rate, format="WAV")
    cut = whole.getvalue()[: len(whole.getvalue()) // 2]
    _named(_post(audio_mesh, secret, t, files={"file": ("c.wav", cut)}, data=model), 400, "file")
    _named(_post(audio_mesh, secret, t, files={"file": ("big.wav", b"\0" * 2_050_000)}, data=model), 413, "file")
    _named(_post(audio_mesh, secret, t, data=model), 400, "file")
    _named(_post(audio_mesh, secret, t, files={"file": ("s.wav", cut)}, data={"model": SPEECH_NAME}), 400, "model")
    s = "/v1/audio/speech"
    base = {"model": SPEECH_NAME, "input": "Hello.", "voice": "alloy"}
    _named(_post(audio_mesh, secret, s, json={**base, "voice": "nobody"}), 400, "voice")
    _named(_post(audio_mesh, secret, s, json={**base, "response_format": "aiff"}), 400, "response_format")
    _named(_post(audio_mesh, secret, s, json={**base, "input": "a" * 4097}), 400, "input")
    _named(_post(audio_mesh, secret, s, json={**base, "model": WHISPER_NAME}), 400, "model")
    chat = {"model": WHISPER_NAME, "messages": [{"role": "user", "content": "hi"}]}
    wrong = _post(audio_mesh, secret, "/v1/chat/completions", json=chat)
    _named(wrong, 400, "model")
    assert "/v1/audio/transcriptions" in wrong.json()["error"]["message"]
    # nothing else was harmed: the same key still gets speech
    assert _post(audio_mesh, secret, s, json=base).status_code == 200


def test_spoken_chat_turn_at_the_hop(hop: tuple[str, str]) -> None:
    c = client(hop)
    reply, _ = spoken_turn(c, "nova")
    message = reply.choices[0].message
    assert message.audio is not None
    assert message.content is None
    assert_heard_and_spoken(c, message.audio.transcript, base64.b64decode(message.audio.data))


def test_spoken_chat_turn_streams_at_the_gateway_and_is_metered(audio_mesh: Mesh) -> None:
    secret, key_id = audio_mesh.key()
    # the question is spoken through the microservice (no key), so that the key's usage is the turn's alone
    part, seconds = input_audio(client((audio_mesh.microservice.url, "unused")))
    c = client((audio_mesh.gateway.url, secret))
    stream = c.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Answer in one sentence."}, part]}],  # type: ignore[list-item]
        audio={"voice": "alloy", "format": "pcm16"},
        stream=True,
        **SPOKEN,  # type: ignore[arg-type]
    )
    ids: set[str] = set()
    transcript, pcm, expiries, finishes = "", b"", [], []
    for chunk in stream:
        for choice in chunk.choices:
            assert choice.delta.content is None
            audio: dict[str, Any] = getattr(choice.delta, "audio", None) or {}
            ids.update([audio["id"]] if "id" in audio else [])
            transcript += audio.get("transcript", "")
            pcm += base64.b64decode(audio.get("data", ""))
            expiries += [audio["expires_at"]] if "expires_at" in audio else []
            finishes += [choice.finish_reason] if choice.finish_reason else []
    assert len(ids) == 1
    assert len(expiries) == 1
    assert finishes in (["stop"], ["length"])
    usage_url = f"{audio_mesh.gateway.url}/admin/keys/{key_id}/usage"

    def metered() -> dict[str, Any] | None:
        usage: dict[str, Any] = httpx.get(usage_url, headers=ADMIN, timeout=10).json()
        return usage if usage.get("speech_characters") else None

    wait_until(metered, 30, what="the spoken turn metered")
    usage = metered()
    assert usage is not None
    assert usage["speech_characters"] == len(transcript)
    assert abs(usage["audio_milliseconds"] - seconds * 1000) < 50
    assert_heard_and_spoken(c, transcript, pcm16_wav(pcm))


def test_bad_spoken_chat_input_at_the_gateway_is_a_4xx_naming_the_field(audio_mesh: Mesh) -> None:
    secret, _ = audio_mesh.key()
    path = "/v1/chat/completions"
    good, _ = input_audio(client((audio_mesh.microservice.url, "unused")), "Hello there.")

    def chat(data: str = good["input_audio"]["data"], fmt: str = "wav", **fields: Any) -> httpx.Response:
        part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": [part]}], "max_tokens": 4, **fields}
        return _post(audio_mesh, secret, path, json=body)

    where = "messages[0].content[0].input_audio"
    _named(chat(base64.b64encode(b"not audio at all " * 50).decode()), 400, f"{where}.data")
    _named(chat(""), 400, f"{where}.data")
    _named(chat("%%% not base64 %%%"), 400, f"{where}.data")
    _named(chat(fmt="ogg"), 400, f"{where}.format")
    _named(chat(base64.b64encode(b"\0" * 2_050_000).decode()), 413, f"{where}.data")  # --audio-max-bytes 2000000
    spoken = {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}
    _named(chat(**{**spoken, "audio": {"voice": "nobody", "format": "wav"}}), 400, "audio.voice")
    _named(chat(**{**spoken, "audio": {"voice": "alloy", "format": "aiff"}}), 400, "audio.format")
    _named(chat(**{**spoken, "audio": {"voice": "alloy", "format": "mp3"}}, stream=True), 400, "audio.format")
    _named(chat(modalities=["text", "audio"]), 400, "audio")
    _named(chat(**spoken, n=2), 400, "n")
    # nothing else was harmed: the same key still gets a spoken answer
    assert chat(**spoken).json()["choices"][0]["message"]["audio"]["transcript"]
