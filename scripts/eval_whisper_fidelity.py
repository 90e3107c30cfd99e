#!/usr/bin/env python3
"""Is the engine's transcription the model's? (issue 43, "Transcription is the model's"; ``make eval-audio``)

Two groups of clips:

- **synthesised**: ten clips made on the fly by the Piper voice the engine serves (``audio/voice.py``)
  from ten sentences written for this check;
- **recorded**: eight clips of a recorded human voice (Debian's ``alsa-utils`` speaker-test sounds,
  "Front Center", "Rear Left", ...: 16-bit mono 48 kHz WAV, fetched into ``models/recorded-speech/`` by
  ``scripts/fetch_recorded_speech.py``); the file name says what is spoken.

Each clip goes through two paths:

- the engine's: the clip as a WAV through ``audio/decode.py`` (16 kHz mono float32, as an upload is
  decoded: the recorded clips' 48 kHz is resampled there, by soxr) into ``audio/whisper.py``'s
  ``WhisperModel`` (OpenVINO GenAI's WhisperPipeline on ``models/whisper-tiny.en``, greedy, as a request
  with no options runs it);
- the reference: Hugging Face transformers' ``WhisperForConditionalGeneration`` in fp32 on the checkpoint
  the IR was exported from (``models/whisper-tiny.en-hf``), its own feature extractor and ``generate``
  (greedy, the checkpoint's generation config), in ``.venv-whisper`` (torch lives there, never in .venv).

Both paths hear the same decoded samples. It reports, per clip, per group and in all: whether the two
texts are equal, each one's word error rate against the known words, and the difference. Target, on the
whole set: equal on at least 90 % of the clips (9 of 10), WER within 1 point. Run in ``.venv`` (the
engine half); it runs the reference half as ``--reference`` in ``.venv-whisper``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Ten sentences written for this check: plain words, some long, some with a comma or a question.
SENTENCES = (
    "The old lighthouse stood alone on the rocky shore.",
    "Could you bring me a glass of cold water, please?",
    "Every winter the birds fly south to find warmer weather.",
    "The baker wakes up early to make bread for the whole village.",
    "She painted the fence white while her father cut the grass.",
    "We missed the last bus and had to walk home in the dark.",
    "The students listened carefully as the teacher explained the lesson.",
    "Fresh vegetables from the farm taste better than those from the shop.",
    "After dinner, the family sat by the fire and told stories.",
    "The mountain road was narrow, steep, and covered with loose stones.",
)


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]+", " ", text.lower().replace("-", " ")).split()


def errors(reference: str, hypothesis: str) -> int:
    """Word-level edit distance (case and punctuation normalised)."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)]


def recorded_clips(folder: Path) -> list[tuple[str, Path]]:
    """(the words spoken, the file) for each recorded clip: ``Front_Center.wav`` says "Front Center"."""
    return [(path.stem.replace("_", " "), path) for path in sorted(folder.glob("*.wav"))]


def engine_half(whisper_ir: Path, voice_onnx: Path, recorded: list[Path], clips: Path) -> dict[str, list[str]]:
    """Decode each group's clips as an upload is (saved as 16 kHz float32 .npy under ``clips/<group>``) and
    transcribe them as the engine does: the synthesised ones made by the voice, the recorded ones read."""
    import soundfile

    from genmesh.engine.audio.decode import AudioLimits, decode
    from genmesh.engine.audio.voice import PiperVoice
    from genmesh.engine.audio.whisper import Ask, WhisperModel

    voice = PiperVoice(voice_onnx)
    model = WhisperModel(whisper_ir)
    wavs: dict[str, list[bytes]] = {"synthesised": [], "recorded": [path.read_bytes() for path in recorded]}
    for sentence in SENTENCES:
        wav = io.BytesIO()
        soundfile.write(wav, voice.synthesise(sentence, 1.0), voice.rate, format="WAV", subtype="PCM_16")
        wavs["synthesised"].append(wav.getvalue())
    texts: dict[str, list[str]] = {}
    for group, files in wavs.items():
        (clips / group).mkdir()
        texts[group] = []
        for i, data in enumerate(files):
            audio = decode(data, AudioLimits(max_duration_s=60.0, max_sample_rate=192_000, max_channels=8))
            np.save(clips / group / f"{i:02d}.npy", audio)
            texts[group].append(model.transcribe(audio, Ask(), threading.Event()).text)
    return texts


def reference_half(hf_dir: Path, clips: Path) -> dict[str, list[str]]:
    """transformers fp32 on each group's clips (run in .venv-whisper)."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    processor = WhisperProcessor.from_pretrained(str(hf_dir))
    model = WhisperForConditionalGeneration.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    texts: dict[str, list[str]] = {}
    for group in sorted(p for p in clips.iterdir() if p.is_dir()):
        texts[group.name] = []
        for path in sorted(group.glob("*.npy")):
            features = processor(np.load(path), sampling_rate=16_000, return_tensors="pt").input_features
            with torch.inference_mode():
                ids = model.generate(features.to(torch.float32))
            texts[group.name].append(processor.batch_decode(ids, skip_special_tokens=True)[0].strip())
    return texts


def report(truths: list[str], engine: list[str], reference: list[str]) -> dict[str, Any]:
    """Equal texts and WER (each path's against ``truths``, the words spoken) over one set of clips."""
    ours_errors = [errors(s, t) for s, t in zip(truths, engine, strict=True)]
    theirs_errors = [errors(s, t) for s, t in zip(truths, reference, strict=True)]
    rows = [
        {"sentence": s, "engine": e, "transformers": r, "equal": e == r, "engine_errors": ne, "transformers_errors": nr}
        for s, e, r, ne, nr in zip(truths, engine, reference, ours_errors, theirs_errors, strict=True)
    ]
    total = sum(len(words(s)) for s in truths)
    engine_wer = 100.0 * sum(ours_errors) / total
    reference_wer = 100.0 * sum(theirs_errors) / total
    return {
        "clips": len(rows),
        "equal": sum(e == r for e, r in zip(engine, reference, strict=True)),
        "words": total,
        "engine_wer_pct": round(engine_wer, 2),
        "transformers_wer_pct": round(reference_wer, 2),
        "wer_difference_points": round(engine_wer - reference_wer, 2),
        "rows": rows,
    }


def summary(name: str, result: dict[str, Any]) -> str:
    return (
        f"{name}: equal text {result['equal']}/{result['clips']}; WER over {result['words']} words: engine "
        f"{result['engine_wer_pct']:.2f} %, transformers fp32 {result['transformers_wer_pct']:.2f} %, "
        f"difference {result['wer_difference_points']:+.2f} points"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whisper-ir", type=Path, default=ROOT / "models" / "whisper-tiny.en")
    parser.add_argument("--hf-dir", type=Path, default=ROOT / "models" / "whisper-tiny.en-hf")
    parser.add_argument("--voice", type=Path, default=ROOT / "models" / "piper-joe" / "en_US-joe-medium.onnx")
    parser.add_argument(
        "--recorded",
        type=Path,
        default=ROOT / "models" / "recorded-speech",
        help="the recorded clips (scripts/fetch_recorded_speech.py)",
    )
    parser.add_argument("--reference-python", type=Path, default=ROOT / ".venv-whisper" / "bin" / "python")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--reference", type=Path, metavar="CLIPS", help=argparse.SUPPRESS)  # the .venv-whisper half
    args = parser.parse_args()
    if args.reference is not None:
        print(json.dumps(reference_half(args.hf_dir, args.reference)))
        return 0
    recorded = recorded_clips(args.recorded)
    if not recorded:
        print(f"no recorded clips in {args.recorded}: run scripts/fetch_recorded_speech.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="whisper-fidelity-") as tmp:
        clips = Path(tmp)
        engine = engine_half(args.whisper_ir, args.voice, [path for _, path in recorded], clips)
        cmd = [str(args.reference_python), __file__, "--hf-dir", str(args.hf_dir), "--reference", str(clips)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        reference = json.loads(done.stdout.strip().splitlines()[-1])
    truths = {"synthesised": list(SENTENCES), "recorded": [spoken for spoken, _ in recorded]}
    groups = {group: report(truths[group], engine[group], reference[group]) for group in truths}

    def joined(texts: dict[str, list[str]]) -> list[str]:
        return [text for group in truths for text in texts[group]]

    whole = report(joined(truths), joined(engine), joined(reference))
    for group, result in groups.items():
        print(f"-- {group}")
        for i, r in enumerate(result["rows"]):
            mark = "=" if r["equal"] else "≠"
            print(f"{i:2d} {mark} engine:       {r['engine']}  ({r['engine_errors']} errors; said: {r['sentence']})")
            if not r["equal"]:
                print(f"     transformers: {r['transformers']}  ({r['transformers_errors']} errors)")
    for group, result in groups.items():
        print(summary(group, result))
    print(summary("all", whole))
    if args.json is not None:
        args.json.write_text(json.dumps({**groups, "all": {k: v for k, v in whole.items() if k != "rows"}}, indent=1))
    ok = whole["equal"] >= 0.9 * whole["clips"] and abs(whole["wer_difference_points"]) <= 1.0
    print("target (all clips: equal on >= 90 %, WER within 1 point):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
