"""The audio suite's pure parts: the CTranslate2 reader and its mapping onto the Hugging Face Whisper
checkpoint (scripts/whisper_convert.py, on the real model.bin), the transcription form's parsing and
the subtitle formats (genmesh.protocol.audio), and the engine's decoder on made-up bytes."""

from __future__ import annotations

import asyncio
import io
import threading
import tracemalloc
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import soundfile
import soxr

from genmesh.engine.audio.decode import WHISPER_RATE, AudioLimits, decode
from genmesh.protocol import OpenAIError
from genmesh.protocol.audio import TranscriptionRequest, TranscriptionSegment, srt, timestamp, vtt
from support.audio_bombs import flac_claiming, ogg_claiming, silence
from support.polling import until
from support.servers import ROOT

CT2 = ROOT / "models" / "whisper-tiny.en-ct2" / "model.bin"


def test_ct2_weights_map_one_to_one_onto_the_hf_checkpoint() -> None:
    import whisper_convert as wc

    assert CT2.is_file(), "run 'make model' first (make test does it)"
    ct = wc.read_ct2(CT2)
    hf = wc.to_hf(ct)
    # tiny: 4 + 4 layers of 384; 15 tensors per encoder layer, 24 per decoder layer (cross-attention), 11 others
    assert len(hf) == 4 * 15 + 4 * 24 + 11
    q = hf["model.encoder.layers.0.self_attn.q_proj.weight"]
    k = hf["model.encoder.layers.0.self_attn.k_proj.weight"]
    assert q.shape == k.shape == (384, 384)
    assert "model.encoder.layers.0.self_attn.k_proj.bias" not in hf  # Whisper's k has no bias
    fused = ct["encoder/layer_0/self_attention/linear_0/weight"].astype(np.float32)
    np.testing.assert_array_equal(np.concatenate([q, k, hf["model.encoder.layers.0.self_attn.v_proj.weight"]]), fused)
    cross_v = hf["model.decoder.layers.3.encoder_attn.v_proj.weight"]
    np.testing.assert_array_equal(cross_v, ct["decoder/layer_3/attention/linear_1/weight"][384:].astype(np.float32))
    assert wc.hf_config(ct, {"suppress_ids": [], "suppress_ids_begin": []})["decoder_layers"] == 4


def test_form_fields_become_the_request_and_bad_ones_name_themselves() -> None:
    got = TranscriptionRequest.from_form(
        [("model", "whisper-1"), ("stream", "true"), ("timestamp_granularities[]", "word"), ("temperature", "0.2")]
    )
    assert got.stream is True
    assert got.timestamp_granularities == ["word"]
    assert got.temperature == 0.2
    for fields, param in [
        ([("response_format", "xml")], "response_format"),
        ([("temperature", "3")], "temperature"),
        ([("language", "English!")], "language"),
        ([("nonsense", "1")], "nonsense"),
        ([("model", "a"), ("model", "b")], "model"),
    ]:
        with pytest.raises(OpenAIError) as err:
            TranscriptionRequest.from_form(fields)
        assert err.value.param == param


def test_subtitles() -> None:
    segs = [
        TranscriptionSegment(id=0, start=0.0, end=1.5, text=" Hi."),
        TranscriptionSegment(id=1, start=61.25, end=3723.5, text="Bye."),
    ]
    assert timestamp(3723.5, ",") == "01:02:03,500"
    assert srt(segs) == "1\n00:00:00,000 --> 00:00:01,500\nHi.\n\n2\n00:01:01,250 --> 01:02:03,500\nBye.\n"
    assert vtt(segs).startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHi.\n")


LIMITS = AudioLimits(max_duration_s=60, max_sample_rate=192_000, max_channels=8)


def test_decoder_resamples_to_16k_mono_and_names_file_on_bad_bytes() -> None:
    stereo = np.stack([np.sin(np.arange(44100) / 10), np.zeros(44100)], axis=1).astype(np.float32)
    out = io.BytesIO()
    soundfile.write(out, stereo, 44100, format="FLAC")
    mono = decode(out.getvalue(), LIMITS)
    assert mono.dtype == np.float32
    assert abs(mono.shape[0] - WHISPER_RATE) < 10
    for data in (b"", b"RIFF....WAVEfmt ", b"\x00" * 1000):
        with pytest.raises(OpenAIError) as err:
            decode(data, LIMITS)
        assert err.value.param == "file"
    with pytest.raises(OpenAIError) as err:
        decode(out.getvalue(), replace(LIMITS, max_duration_s=0.5))
    assert err.value.code == "audio_too_long"


def test_decoding_in_blocks_is_the_whole_file_s_downmix_and_resampling() -> None:
    """Eight different channels at 48 kHz, over several blocks: the blocks' output is the one-shot
    downmix and resampling of the whole file (soxr's streaming resampler is the one-shot one, cut)."""
    rate, seconds = 48_000, 4.5
    t = np.arange(int(rate * seconds)) / rate
    channels = np.stack([np.sin(2 * np.pi * (200 + 50 * c) * t) / (c + 1) for c in range(8)], axis=1)
    out = io.BytesIO()
    soundfile.write(out, channels.astype(np.float32), rate, format="WAV", subtype="FLOAT")
    got = decode(out.getvalue(), LIMITS)
    want = soxr.resample(channels.astype(np.float32).mean(axis=1), rate, WHISPER_RATE)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-4


def test_a_bomb_within_the_limits_is_decoded_in_bounded_memory() -> None:
    """10 s at 192 kHz x 8 channels is 61 MB of float32 samples; decoded a block at a time, the peak
    of what numpy holds is the 16 kHz mono output (0.6 MB) and a few 2 MiB blocks."""
    bomb = silence("FLAC", "PCM_16", 192_000, 8, 10)
    tracemalloc.start()
    try:
        mono = decode(bomb, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert mono.shape == (10 * WHISPER_RATE,)
    assert peak < 12 * 2**20, f"{peak / 2**20:.1f} MiB"


def test_what_a_header_claims_is_checked_before_decoding() -> None:
    flac = silence("FLAC", "PCM_16", 192_000, 8, 0.5)
    cases = [
        (flac_claiming(flac, 192_000 * 29 * 60), LIMITS, "audio_too_long"),
        (flac_claiming(flac, 0), LIMITS, "invalid_file"),  # no length: libsndfile cannot read it in blocks
        (ogg_claiming(silence("OGG", "VORBIS", 16_000, 1, 20), 16_000 * 29 * 60), LIMITS, "audio_too_long"),
        (flac, replace(LIMITS, max_sample_rate=96_000), "audio_sample_rate_too_high"),
        (flac, replace(LIMITS, max_channels=2), "audio_too_many_channels"),
        (silence("WAV", "PCM_16", 16_000, 16, 0.1), LIMITS, "audio_too_many_channels"),
    ]
    for data, limits, code in cases:
        with pytest.raises(OpenAIError) as err:
            decode(data, limits)
        assert (err.value.status, err.value.param, err.value.code) == (400, "file", code)


def test_a_set_stop_flag_ends_decoding_between_blocks() -> None:
    from genmesh.engine.audio.worker import Stopped

    bomb = silence("FLAC", "PCM_16", 192_000, 8, 2)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        decode(bomb, LIMITS, stop)


def test_aac_is_adts_aac_lc_that_decodes_to_the_samples_length() -> None:
    import av

    from genmesh.engine.audio.encode import encode

    rate = 22050
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(2 * rate) / rate).astype(np.float32)
    data = encode(tone, rate, "aac")
    assert data[:2] in (b"\xff\xf1", b"\xff\xf9")  # an ADTS frame's sync word
    with av.open(io.BytesIO(data), format="adts") as container:
        stream = container.streams.audio[0]
        assert (stream.codec_context.name, stream.rate, stream.channels) == ("aac", rate, 1)
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    # the encoder's priming and its last, padded 1,024-sample frame: at most 2,048 samples more
    assert 0 <= decoded.size - tone.size <= 2048
    assert 0.3 < float(np.sqrt(np.mean(decoded**2))) < 0.4  # the tone's RMS (0.354), not silence


async def test_worker_bounds_its_queue_and_stops_what_runs_past_its_deadline() -> None:
    import asyncio
    import threading

    from genmesh.engine.audio.worker import AudioWorker

    worker = AudioWorker("test", max_queued=2, timeout_s=0.3)
    release = threading.Event()
    stopped: list[bool] = []

    def slow(stop: threading.Event) -> str:
        while not release.wait(0.01):
            if stop.is_set():
                stopped.append(True)
                return "stopped"
        return "done"

    first = asyncio.ensure_future(worker.run(slow))
    second = asyncio.ensure_future(worker.run(slow))
    await asyncio.sleep(0)
    with pytest.raises(OpenAIError) as full:
        await worker.run(slow)  # a third: the queue holds two
    assert full.value.status == 503
    assert full.value.headers.get("Retry-After") == "1"
    for task in (first, second):
        with pytest.raises(OpenAIError) as late:
            await task
        assert late.value.status == 503
        assert late.value.code == "timeout"
    await until(
        lambda: worker.pending == 0, 5, "the worker's jobs to end"
    )  # the running job saw its stop flag; the queued one never started
    assert stopped == [True]
    release.set()
    assert await worker.run(lambda stop: "again") == "again"
    worker.close()


def test_batches_refuse_audio_lines() -> None:
    """A batch line is a JSON body and a transcription needs a file: audio is no batch endpoint, and an
    audio line in another batch fails validation naming its url."""
    import json

    from genmesh.gateway.storage.batch_validation import LineRules, check
    from genmesh.protocol.batches import BATCH_ENDPOINTS

    assert not [e for e in BATCH_ENDPOINTS if e.startswith("/v1/audio/")]
    line = {"custom_id": "a", "method": "POST", "url": "/v1/audio/speech", "body": {"input": "hi", "voice": "alloy"}}
    rules = LineRules(4 << 20, 64, lambda body: "m")  # every line's model served: only its url is wrong
    checked = check(json.dumps(line).encode() + b"\n", "/v1/chat/completions", 10, rules)
    assert checked.failed_lines == 1
    assert checked.errors[0].param == "url"


def _no_audio_models_request() -> Any:
    """A request to an engine serving no audio model (the spoken turn's checks read only its registry)."""
    from genmesh.engine.openai.audio_models import AudioModels
    from genmesh.engine.settings import EngineSettings

    audio = AudioModels(EngineSettings())
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(registry=SimpleNamespace(audio=audio))))


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
    ],
)
def test_spoken_turn_on_an_engine_without_audio_models_is_a_400(fields: dict[str, Any], param: str) -> None:
    from genmesh.engine.openai.routes.spoken_chat import prepare
    from genmesh.protocol import ChatCompletionRequest

    body = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})
    assert body.spoken()
    with pytest.raises(OpenAIError) as err:
        asyncio.run(prepare(body, _no_audio_models_request()))
    assert err.value.status == 400
    assert err.value.param == param


def test_text_only_chat_is_not_a_spoken_turn() -> None:
    from genmesh.protocol import ChatCompletionRequest

    parts = [{"type": "text", "text": "hi"}]
    assert not ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": parts}]}).spoken()
    assert not ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "modalities": ["text"]}
    ).spoken()
