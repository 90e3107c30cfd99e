"""Whisper through OpenVINO GenAI's WhisperPipeline: an OpenVINO IR folder (encoder, stateful decoder,
tokenizer and detokenizer IRs, generation_config.json, preprocessor_config.json) as
``scripts/whisper_convert.py`` writes it. Audio longer than 30 s is transcribed by the pipeline's own
long-form loop (30 s windows that move on at the last timestamp token, so no word is cut at a seam)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino_genai as ov_genai

from .decode import WHISPER_RATE

WINDOW_S = 30.0


@dataclass
class Segment:
    start: float
    end: float
    text: str


@dataclass
class Transcript:
    text: str
    duration: float
    segments: list[Segment] = field(default_factory=list)
    words: list[Segment] = field(default_factory=list)


@dataclass(frozen=True)
class Ask:
    """What a request asks of the model."""

    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    segments: bool = False
    words: bool = False


class WhisperModel:
    def __init__(self, folder: Path, device: str = "CPU", plugin_config: Mapping[str, Any] | None = None) -> None:
        """``plugin_config``: OpenVINO properties for the device (a graph's ``plugin_config``)."""
        self.folder = folder
        self._device, self._plugin_config = device, dict(plugin_config or {})
        self._pipeline = ov_genai.WhisperPipeline(str(folder), device, **self._plugin_config)
        # Word timestamps need a pipeline whose cross-attention is decomposed so that word times can be
        # read from it, which costs every request a quarter more time: a second pipeline, made at the
        # first request that asks for words (calls come one at a time, from the model's worker).
        self._words_pipeline: Any = None
        self._multilingual = bool(self._pipeline.get_generation_config().is_multilingual)

    def _pipeline_for(self, ask: Ask) -> Any:
        if not ask.words:
            return self._pipeline
        if self._words_pipeline is None:
            properties = {**self._plugin_config, "word_timestamps": True}
            self._words_pipeline = ov_genai.WhisperPipeline(str(self.folder), self._device, **properties)
        return self._words_pipeline

    @property
    def multilingual(self) -> bool:
        return self._multilingual

    def _config(self, pipeline: Any, ask: Ask, duration: float) -> ov_genai.WhisperGenerationConfig:
        config = pipeline.get_generation_config()
        if self._multilingual:  # an English-only model takes neither (the route refuses other languages)
            config.task = "transcribe"
            if ask.language:
                config.language = f"<|{ask.language}|>"
        config.return_timestamps = ask.segments or ask.words or duration > WINDOW_S
        if ask.words:
            config.word_timestamps = True
        if ask.prompt:
            config.initial_prompt = ask.prompt
        if ask.temperature > 0:
            config.do_sample = True
            config.temperature = ask.temperature
        return config

    def transcribe(
        self, audio: np.ndarray, ask: Ask, stop: threading.Event, on_text: Callable[[str], None] | None = None
    ) -> Transcript:
        """``audio``: 16 kHz mono float32. ``on_text`` gets the text as it is decoded (audio up to 30 s
        and no timestamps asked: the pipeline streams only then; otherwise, one call per segment at the
        end). ``stop`` set: decoding stops at the next token."""
        duration = audio.shape[0] / WHISPER_RATE
        pipeline = self._pipeline_for(ask)
        config = self._config(pipeline, ask, duration)
        streams = on_text is not None and not config.return_timestamps

        def streamer(subword: str) -> bool:
            if streams and on_text is not None:
                on_text(subword)
            return stop.is_set()

        result = pipeline.generate(audio, config, streamer)
        segments = [Segment(c.start_ts, c.end_ts, c.text) for c in (result.chunks or [])]
        words = [Segment(w.start_ts, w.end_ts, w.word) for w in (getattr(result, "words", None) or [])]
        text = result.texts[0] if result.texts else ""
        if not segments and text.strip():
            segments = [Segment(0.0, duration, text)]
        if on_text is not None and not streams:
            for s in segments:
                on_text(s.text)
        return Transcript(text.strip(), duration, segments, words)
