"""Speech in and speech out at the engine (issue 43): the round trip of twenty sentences through
/v1/audio/speech and /v1/audio/transcriptions (long-form: the audio is over 30 s), every format of
both through the OpenAI SDK, streaming, and bad input (each a 400 naming its field)."""

from __future__ import annotations

import base64
import io
import json

import httpx
import openai
import pytest
import soundfile

from support.audio import SENTENCES, SPEECH_NAME, WHISPER_NAME, assert_heard_and_spoken, spoken_turn, wer

pytestmark = pytest.mark.timeout(600)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)


def spoken(url: str, text: str, fmt: str = "wav", voice: str = "alloy") -> bytes:
    reply = client(url).audio.speech.create(model=SPEECH_NAME, voice=voice, input=text, response_format=fmt)  # type: ignore[arg-type]
    return reply.content


def test_round_trip_of_twenty_sentences_is_within_ten_percent_wer(audio_engine_url: str) -> None:
    text = " ".join(SENTENCES)
    audio = spoken(audio_engine_url, text)
    info = soundfile.info(io.BytesIO(audio))
    assert info.samplerate == 22050
    assert info.channels == 1
    assert info.duration > 30  # Whisper's long-form path: more than one 30 s window
    got = client(audio_engine_url).audio.transcriptions.create(model=WHISPER_NAME, file=("s.wav", audio, "audio/wav"))
    error = wer(text, got.text)
    print(f"round trip WER over {len(SENTENCES)} sentences: {error:.1%}")
    assert error <= 0.10, got.text


def aac_seconds(data: bytes) -> float:
    """The length of an ADTS AAC stream, decoded by PyAV (libsndfile cannot read AAC)."""
    import av

    with av.open(io.BytesIO(data), format="adts") as container:
        stream = container.streams.audio[0]
        assert (stream.codec_context.name, stream.rate, stream.channels) == ("aac", 22050, 1)
        return sum(frame.samples for frame in container.decode(stream)) / 22050


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus", "aac"])
def test_speech_formats_decode_to_the_spoken_length(audio_engine_url: str, fmt: str) -> None:
    audio = spoken(audio_engine_url, "Good morning. How are you today?", fmt)
    # pcm: 16-bit mono little-endian at the voice's rate, as OpenAI sends it
    if fmt == "pcm":
        seconds = len(audio) / 2 / 22050
    else:
        seconds = aac_seconds(audio) if fmt == "aac" else soundfile.info(io.BytesIO(audio)).duration
    assert 1.0 < seconds < 6.0


def test_transcription_response_formats(audio_engine_url: str) -> None:
    text = "The river flows slowly through the green valley. We watched the sun go down over the sea."
    audio = spoken(audio_engine_url, text, "mp3", voice="en_US-joe-medium")
    c = client(audio_engine_url)
    file = ("s.mp3", audio, "audio/mpeg")
    plain = c.audio.transcriptions.create(model="whisper-1", file=file, response_format="json")
    assert wer(text, plain.text) <= 0.2, plain.text
    assert c.audio.transcriptions.create(model="whisper-1", file=file, response_format="text").strip() == plain.text
    srt = c.audio.transcriptions.create(model="whisper-1", file=file, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0")
    assert "valley" in srt.lower()
    vtt = c.audio.transcriptions.create(model="whisper-1", file=file, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")
    assert "valley" in vtt.lower()
    verbose = c.audio.transcriptions.create(model="whisper-1", file=file, response_format="verbose_json")
    assert verbose.segments
    assert verbose.duration > 3
    ends = [s.end for s in verbose.segments]
    assert ends == sorted(ends)
    assert ends[-1] <= verbose.duration + 0.5
    timed = c.audio.transcriptions.create(
        model="whisper-1", file=file, response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert timed.words
    assert len(timed.words) >= 10
    starts = [w.start for w in timed.words]
    assert starts == sorted(starts)


def test_transcription_stream_deltas_add_up_to_the_done_text(audio_engine_url: str) -> None:
    audio = spoken(audio_engine_url, "The cat is sleeping on the warm blanket.")
    c = client(audio_engine_url)
    events = list(c.audio.transcriptions.create(model=WHISPER_NAME, file=("s.wav", audio, "audio/wav"), stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(deltas) >= 3
    assert len(done) == 1
    assert events[-1].type == "transcript.text.done"
    assert "".join(deltas).strip() == done[0].text
    # greedy decoding of the same audio: the streamed text is the unary reply's, word for word
    assert done[0].text == c.audio.transcriptions.create(model=WHISPER_NAME, file=("s.wav", audio, "audio/wav")).text


def test_speech_streams_as_it_is_synthesised(audio_engine_url: str) -> None:
    text = "The first sentence is short. The second one follows it. And a third ends the stream."
    with client(audio_engine_url).audio.speech.with_streaming_response.create(
        model=SPEECH_NAME, voice="echo", input=text, response_format="pcm"
    ) as reply:
        chunks = list(reply.iter_bytes())
    assert sum(len(c) for c in chunks) / 2 / 22050 > 3.0


def _error(r: httpx.Response, status: int, param: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    error: dict[str, object] = r.json()["error"]
    assert error["param"] == param, error
    return error


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty.wav", b""),
        ("notes.wav", b"these are not the bytes of any audio format" * 10),
        ("cut.wav", b"RIFF"),
    ],
)
def test_bad_audio_is_a_400_naming_file(audio_engine_url: str, name: str, data: bytes) -> None:
    r = httpx.post(
        audio_engine_url + "/v1/audio/transcriptions",
        files={"file": (name, data)},
        data={"model": WHISPER_NAME},
        timeout=60,
    )
    _error(r, 400, "file")


def test_truncated_wav_is_a_400_naming_file(audio_engine_url: str) -> None:
    whole = spoken(audio_engine_url, "Please close the window before you leave the room.", "flac")
    samples, rate = soundfile.read(io.BytesIO(whole))
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="WAV")
    cut = out.getvalue()[: len(out.getvalue()) // 2]
    r = httpx.post(audio_engine_url + "/v1/audio/transcriptions", files={"file": ("c.wav", cut)}, timeout=60)
    assert "truncated" in str(_error(r, 400, "file")["message"])


def test_bad_speech_requests_are_400s_naming_the_field(audio_engine_url: str) -> None:
    url = audio_engine_url + "/v1/audio/speech"
    base = {"model": SPEECH_NAME, "input": "Hello.", "voice": "alloy"}
    _error(httpx.post(url, json={**base, "voice": "nobody"}, timeout=30), 400, "voice")
    _error(httpx.post(url, json={**base, "response_format": "ogg"}, timeout=30), 400, "response_format")
    _error(httpx.post(url, json={**base, "input": "a" * 4097}, timeout=30), 400, "input")
    _error(httpx.post(url, json={**base, "speed": 9}, timeout=30), 400, "speed")
    _error(httpx.post(url, json={**base, "model": WHISPER_NAME}, timeout=30), 400, "model")
    assert httpx.post(url, json={**base, "model": "nope"}, timeout=30).status_code == 404


def test_spoken_chat_turn_answers_in_audio_with_its_transcript(audio_engine_url: str) -> None:
    c = client(audio_engine_url)
    reply, seconds = spoken_turn(c, "alloy")
    message = reply.choices[0].message
    assert message.audio is not None
    assert message.content is None  # as OpenAI's: the text is the audio's transcript
    assert message.audio.id
    assert message.audio.expires_at > 0
    assert_heard_and_spoken(c, message.audio.transcript, base64.b64decode(message.audio.data))
    usage = reply.usage.model_dump() if reply.usage else {}
    assert abs(usage["audio_seconds"] - seconds) < 0.05  # the question was transcribed, all of it
    assert usage["speech_characters"] == len(message.audio.transcript)


def test_models_lists_the_audio_models_with_kind_and_voices(audio_engine_url: str) -> None:
    cards = {m["id"]: m for m in json.loads(httpx.get(audio_engine_url + "/v1/models", timeout=10).text)["data"]}
    assert cards[WHISPER_NAME]["kind"] == "transcription"
    assert cards[SPEECH_NAME]["kind"] == "speech"
    assert "alloy" in cards[SPEECH_NAME]["voices"]
