"""What a sentence-transformers checkpoint folder says about its model: the BERT shape
(``config.json``), the pooling (``1_Pooling/config.json``), whether vectors are normalised
(a ``Normalize`` module in ``modules.json``) and the longest input (``sentence_bert_config.json``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Pooling = Literal["mean", "cls", "last"]
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
REQUIRED = ("config.json", WEIGHTS, TOKENIZER)


class CheckpointError(ValueError):
    pass


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    max_position: int
    layer_norm_eps: float
    pooling: Pooling
    normalize: bool
    max_length: int  # longest input in tokens, special tokens included
    dimensions: int

    def fingerprint(self) -> str:
        """Identifies the built model: the weights' size and mtime, and the options that shape the graph."""
        st = (self.path / WEIGHTS).stat()
        key = f"{st.st_size}:{st.st_mtime_ns}:{self.pooling}:{self.normalize}:{BUILD_VERSION}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]


BUILD_VERSION = 1  # bump when ir.py builds a different graph


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from exc


def _pooling(folder: Path, modules: list[dict[str, Any]]) -> Pooling:
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            cfg = _json(folder / str(module.get("path", "")) / "config.json")
            if cfg.get("pooling_mode_mean_tokens"):
                return "mean"
            if cfg.get("pooling_mode_cls_token"):
                return "cls"
            if cfg.get("pooling_mode_lasttoken"):
                return "last"
            raise CheckpointError(f"{folder}: pooling mode {cfg} is not supported (mean, cls or last token)")
    return "mean"


def read(folder: Path, pooling: Pooling | None = None, normalize: bool | None = None) -> Checkpoint:
    """``pooling`` / ``normalize``: a graph's options, which override the checkpoint's own."""
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is not an embedding checkpoint: missing {', '.join(missing)}")
    cfg = _json(folder / "config.json")
    if cfg.get("model_type") not in ("bert", None) or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{folder}: only BERT encoders with absolute positions are supported")
    modules_file = folder / "modules.json"
    modules: list[dict[str, Any]] = _json(modules_file) if modules_file.is_file() else []
    st_file = folder / "sentence_bert_config.json"
    st_max = _json(st_file).get("max_seq_length") if st_file.is_file() else None
    max_position = int(cfg["max_position_embeddings"])
    try:
        return Checkpoint(
            path=folder,
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            max_position=max_position,
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            pooling=pooling or _pooling(folder, modules),
            normalize=normalize
            if normalize is not None
            else any(str(m.get("type", "")).endswith("Normalize") for m in modules),
            max_length=min(int(st_max or max_position), max_position),
            dimensions=int(cfg["hidden_size"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder}/config.json: {exc}") from exc
