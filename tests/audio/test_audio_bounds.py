"""Audio that claims too much cannot take the engine down (issue 54): files whose header claims
192 kHz x 8 channels x 29 minutes (FLAC, Ogg Vorbis) or more data than they hold (WAV), past the
engine's sample-rate or channel cap, and a spoken chat whose parts together pass the duration limit,
each a 400 naming the file or the part; a 192 kHz x 8-channel FLAC within every limit is decoded
block by block. Throughout, the engine's API process stays the same, its peak RSS grows by less than
``RSS_BOUND`` and a chat request sent alongside is answered 200. Real 8-channel and 192 kHz audio is
transcribed as its mono 16 kHz copy is.

The engine runs the bounded form of the 1,800 s default (``support.audio.MAX_DURATION_S``, 90 s):
the same checks, and a file within it decodes in seconds."""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile
import soxr

from eval_whisper_fidelity import words
from support.audio import MAX_DURATION_S, WHISPER_NAME
from support.audio_bombs import flac_claiming, ogg_claiming, silence, wav_claiming
from support.servers import MODEL_NAME, Server
from support.unharmed import chat, unharmed

pytestmark = pytest.mark.timeout(300)

# What decoding may add to the engine's peak: blocks of 2 MiB and a 16 kHz mono output (40 s: 2.4 MiB),
# with room for Whisper's own buffers. Decoding the 40 s part whole, as before issue 54, held 234 MiB of
# float32 samples and 29 MiB of downmix (264 MiB peak under tracemalloc; the block decoder 6.7 MiB).
RSS_BOUND = 150 * 2**20
HI_RATE, CHANNELS = 192_000, 8
CLAIM_S = 29 * 60  # the bomb: 192 kHz x 8 channels x 29 minutes, 11 GB of float32


@pytest.fixture(scope="module", autouse=True)
def warm_whisper(audio_engine: Server) -> None:
    """Whisper's first inference allocates its buffers (180 MiB here, the window's 30 s whatever the
    audio's length): done once before any test measures the engine's peak RSS."""
    r = transcribe(audio_engine.url, "s.flac", silence("FLAC", "PCM_16", 16_000, 1, 1), response_format="verbose_json")
    assert r.status_code == 200, r.text


def transcribe(url: str, name: str, data: bytes, **fields: Any) -> httpx.Response:
    return httpx.post(
        url + "/v1/audio/transcriptions",
        files={"file": (name, data)},
        data={"model": WHISPER_NAME, **fields},
        timeout=120,
    )


def spoken(url: str, text: str) -> bytes:
    """``text`` spoken by the engine's voice: the clip these tests copy."""
    body = {"model": "piper-joe", "voice": "alloy", "input": text, "response_format": "wav"}
    r = httpx.post(url + "/v1/audio/speech", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.content


def _refused(r: httpx.Response, param: str, code: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error
    return str(error["message"])


def test_files_that_claim_too_much_are_400s_naming_file(audio_engine: Server) -> None:
    url = audio_engine.url
    flac = flac_claiming(silence("FLAC", "PCM_16", HI_RATE, CHANNELS, 1), HI_RATE * CLAIM_S)
    ogg = ogg_claiming(silence("OGG", "VORBIS", HI_RATE, CHANNELS, 2), HI_RATE * CLAIM_S)
    wav = silence("WAV", "PCM_16", HI_RATE, CHANNELS, 0.25)
    for data in (flac, ogg):
        assert len(data) < 100_000  # small files; the claim is what counts
        info = soundfile.info(io.BytesIO(data))
        assert (info.samplerate, info.channels, info.frames) == (HI_RATE, CHANNELS, HI_RATE * CLAIM_S)
    with unharmed(audio_engine, RSS_BOUND, *chat(MODEL_NAME)):
        for name, data in (("bomb.flac", flac), ("bomb.ogg", ogg)):
            message = _refused(transcribe(url, name, data), "file", "audio_too_long")
            assert f"{MAX_DURATION_S} s" in message
        # a WAV whose data chunk claims 4 GB (1,398 s at this rate) and holds 0.75 MB
        lying = wav_claiming(wav, 0xFFFFFF00)
        assert "truncated" in _refused(transcribe(url, "lying.wav", lying), "file", "invalid_file")
        # past the caps: 16 channels, 384 kHz (tiny files)
        many = silence("WAV", "PCM_16", 16_000, 16, 0.1)
        assert "16 channels" in _refused(transcribe(url, "many.wav", many), "file", "audio_too_many_channels")
        fast = silence("WAV", "PCM_16", 384_000, 1, 0.1)
        assert "384000 Hz" in _refused(transcribe(url, "fast.wav", fast), "file", "audio_sample_rate_too_high")
        # streamed as SSE: the same 400, before the stream starts
        _refused(transcribe(url, "bomb.flac", flac, stream="true"), "file", "audio_too_long")


def test_a_spoken_chat_s_parts_share_one_duration_budget_and_decode_in_bounded_memory(audio_engine: Server) -> None:
    """The first part, 40 s of 192 kHz x 8-channel FLAC (within every limit), is decoded block by block and
    transcribed; the second claims 55 s, more than the 50 s the request has left: a 400 naming it."""
    first = silence("FLAC", "PCM_16", HI_RATE, CHANNELS, 40)
    second = flac_claiming(silence("FLAC", "PCM_16", 16_000, 1, 1), 16_000 * 55)
    parts = [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(d).decode(), "format": "wav"}}
        for d in (first, second)
    ]
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": parts}], "max_tokens": 4}
    with unharmed(audio_engine, RSS_BOUND, *chat(MODEL_NAME)):
        r = httpx.post(audio_engine.url + "/v1/chat/completions", json=body, timeout=120)
    message = _refused(r, "messages[0].content[1].input_audio.data", "audio_too_long")
    assert f"limit of {MAX_DURATION_S} s together (40.0 s before this one)" in message


def test_eight_channels_and_192_khz_transcribe_as_the_mono_16_khz_copy(audio_engine: Server) -> None:
    url = audio_engine.url
    text = "The children played football in the park after school."
    wav = spoken(url, text)
    voice, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    mono16 = soxr.resample(voice, rate, 16_000)
    hi = soxr.resample(voice, rate, HI_RATE)
    copies = {
        "mono-16k.flac": (mono16, 16_000),
        "mono-192k.flac": (hi, HI_RATE),
        "eight-22k.flac": (np.tile(voice[:, None], (1, CHANNELS)), rate),
        "eight-192k.flac": (np.tile(hi[:, None], (1, CHANNELS)), HI_RATE),
    }
    heard = {}
    for name, (samples, sr) in copies.items():
        out = io.BytesIO()
        soundfile.write(out, samples, sr, format="FLAC", subtype="PCM_24")
        r = transcribe(url, name, out.getvalue())
        assert r.status_code == 200, r.text
        heard[name] = words(r.json()["text"])
    assert len(heard["mono-16k.flac"]) >= 6, heard
    assert all(h == heard["mono-16k.flac"] for h in heard.values()), heard
