"""``genmesh-bench audio``'s arithmetic and tables, without servers (the measured run is ``make bench-audio``)."""

from __future__ import annotations

import io

import numpy as np
import soundfile

from genmesh.bench import audio


def test_a_second_of_pcm_is_a_second_and_its_wav_holds_the_same_samples() -> None:
    samples = (np.arange(audio.RATE) % 200 - 100).astype("<i2")
    pcm = samples.tobytes()
    assert audio.seconds_of_pcm(pcm) == 1.0
    back, rate = soundfile.read(io.BytesIO(audio.wav_of_pcm(pcm)), dtype="int16")
    assert rate == audio.RATE
    assert np.array_equal(back, samples)


def test_the_ratio_is_the_median_of_the_rounds_ratios() -> None:
    # rounds: 2.0, 1.0, 4.0 -> median 2.0 (the ratio of the medians would be 6/4 = 1.5)
    assert audio.median_ratio([6.0, 3.0, 8.0], [3.0, 3.0, 2.0]) == 2.0
    assert audio.median_ratio([1.0], [0.0]) == 0.0


def test_each_request_carries_its_clip_seconds_or_its_characters() -> None:
    clips = [(b"a", 1.5), (b"b", 2.5)]
    form, seconds = audio._request("transcription", clips, 0, 1)
    assert (form, seconds) == ({"file": b"b", "model": audio.WHISPER}, 2.5)
    body, chars = audio._request("speech", clips, 1, 0)
    assert body["input"] == audio.PARAGRAPHS[3]
    assert chars == len(audio.PARAGRAPHS[3])


def test_the_table_shows_each_kinds_figure_and_the_ratio_to_genmesh() -> None:
    rows = [
        {"target": t, "kind": "transcription", "concurrency": 8, "audio_s_per_s": v, "requests_per_s": 1.0}
        | {"p50_ms": 900.0, "p99_ms": 1500.0, "genmesh_ratio": r, "failed": 0}
        for t, v, r in (("genmesh", 12.0, 1.0), ("peer", 8.0, 1.5))
    ]
    rows.append(rows[0] | {"kind": "speech", "chars_per_s": 300.0})
    lines = audio.table(rows, "transcription").splitlines()
    assert lines[0].startswith("| target | c | audio s / wall s |")
    assert lines[2] == "| genmesh | 8 | 12.0 | 1.00 | 900 | 1500 | 1.00 |"
    assert lines[3] == "| peer | 8 | 8.0 | 1.00 | 900 | 1500 | 1.50 |"
    assert audio.table(rows, "speech").splitlines()[2] == "| genmesh | 8 | 300.0 | 1.00 | 900 | 1500 | 1.00 |"
