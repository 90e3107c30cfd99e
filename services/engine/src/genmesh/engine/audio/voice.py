"""A Piper voice (VITS, exported to ONNX) on the OpenVINO runtime. Text becomes IPA phonemes through
Debian's ``espeak-ng`` (``phonemes.py``: the voice's ``espeak.voice``, one process per request), the
phonemes are cut into bounded chunks (``chunks``), and each chunk is one inference: its phonemes become
ids through the voice's ``phoneme_id_map`` as Piper writes them (``^``, each phoneme followed by the pad
``_``, ``$``), and the inference makes float32 samples at the voice's rate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ..settings import CHUNK_PHONEMES, MIN_CHUNK_PHONEMES
from .chunking import pieces
from .phonemes import Phonemizer

BOS, EOS, PAD = "^", "$", "_"
# In float32 unless a graph's plugin_config says otherwise: on a CPU with BF16 (Zen 4, Sapphire Rapids)
# OpenVINO's default is bfloat16, in which the VITS duration predictor sometimes overflows (the graph's
# Range node fails: "overflow while converting elements to byte size"; measured on Zen 4: 4 of 12
# chunks at speed 4 failed in bfloat16, none in float32, at about twice the time).
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
# Should the Range node fail all the same (a graph's plugin_config may ask for bf16), the chunk is synthesised
# again, a fresh sample of its durations, at most this often.
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


def chunk_limit(chunk_phonemes: int, speed: float) -> int:
    """The phonemes one inference takes: ``chunk_phonemes`` at speed 1 or faster, fewer when slower (the
    audio an inference makes, so its time, grows as 1 / speed), and never under ``MIN_CHUNK_PHONEMES``."""
    return max(MIN_CHUNK_PHONEMES, int(chunk_phonemes * min(1.0, speed)))


class PiperVoice:
    def __init__(self, onnx: Path, device: str = "CPU", plugin_config: Mapping[str, Any] | None = None) -> None:
        """``plugin_config``: OpenVINO properties for the device (a graph's ``plugin_config``)."""
        self.config = VoiceConfig.read(onnx.with_name(onnx.name + ".json"))
        self.phonemizer = Phonemizer(self.config.espeak_voice)
        properties = {**F32, **(plugin_config or {})}
        self._compiled = ov.Core().compile_model(str(onnx), device, properties)

    @property
    def rate(self) -> int:
        return self.config.rate

    async def chunks(self, text: str, speed: float, chunk_phonemes: int) -> list[str]:
        """``text`` as the phonemes of its inferences: its sentences' phonemes (one espeak-ng run), packed
        into chunks of at most ``chunk_limit`` characters, cut at a sentence's end when one is in reach,
        else between words, else anywhere."""
        said = await self.phonemizer.phonemes(text)
        return pieces(" ".join(said), chunk_limit(chunk_phonemes, speed))

    def ids(self, phonemes: str) -> list[int]:
        table = self.config.phoneme_ids
        ids = list(table[BOS]) + list(table[PAD])
        for ch in phonemes:
            if ch in table:
                ids += table[ch] + table[PAD]
        return ids + list(table[EOS])

    def speak(self, phonemes: str, speed: float) -> np.ndarray:
        """One chunk's phonemes as float32 samples at ``rate`` (``speed`` > 1 is faster: a shorter length
        scale). One inference: it runs to its end once begun."""
        ids = self.ids(phonemes)
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

    def synthesise(self, text: str, speed: float, chunk_phonemes: int = CHUNK_PHONEMES) -> np.ndarray:
        """``text`` whole, for scripts (not in a running event loop): every chunk, one after another."""
        chunks = asyncio.run(self.chunks(text, speed, chunk_phonemes))
        return np.concatenate([self.speak(c, speed) for c in chunks] or [np.zeros(0, dtype=np.float32)])
