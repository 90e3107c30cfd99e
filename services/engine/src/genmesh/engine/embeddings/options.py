"""What serving one embedding model takes, apart from the model code: ``models/`` builds it from
the settings and a graph without importing OpenVINO (the engine's CLI must not load OpenVINO
before ``amx_guard`` has set ``ONEDNN_MAX_CPU_ISA``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .checkpoint import Pooling


@dataclass(frozen=True)
class EmbeddingOptions:
    """What serving one embedding model takes (the engine's settings and the graph's options)."""

    path: Path
    kind: Literal["embeddings", "rerank"] = "embeddings"  # rerank: a cross-encoder (cross_encoder.py)
    pooling: Pooling | None = None  # None: the checkpoint's own
    normalize: bool | None = None
    truncate: bool = False  # OVMS's option: cut over-long inputs instead of refusing them
    device: str = "CPU"
    plugin_config: tuple[tuple[str, Any], ...] = ()
    cache_dir: str = "~/.cache/genmesh"
    max_batch_size: int = 32
    max_batch_tokens: int = 8192
    max_wait_s: float = 0.005
    max_queued: int = 8192
    max_inputs: int = 2048
    max_documents: int = 1000  # documents in one rerank/score request
    max_allowed_chunks: int = 10000  # a cross-encoder's query+chunk pairs in one request (OVMS's option)
    max_length: int | None = None  # a cross-encoder's pair length (OVMS's max_position_embeddings); None: the model's
