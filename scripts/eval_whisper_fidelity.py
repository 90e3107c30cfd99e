#!/usr/bin/env python3
"""Is the engine's transcription the model's? (issue 43, "Transcription is the model's"; ``make eval-audio``)

Ten clips, synthesised on the fly by the Piper voice the engine serves (``audio/voice.py``) from ten
sentences written for this check, go through two paths:

- the engine's: the clip as a WAV through ``audio/decode.py`` (16 kHz mono float32, as an upload is
  decoded) into ``audio/whisper.py``'s ``WhisperModel`` (OpenVINO GenAI's WhisperPipeline on
  ``models/whisper-tiny.en``, greedy, as a request with no options runs it);
- the reference: Hugging Face transformers' ``WhisperForConditionalGeneration`` in fp32 on the checkpoint
  the IR was exported from (``models/whisper-tiny.en-hf``), its own feature extractor and ``generate``
  (greedy, the checkpoint's generation config), in ``.venv-whisper`` (torch lives there, never in .venv).

It reports, per clip and in all: whether the two texts are equal, each one's word error rate against the
sentence, and the difference. Target: equal on at least 9 of 10, WER within 1 point. Run in ``.venv``
(the engine half); it runs the reference half as ``--reference`` in ``.venv-whisper``.
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


def engine_half(whisper_ir: Path, voice_onnx: Path, clips: Path) -> list[str]:
    """Synthesise the clips (saved as 16 kHz float32 .npy in ``clips``) and transcribe them as the engine does."""
    import soundfile

    from genmesh.engine.audio.decode import decode
    from genmesh.engine.audio.voice import PiperVoice
    from genmesh.engine.audio.whisper import Ask, WhisperModel

    voice = PiperVoice(voice_onnx)
    model = WhisperModel(whisper_ir)
    texts = []
    for i, sentence in enumerate(SENTENCES):
        wav = io.BytesIO()
        soundfile.write(wav, voice.synthesise(sentence, 1.0), voice.rate, format="WAV", subtype="PCM_16")
        audio = decode(wav.getvalue(), max_duration_s=60.0)
        np.save(clips / f"{i:02d}.npy", audio)
        texts.append(model.transcribe(audio, Ask(), threading.Event()).text)
    return texts


def reference_half(hf_dir: Path, clips: Path) -> list[str]:
    """transformers fp32 on the clips (run in .venv-whisper)."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    processor = WhisperProcessor.from_pretrained(str(hf_dir))
    model = WhisperForConditionalGeneration.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    texts = []
    for path in sorted(clips.glob("*.npy")):
        features = processor(np.load(path), sampling_rate=16_000, return_tensors="pt").input_features
        with torch.inference_mode():
            ids = model.generate(features.to(torch.float32))
        texts.append(processor.batch_decode(ids, skip_special_tokens=True)[0].strip())
    return texts


def report(engine: list[str], reference: list[str]) -> dict[str, Any]:
    ours_errors = [errors(s, t) for s, t in zip(SENTENCES, engine, strict=True)]
    theirs_errors = [errors(s, t) for s, t in zip(SENTENCES, reference, strict=True)]
    rows = [
        {"sentence": s, "engine": e, "transformers": r, "equal": e == r, "engine_errors": ne, "transformers_errors": nr}
        for s, e, r, ne, nr in zip(SENTENCES, engine, reference, ours_errors, theirs_errors, strict=True)
    ]
    total = sum(len(words(s)) for s in SENTENCES)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whisper-ir", type=Path, default=ROOT / "models" / "whisper-tiny.en")
    parser.add_argument("--hf-dir", type=Path, default=ROOT / "models" / "whisper-tiny.en-hf")
    parser.add_argument("--voice", type=Path, default=ROOT / "models" / "piper-joe" / "en_US-joe-medium.onnx")
    parser.add_argument("--reference-python", type=Path, default=ROOT / ".venv-whisper" / "bin" / "python")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--reference", type=Path, metavar="CLIPS", help=argparse.SUPPRESS)  # the .venv-whisper half
    args = parser.parse_args()
    if args.reference is not None:
        print(json.dumps(reference_half(args.hf_dir, args.reference)))
        return 0
    with tempfile.TemporaryDirectory(prefix="whisper-fidelity-") as tmp:
        clips = Path(tmp)
        engine = engine_half(args.whisper_ir, args.voice, clips)
        cmd = [str(args.reference_python), __file__, "--hf-dir", str(args.hf_dir), "--reference", str(clips)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        reference = json.loads(done.stdout.strip().splitlines()[-1])
    result = report(engine, reference)
    for i, r in enumerate(result["rows"]):
        mark = "=" if r["equal"] else "≠"
        print(f"{i:2d} {mark} engine:       {r['engine']}  ({r['engine_errors']} errors)")
        if not r["equal"]:
            print(f"     transformers: {r['transformers']}  ({r['transformers_errors']} errors)")
    print(
        f"equal text: {result['equal']}/{result['clips']}; WER over {result['words']} words: engine "
        f"{result['engine_wer_pct']:.2f} %, transformers fp32 {result['transformers_wer_pct']:.2f} %, "
        f"difference {result['wer_difference_points']:+.2f} points"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    ok = result["equal"] >= 9 and abs(result["wer_difference_points"]) <= 1.0
    print("target (equal on >= 9/10, WER within 1 point):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
