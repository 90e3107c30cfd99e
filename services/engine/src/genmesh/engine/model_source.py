"""Where a model comes from: a GGUF file or an OpenVINO IR folder (``optimum-cli export openvino``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

_QUANT_SUFFIX = re.compile(r"[.\-_](?:I?Q\d\w*|F16|F32|BF16)$", re.IGNORECASE)
IR_MODEL_FILE = "openvino_model.xml"
DEFAULT_CONTEXT = 4096


class ModelSourceError(ValueError):
    pass


@dataclass(frozen=True)
class ModelSource:
    path: Path
    kind: Literal["gguf", "openvino_ir"]
    served_name: str
    context_length: int


def _gguf_context_length(path: Path) -> int:
    from gguf import GGUFReader  # heavy import, only for GGUF sources

    reader = GGUFReader(str(path))
    arch_field = reader.fields.get("general.architecture")
    if arch_field is not None:
        arch = str(arch_field.contents())
        ctx = reader.fields.get(f"{arch}.context_length")
        if ctx is not None:
            return int(ctx.contents())
    return DEFAULT_CONTEXT


def _ir_context_length(folder: Path) -> int:
    config = folder / "config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
            if isinstance(data.get(key), int):
                return int(data[key])
    return DEFAULT_CONTEXT


def default_served_name(path: Path) -> str:
    if path.is_dir():
        return path.name
    return _QUANT_SUFFIX.sub("", path.stem)


def resolve(model: str, served_name: str | None = None, max_model_len: int | None = None) -> ModelSource:
    """Find what ``--model`` points at, or say clearly why it cannot be served."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelSourceError(
            f"model path {str(path)!r} does not exist (run 'make model' for the default model, "
            "or pass a GGUF file or an OpenVINO IR folder)"
        )
    kind: Literal["gguf", "openvino_ir"]
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelSourceError(f"{str(path)!r} is a file but not a .gguf model")
        kind = "gguf"
        context = _gguf_context_length(path)
    elif (path / IR_MODEL_FILE).is_file():
        kind = "openvino_ir"
        context = _ir_context_length(path)
    else:
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            raise ModelSourceError(
                f"folder {str(path)!r} holds neither {IR_MODEL_FILE} (an OpenVINO IR export) nor exactly one .gguf file"
            )
        return resolve(str(ggufs[0]), served_name or path.name, max_model_len)
    return ModelSource(
        path=path.resolve(),
        kind=kind,
        served_name=served_name or default_served_name(path),
        context_length=max_model_len or context,
    )
