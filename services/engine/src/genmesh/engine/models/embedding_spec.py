"""An embedding model to serve: its name, its folder and the options it runs with, from
``--embedding-model`` or from an entry of an OVMS ``config.json`` (a graph with an
``EmbeddingsCalculatorOV`` node, or a bare sentence-transformers folder). The engine's embedding
settings are the defaults; a graph's node options override them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ..embeddings.checkpoint import REQUIRED
from ..embeddings.options import EmbeddingOptions
from ..settings import EngineSettings, model_names
from .ovms_embeddings_graph import OVMS_POOLING, EmbeddingsNodeOptions
from .ovms_rerank_graph import RerankNodeOptions


@dataclass(frozen=True)
class EmbeddingSpec:
    name: str
    options: EmbeddingOptions
    aliases: tuple[str, ...] = ()  # other values of ``model`` that mean this one


def options_from(settings: EngineSettings, path: Path, node: EmbeddingsNodeOptions | None = None) -> EmbeddingOptions:
    """The engine's embedding settings, with a graph's node options over them."""
    plugin = node.plugin_config if node is not None and node.plugin_config is not None else {}
    return EmbeddingOptions(
        path=path,
        pooling=OVMS_POOLING[node.pooling] if node is not None and node.pooling else None,  # type: ignore[arg-type]
        normalize=node.normalize_embeddings if node is not None else None,
        truncate=node.truncate if node is not None else False,
        device=(node.target_device if node is not None and node.target_device else settings.device),
        plugin_config=tuple(sorted(plugin.items())),
        cache_dir=settings.gguf_cache_dir,
        max_batch_size=settings.embedding_max_batch_size,
        max_batch_tokens=settings.embedding_max_batch_tokens,
        max_wait_s=settings.embedding_max_wait_ms / 1000,
        max_queued=settings.embedding_max_queued_inputs,
        max_inputs=settings.embedding_max_inputs,
        max_documents=settings.rerank_max_documents,
        max_allowed_chunks=settings.rerank_max_allowed_chunks,
    )


def rerank_options(settings: EngineSettings, path: Path, node: RerankNodeOptions) -> EmbeddingOptions:
    """A rerank graph's cross-encoder: the engine's settings with the node's options over them."""
    plugin = node.plugin_config or {}
    return replace(
        options_from(settings, path),
        kind="rerank",
        device=node.target_device or settings.device,
        plugin_config=tuple(sorted(plugin.items())),
        max_allowed_chunks=node.max_allowed_chunks or settings.rerank_max_allowed_chunks,
        max_length=node.max_position_embeddings,
    )


def is_checkpoint(folder: Path) -> bool:
    """A sentence-transformers folder served without a graph (its own pooling and normalisation)."""
    return all((folder / name).is_file() for name in REQUIRED)


def single_spec(settings: EngineSettings) -> EmbeddingSpec | None:
    """``--embedding-model``: the one served beside ``--model``."""
    if settings.embedding_model is None:
        return None
    path = Path(settings.embedding_model).expanduser()
    name, aliases = model_names(settings.embedding_model_name)
    return EmbeddingSpec(name or path.name, options_from(settings, path), aliases)


def single_rerank_spec(settings: EngineSettings) -> EmbeddingSpec | None:
    """``--rerank-model``: the cross-encoder served beside ``--model``."""
    if settings.rerank_model is None:
        return None
    path = Path(settings.rerank_model).expanduser()
    options = replace(options_from(settings, path), kind="rerank")
    name, aliases = model_names(settings.rerank_model_name)
    return EmbeddingSpec(name or path.name, options, aliases)


def is_cross_encoder(folder: Path) -> bool:
    """A checkpoint whose ``config.json`` names a ``...ForSequenceClassification`` architecture."""
    try:
        archs = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False
    return any(str(a).endswith("ForSequenceClassification") for a in archs)
