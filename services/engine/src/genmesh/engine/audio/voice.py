"""A Piper voice (VITS, exported to ONNX) on the OpenVINO runtime. Text becomes IPA phonemes through
Debian's ``espeak-ng`` (the voice's ``espeak.voice``), phonemes become ids through the voice's
``phoneme_id_map`` as Piper writes them (``^``, each phoneme followed by the pad ``_``, ``$``), and one
inference per sentence makes float32 samples at the voice's rate."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

BOS, EOS, PAD = "^", "$", "_"
# A sentence ends at . ! ? (or ; :) followed by space: each is synthesised on its own (streamed one by one).
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+")
ESPEAK_TIMEOUT_S = 30.0
# VITS samples each phoneme's duration (noise_w); now and then OpenVINO's CPU plugin then fails the graph's
# Range node ("overflow while converting elements to byte size": measured once in six syntheses of a
# 20-word sentence on Zen 4, none after). The sentence is synthesised again, a fresh sample, at most this often.
SYNTH_TRIES = 5


@dataclass(frozen=True)
class VoiceConfig:
    rate: int
    espeak_voice: str
    phoneme_ids: dict[str, list[int]]
    noise_scale: float
    length_scale: float
    noise_w: float

    @classmethod
    def read(cls, path: Path) -> VoiceConfig:
        cfg = json.loads(path.read_text())
        inference = cfg.get("inference", {})
        return cls(
            rate=int(cfg["audio"]["sample_rate"]),
            espeak_voice=cfg.get("espeak", {}).get("voice", "en-us"),
            phoneme_ids={k: list(v) for k, v in cfg["phoneme_id_map"].items()},
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
        )


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


class PiperVoice:
    def __init__(self, onnx: Path, device: str = "CPU", plugin_config: Mapping[str, Any] | None = None) -> None:
        """``plugin_config``: OpenVINO properties for the device (a graph's ``plugin_config``)."""
        self.config = VoiceConfig.read(onnx.with_name(onnx.name + ".json"))
        self.espeak = shutil.which("espeak-ng")
        if self.espeak is None:
            raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
        self._compiled = ov.Core().compile_model(str(onnx), device, dict(plugin_config or {}))

    @property
    def rate(self) -> int:
        return self.config.rate

    def phonemes(self, sentence: str) -> str:
        """IPA phonemes of one sentence: espeak-ng's clauses, joined; the sentence's end mark kept."""
        assert self.espeak is not None
        done = subprocess.run(
            [self.espeak, "-q", "--ipa", "-v", self.config.espeak_voice, "--stdin"],
            input=sentence.replace("\n", " "),
            capture_output=True,
            text=True,
            timeout=ESPEAK_TIMEOUT_S,
            check=True,
        )
        clauses = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        end = sentence.rstrip()[-1:] if sentence.rstrip()[-1:] in ".!?" else "."
        return ", ".join(clauses) + end

    def ids(self, phonemes: str) -> list[int]:
        table = self.config.phoneme_ids
        ids = list(table[BOS]) + list(table[PAD])
        for ch in phonemes:
            if ch in table:
                ids += table[ch] + table[PAD]
        return ids + list(table[EOS])

    def synthesise(self, sentence: str, speed: float) -> np.ndarray:
        """One sentence as float32 samples at ``rate`` (``speed`` > 1 is faster: a shorter length scale)."""
        ids = self.ids(self.phonemes(sentence))
        c = self.config
        scales = np.array([c.noise_scale, c.length_scale / speed, c.noise_w], dtype=np.float32)
        inputs = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": scales,
        }
        for attempt in range(SYNTH_TRIES):
            try:
                out = self._compiled(inputs)
                break
            except RuntimeError as exc:
                if "Range" not in str(exc) or attempt == SYNTH_TRIES - 1:
                    raise
        audio = np.asarray(out[0], dtype=np.float32).reshape(-1)
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        return audio / peak * 0.95 if peak > 1.0 else audio
