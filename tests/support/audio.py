"""The audio suite's shared parts: the real engine serving Whisper tiny.en and the Piper voice beside
the chat model (session-wide), the sentences the round trip speaks, and word error rate."""

from __future__ import annotations

import base64
import io
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import soundfile
import yaml

from eval_whisper_fidelity import errors, words
from genmesh.bench.servers import free_port
from support.embeddings_mesh import Mesh
from support.gateway_helpers import launch_gateway, model_config, private_redis
from support.hostile import start_microservice
from support.servers import DEFAULT_MODEL, MODEL_NAME, ROOT, Server, start_server

WHISPER_MODEL = ROOT / "models" / "whisper-tiny.en"
VOICE = ROOT / "models" / "piper-joe" / "en_US-joe-medium.onnx"
WHISPER_NAME = "whisper-tiny.en"
SPEECH_NAME = "piper-joe"

# Twenty sentences, plain words (no digits or names Whisper could spell two ways), written for this test.
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "She sells fresh bread at the market every morning.",
    "Please close the window before you leave the room.",
    "The train was late because of the heavy snow.",
    "We planted tomatoes and beans in the garden.",
    "My brother reads a book before he goes to sleep.",
    "The children played football in the park after school.",
    "Turn left at the next corner and walk straight ahead.",
    "The coffee was too hot to drink right away.",
    "A small bird sang outside my window this morning.",
    "The meeting has been moved to the afternoon.",
    "He forgot his umbrella and got wet in the rain.",
    "The library is quiet and full of old books.",
    "Our teacher asked us to write a short story.",
    "The river flows slowly through the green valley.",
    "I would like a cup of tea with milk.",
    "The doctor told him to rest for a few days.",
    "They built a wooden house near the lake.",
    "The cat is sleeping on the warm blanket.",
    "We watched the sun go down over the sea.",
)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: the word-level edit distance (``eval_whisper_fidelity.errors``: case and
    punctuation normalised) over the reference's length."""
    return errors(reference, hypothesis) / max(1, len(words(reference)))


# A spoken chat turn (issue 43 item 4): a question the mesh's own voice speaks, sent as input_audio.
QUESTION = "What is the capital of France?"
# The answer is held to English sentences (guided_choice): the 135M's own greedy answer depends on the CPU's
# arithmetic (bf16 on Zen 4 answered "L'Étoile, la Marseur, la France"), and English Whisper must hear it back.
ANSWERS = ["The capital of France is Paris.", "Paris is the capital of France.", "I do not know the capital of France."]
SPOKEN = {"modalities": ["text", "audio"], "temperature": 0, "max_tokens": 24, "extra_body": {"guided_choice": ANSWERS}}


def spoken_turn(client: openai.OpenAI, voice: str) -> tuple[Any, float]:
    """A question spoken by the mesh's own voice, asked with modalities text+audio (wav back):
    (the chat completion, the question's seconds)."""
    part, seconds = input_audio(client)
    reply = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": [part]}],  # type: ignore[list-item]
        audio={"voice": voice, "format": "wav"},
        **SPOKEN,  # type: ignore[arg-type]
    )
    return reply, seconds


def input_audio(client: openai.OpenAI, text: str = QUESTION) -> tuple[dict[str, Any], float]:
    """``text`` spoken by the mesh's /v1/audio/speech as an ``input_audio`` part, and its length in seconds."""
    wav = client.audio.speech.create(model=SPEECH_NAME, voice="alloy", input=text, response_format="wav").content
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}
    return part, soundfile.info(io.BytesIO(wav)).duration


def assert_heard_and_spoken(client: openai.OpenAI, transcript: str, wav: bytes) -> None:
    """The spoken answer: a transcript, audio of some length, and that audio transcribed back close to it
    (a WER bound: the voice samples noise, and the answer's text is the model's, not this test's)."""
    assert transcript.strip()
    assert soundfile.info(io.BytesIO(wav)).duration > 0.3
    back = client.audio.transcriptions.create(model=WHISPER_NAME, file=("a.wav", wav, "audio/wav")).text
    assert wer(transcript, back) <= 0.5, (transcript, back)


def pcm16_wav(pcm: bytes, rate: int = 22050) -> bytes:
    """Raw 16-bit mono PCM (a streamed ``pcm16`` answer) as a WAV file."""
    out = io.BytesIO()
    soundfile.write(
        out,
        soundfile.read(io.BytesIO(pcm), samplerate=rate, channels=1, format="RAW", subtype="PCM_16")[0],
        rate,
        format="WAV",
    )
    return out.getvalue()


# The bounded form of the engine's 1,800 s default (issue 54's bombs): a file claiming more is refused at its
# header, and one within it is decoded in a few seconds. The longest audio the suite sends is the 49 s round trip.
MAX_DURATION_S = 90


@pytest.fixture(scope="session")
def audio_engine_url(audio_engine: Server) -> str:
    return audio_engine.url


@pytest.fixture(scope="session")
def audio_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real engine serving the chat model, Whisper tiny.en and the Piper voice, started once."""
    assert (WHISPER_MODEL / "openvino_decoder_model.xml").is_file(), "run 'make model' first (make test does it)"
    assert VOICE.is_file(), "run 'make model' first (make test does it)"
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--model", str(DEFAULT_MODEL), "--port", str(port)]
    argv += ["--cache-size", "1", "--stats-log-interval-s", "0"]
    argv += ["--whisper-model", str(WHISPER_MODEL), "--speech-voice", str(VOICE)]
    argv += ["--audio-max-duration-s", str(MAX_DURATION_S)]
    # three models load (the chat model, Whisper with its word-timestamp decoder, the voice): on a busy
    # machine that takes minutes
    server = start_server("engine", argv, port, tmp_path_factory.mktemp("audio-engine-logs"), timeout_s=600)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def audio_mesh(audio_engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Gateway (auth on) -> microservice -> the audio engine; the chat, transcription and speech
    models each on gateway slots of their own, on a Redis of its own."""
    redis_gen = private_redis(tmp_path_factory)
    redis_server = next(redis_gen)
    logs = tmp_path_factory.mktemp("audio-mesh")
    ms = start_microservice(logs, audio_engine_url)
    upstreams = [{"url": ms.url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    models = {
        MODEL_NAME: model_config(ms.url, upstreams=upstreams),
        WHISPER_NAME: model_config(ms.url, upstreams=upstreams, kind="transcription"),
        SPEECH_NAME: model_config(ms.url, upstreams=upstreams, kind="speech"),
    }
    config = logs / "gateway.yaml"
    config.write_text(yaml.safe_dump({"models": models}))
    gw = launch_gateway(logs, config, redis_server.url, "--auth", "on", "--audio-max-bytes", "2000000")
    yield Mesh(gw, ms, redis_server)
    gw.stop()
    ms.stop()
    next(redis_gen, None)
