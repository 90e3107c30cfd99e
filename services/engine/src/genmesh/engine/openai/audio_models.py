"""The audio models one engine serves (``--whisper-model``, ``--speech-voice`` or a config.json's audio
entries: ``models/audio_spec.py``), each loaded on a
worker thread at start-up and run by its own bounded worker (``audio/worker.py``), and the lookup the
audio routes use: an unknown name is a 404, another kind's name a 400 naming ``model``. One that cannot
load (``espeak-ng`` missing, a bad file) is reported and skipped: its endpoint answers 503 naming it and
the reason while everything else serves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from genmesh.protocol import invalid_request, model_not_found
from genmesh.protocol.audio import OPENAI_VOICES

from ..audio.decode import AudioLimits
from ..audio.sent import SentLedger
from ..audio.voice import PiperVoice
from ..audio.whisper import WhisperModel
from ..audio.worker import AudioWorker
from ..models.audio_spec import AudioSpec
from ..settings import EngineSettings
from .model_status import AVAILABLE, LOADING, Kind, ModelStatus, Servable, failed

log = logging.getLogger("genmesh.engine.openai.audio_models")
M = TypeVar("M")
# OpenAI's audio model names: each also names the served model of its kind (clients written for OpenAI).
OPENAI_ALIASES = {
    "transcription": ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"),
    "speech": ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"),
}


@dataclass
class Served(Generic[M]):
    """One audio model: its name, what it is, and (once loaded) the model and its worker."""

    name: str
    kind: str  # "transcription" | "speech"
    path: Path
    loader: Callable[[Path, str, Mapping[str, Any]], M]
    device: str | None = None  # None: --device
    plugin_config: Mapping[str, Any] = field(default_factory=dict)
    model: M | None = None
    error: str | None = None
    worker: AudioWorker | None = None

    def status(self) -> ModelStatus:
        if self.error is not None:
            return failed(self.error)
        return AVAILABLE if self.worker is not None else LOADING

    def ready(self) -> tuple[M, AudioWorker]:
        if self.model is None or self.worker is None:
            raise self.status().unavailable(self.name)
        return self.model, self.worker


class AudioModels:
    def __init__(self, settings: EngineSettings, specs: tuple[AudioSpec, ...] = ()) -> None:
        """``specs``: at most one of each kind (``ovms_config.load`` checks)."""
        self.settings = settings
        self.whisper: Served[WhisperModel] | None = None
        self.voice: Served[PiperVoice] | None = None
        for s in specs:
            if s.kind == "transcription":
                self.whisper = Served(s.name, s.kind, s.path, WhisperModel, s.device, s.plugin_config)
            else:
                self.voice = Served(s.name, s.kind, s.path, PiperVoice, s.device, s.plugin_config)
        self._tasks: list[asyncio.Task[None]] = []
        self.sent = SentLedger()  # what streamed speech replies have sent (the gateway meters it)

    def served(self) -> list[Served[WhisperModel] | Served[PiperVoice]]:
        return [m for m in (self.whisper, self.voice) if m is not None]

    def __contains__(self, name: object) -> bool:
        return any(m.name == name for m in self.served())

    @property
    def limits(self) -> AudioLimits:
        """What an uploaded audio file may claim (``audio/decode.py`` checks it before decoding)."""
        s = self.settings
        return AudioLimits(s.audio_max_duration_s, s.audio_max_sample_rate, s.audio_max_channels)

    def voices(self) -> list[str]:
        """The voice names /v1/audio/speech accepts: the served voice's own, and OpenAI's (each maps to it)."""
        if self.voice is None:
            return []
        return [self.voice.path.stem, *OPENAI_VOICES]

    def servables(self) -> list[Servable]:
        kinds: dict[str, Kind] = {"transcription": "transcription", "speech": "speech"}
        return [Servable(m.name, kinds[m.kind], m.status()) for m in self.served()]

    async def start(self, wait: bool) -> None:
        """Load each model on a thread; ``wait``: return once each has loaded or failed (never raises)."""
        self._tasks = [asyncio.create_task(self._load(m), name=f"load-{m.name}") for m in self.served()]
        if wait:
            await asyncio.gather(*self._tasks)

    async def _load(self, served: Served[WhisperModel] | Served[PiperVoice]) -> None:
        s = self.settings
        try:
            device = served.device or s.device
            served.model = await asyncio.to_thread(served.loader, served.path, device, served.plugin_config)
        except Exception as exc:
            served.error = str(exc) or type(exc).__name__
            log.error("audio model %s failed to load: %s", served.name, served.error)
            return
        served.worker = AudioWorker(served.name, s.audio_max_queued, s.audio_timeout_s)

    def transcriber(self, model: str | None) -> tuple[str, WhisperModel, AudioWorker]:
        served = self._find(self.whisper, model, "a speech model: use /v1/audio/speech")
        return (served.name, *served.ready())

    def speaker(self, model: str | None) -> tuple[str, PiperVoice, AudioWorker]:
        served = self._find(self.voice, model, "a transcription model: use /v1/audio/transcriptions")
        return (served.name, *served.ready())

    def _find(self, served: Served[M] | None, model: str | None, other: str) -> Served[M]:
        if served is not None and (model is None or model == served.name or model in OPENAI_ALIASES[served.kind]):
            return served
        if model is None:
            raise invalid_request("this server serves no model for this endpoint", param="model")
        if model in self:
            raise invalid_request(f"model '{model}' is {other}", param="model", code="model_not_supported")
        raise model_not_found(model)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for m in self.served():
            if m.worker is not None:
                m.worker.close()
