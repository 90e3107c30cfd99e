"""The audio models one engine serves (``audio/``): a Whisper model at ``/v1/audio/transcriptions`` and a
Piper voice at ``/v1/audio/speech``, at most one of each. They are named by the flags
(``--whisper-model``, ``--speech-voice``) or by entries of an OVMS ``config.json``: a folder whose
``graph.pbtxt`` has an ``S2tCalculator`` or ``T2sCalculator`` node (``ovms_audio_graph``), or a folder
that is itself a Whisper IR or holds one Piper voice. A config entry's files are checked before the
server starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings import EngineSettings
from .ovms_audio_graph import AudioKind
from .ovms_graph import ServableNodeOptions

# What scripts/whisper_convert.py (optimum-cli's automatic-speech-recognition-with-past) writes.
WHISPER_FILES = (
    "openvino_encoder_model.xml",
    "openvino_decoder_model.xml",
    "openvino_tokenizer.xml",
    "openvino_detokenizer.xml",
    "generation_config.json",
    "preprocessor_config.json",
)


@dataclass(frozen=True)
class AudioSpec:
    name: str
    kind: AudioKind
    path: Path  # transcription: the Whisper IR folder; speech: the voice's .onnx
    device: str | None = None  # None: the server-wide --device
    plugin_config: Mapping[str, Any] = field(default_factory=dict)


def _name(given: str | None, path: Path) -> str:
    return given or (path.parent.name if path.suffix == ".onnx" else path.name)


def from_settings(settings: EngineSettings) -> tuple[AudioSpec, ...]:
    """``--whisper-model`` and ``--speech-voice`` (checked when they load, as before)."""
    specs = []
    if settings.whisper_model:
        path = Path(settings.whisper_model).expanduser()
        specs.append(AudioSpec(_name(settings.whisper_model_name, path), "transcription", path))
    if settings.speech_voice:
        path = Path(settings.speech_voice).expanduser()
        specs.append(AudioSpec(_name(settings.speech_model_name, path), "speech", path))
    return tuple(specs)


def is_whisper(folder: Path) -> bool:
    return all((folder / name).is_file() for name in WHISPER_FILES)


def _voices_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.onnx") if p.is_file())


def is_voice(folder: Path) -> bool:
    found = _voices_in(folder)
    return len(found) == 1 and found[0].with_name(found[0].name + ".json").is_file()


def checked(name: str, kind: AudioKind, path: Path, options: ServableNodeOptions | None = None) -> AudioSpec:
    """A config entry's audio model; ValueError naming what is missing."""
    if kind == "transcription":
        missing = [n for n in WHISPER_FILES if not (path / n).is_file()]
        if missing:
            raise ValueError(f"{str(path)!r} is not a Whisper OpenVINO IR folder: missing {', '.join(missing)}")
    else:
        if path.is_dir():
            found = _voices_in(path)
            if len(found) != 1:
                raise ValueError(f"{str(path)!r} must hold one Piper voice (.onnx), found {len(found)}")
            path = found[0]
        if path.suffix != ".onnx" or not path.is_file():
            raise ValueError(f"{str(path)!r} is not a Piper voice (.onnx)")
        if not path.with_name(path.name + ".json").is_file():
            raise ValueError(f"the Piper voice {str(path)!r} has no {path.name}.json beside it")
    device = options.target_device if options is not None else None
    plugin_config = (options.plugin_config or {}) if options is not None else {}
    return AudioSpec(name, kind, path, device, plugin_config)


def one_per_kind(specs: tuple[AudioSpec, ...]) -> None:
    """ValueError if two models of one kind are asked for (an engine serves one of each)."""
    for kind in ("transcription", "speech"):
        names = [s.name for s in specs if s.kind == kind]
        if len(names) > 1:
            raise ValueError(f"an engine serves one {kind} model, {len(names)} are named: {', '.join(names)}")
