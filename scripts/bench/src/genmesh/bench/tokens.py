"""The served model's own tokenizer, for dataset lengths (``openvino_genai.Tokenizer`` over a GGUF or IR folder)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def _gguf_vocab_size(path: Path) -> int:
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValueError(f"{path} has no tokenizer.ggml.tokens")
    return len(field.data)


def _folder_vocab_size(path: Path) -> int:
    config = json.loads((path / "config.json").read_text())
    return int(config["vocab_size"])


class ModelTokenizer:
    """:class:`genmesh.bench.datasets.TokenCodec` over the model being served (no special tokens added)."""

    def __init__(self, model_path: Path) -> None:
        from genmesh.engine.tokenizer import PromptTokenizer

        self._tok = PromptTokenizer(model_path)
        gguf = model_path if model_path.is_file() else next(iter(sorted(model_path.glob("*.gguf"))), None)
        self._vocab_size = _gguf_vocab_size(gguf) if gguf is not None else _folder_vocab_size(model_path)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids)
