"""Which models one engine serves: the one ``--model``, or every entry of an OVMS ``config.json``.

An OVMS model repository is a ``config.json``::

    {"model_config_list": [{"config": {"name": "a", "base_path": "a"}}],
     "mediapipe_config_list": [{"name": "b", "base_path": "b"}]}

Each entry names a folder (``base_path``, relative paths against the config file's folder;
default: the entry's name). A ``graph.pbtxt`` there (or at the entry's ``graph_path``) sets
the model's pipeline options and ``models_path`` (relative to ``base_path``); without one
the folder itself is the model (an OpenVINO IR export, a folder with one GGUF, a Whisper IR, a
Piper voice) served with the server-wide flags; audio graphs and folders are ``audio_spec``'s.
Whatever can be checked without loading a model is checked before the server starts, and any
fault is fatal with a message naming the file: an unreadable ``config.json``, a name used twice, a
missing path, a bad ``graph.pbtxt``, an IR folder short of a file. A model that then fails to
load (a device that does not exist, say) is reported by ``/v1/config`` while the others serve.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..settings import EngineSettings, model_names
from . import amx_guard, audio_spec
from . import embedding_spec as embeddings
from .audio_spec import AudioSpec
from .ovms_audio_graph import audio_node_options
from .ovms_embeddings_graph import embeddings_node_options
from .ovms_graph import GRAPH_FILE, llm_node_options
from .ovms_rerank_graph import rerank_node_options
from .source import ModelSource, resolve

log = logging.getLogger("genmesh.engine.models.ovms_config")

LISTS = ("model_config_list", "mediapipe_config_list")


class RepositoryError(ValueError):
    """The config.json itself cannot be used (missing, not JSON, wrong shape, duplicate names)."""


@dataclass(frozen=True)
class ModelSpec:
    """One model to serve: its own settings (server-wide flags and its graph's options) and source."""

    name: str
    settings: EngineSettings
    source: ModelSource
    aliases: tuple[str, ...] = ()  # other values of ``model`` that mean this one


@dataclass(frozen=True)
class Repository:
    models: tuple[ModelSpec, ...]
    config_path: Path | None = None  # None: the single ``--model``
    embeddings: tuple[embeddings.EmbeddingSpec, ...] = ()  # embedding models (embeddings/), served apart
    audio: tuple[AudioSpec, ...] = ()  # Whisper and a voice (audio/), served apart

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]


def single_model(settings: EngineSettings) -> Repository:
    """``--model``: one model under its served name (``ModelSourceError`` if it cannot be found)."""
    name, others = model_names(settings.served_model_name)
    source = resolve(settings.model, name, settings.max_model_len)
    aliases = (str(source.path), settings.model, *others)
    extra = tuple(s for s in (embeddings.single_spec(settings), embeddings.single_rerank_spec(settings)) if s)
    spec = ModelSpec(source.served_name, settings, source, aliases=aliases)
    return Repository((spec,), None, extra, audio_spec.from_settings(settings))


def load(settings: EngineSettings, host: amx_guard.HostCpu | None = None) -> Repository:
    """The models ``settings`` ask for: the config.json's entries, else the one ``--model``; each
    with settings that do not crash OpenVINO on this CPU (``amx_guard``; ``host``: this machine)."""
    if settings.config_path is None:
        repo = single_model(settings)
    else:
        if {"model", "served_model_name"} & settings.model_fields_set:
            log.warning("--config-path is set: --model and --served-model-name are ignored")
        repo = from_config(Path(settings.config_path).expanduser(), settings)
        audio = repo.audio + audio_spec.from_settings(settings)  # --whisper-model / --speech-voice beside it
        try:
            audio_spec.one_per_kind(audio)
        except ValueError as exc:
            raise RepositoryError(f"{repo.config_path}: {exc}") from exc
        repo = replace(repo, audio=audio)
    host = host or amx_guard.this_host()
    return replace(repo, models=tuple(_guarded(m, host) for m in repo.models))


def _guarded(spec: ModelSpec, host: amx_guard.HostCpu) -> ModelSpec:
    try:
        return replace(spec, settings=amx_guard.guard(spec.name, spec.settings, host))
    except amx_guard.UnsafeConfigError as exc:
        raise RepositoryError(f"model {spec.name!r} cannot be served: {exc}") from exc


def from_config(path: Path, settings: EngineSettings) -> Repository:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RepositoryError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"config file {str(path)!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RepositoryError(f"config file {str(path)!r} must hold a JSON object")
    entries: list[dict[str, Any]] = []
    for key in LISTS:
        items = data.get(key, [])
        if not isinstance(items, list):
            raise RepositoryError(f"{path}: '{key}' must be a list")
        for i, item in enumerate(items):
            # model_config_list wraps each entry in {"config": {...}}; mediapipe_config_list does not
            entry = item.get("config", item) if isinstance(item, dict) else None
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                raise RepositoryError(f"{path}: {key}[{i}] needs a 'name' (a non-empty string)")
            entries.append(entry)
    if not entries:
        raise RepositoryError(f"{path}: no models in {' or '.join(LISTS)}")
    names = [e["name"] for e in entries]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RepositoryError(f"{path}: model names must be unique, repeated: {', '.join(duplicates)}")
    specs = [_entry(e, path, settings) for e in entries]
    llms = tuple(s for s in specs if isinstance(s, ModelSpec))
    extra = tuple(s for s in specs if isinstance(s, embeddings.EmbeddingSpec))
    return Repository(llms, path, extra, tuple(s for s in specs if isinstance(s, AudioSpec)))


def _relative_to(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _entry(
    entry: dict[str, Any], config_path: Path, settings: EngineSettings
) -> ModelSpec | embeddings.EmbeddingSpec | AudioSpec:
    name: str = entry["name"]
    try:
        base = _relative_to(config_path.parent, str(entry.get("base_path") or name))
        if not base.is_dir():
            raise ValueError(f"base_path {str(base)!r} is not a folder")
        graph_path = entry.get("graph_path")
        graph = _relative_to(base, str(graph_path)) if graph_path else base / GRAPH_FILE
        model_path, overrides = base, {}
        if graph.is_file() and (audio := audio_node_options(graph.read_text(encoding="utf-8"), str(graph))):
            kind, audio_options = audio
            return audio_spec.checked(name, kind, _relative_to(base, audio_options.models_path), audio_options)
        if not graph.is_file() and (audio_spec.is_whisper(base) or audio_spec.is_voice(base)):
            return audio_spec.checked(name, "transcription" if audio_spec.is_whisper(base) else "speech", base)
        if graph.is_file() and (node := embeddings_node_options(graph.read_text(encoding="utf-8"), str(graph))):
            path = _relative_to(base, node.models_path)
            return embeddings.EmbeddingSpec(name, embeddings.options_from(settings, path, node))
        if graph.is_file() and (rerank := rerank_node_options(graph.read_text(encoding="utf-8"), str(graph))):
            return embeddings.EmbeddingSpec(
                name, embeddings.rerank_options(settings, _relative_to(base, rerank.models_path), rerank)
            )
        if not graph.is_file() and embeddings.is_checkpoint(base):
            served = embeddings.options_from(settings, base)
            if embeddings.is_cross_encoder(base):
                served = replace(served, kind="rerank")
            return embeddings.EmbeddingSpec(name, served)
        if graph.is_file():
            options = llm_node_options(graph.read_text(encoding="utf-8"), str(graph))
            if options.ignored:
                log.warning("model %s: %s options not used by genmesh: %s", name, graph, ", ".join(options.ignored))
            model_path = _relative_to(base, options.models_path)
            overrides = options.settings_overrides()
            if "draft_model" in overrides:  # relative to base_path, like models_path
                overrides["draft_model"] = str(_relative_to(base, overrides["draft_model"]))
        elif graph_path:
            raise ValueError(f"graph_path {str(graph)!r} does not exist")
        own = settings.model_copy(update={"model": str(model_path), "served_model_name": name, **overrides})
        source = resolve(str(model_path), name, own.max_model_len)
    except (ValueError, OSError) as exc:  # ModelSourceError and GraphError are ValueErrors
        raise RepositoryError(f"{config_path}: model {name!r} cannot be served: {exc}") from exc
    return ModelSpec(name, own, source)
