"""Where a model comes from: a GGUF file or an OpenVINO IR folder (``optimum-cli export openvino``)."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

_QUANT_SUFFIX = re.compile(r"[.\-_](?:I?Q\d\w*|F16|F32|BF16)$", re.IGNORECASE)
IR_MODEL_FILE = "openvino_model.xml"
# What an OpenVINO IR folder must hold besides the model (OVMS loads all of them): the tokenizer
# and detokenizer IRs that openvino-tokenizers writes, each an .xml with its .bin.
IR_TOKENIZER_FILES = ("openvino_tokenizer.xml", "openvino_detokenizer.xml")
DEFAULT_CONTEXT = 4096


class ModelSourceError(ValueError):
    pass


@dataclass(frozen=True)
class ModelSource:
    path: Path
    kind: Literal["gguf", "openvino_ir"]
    served_name: str
    context_length: int
    # Where a template.jinja beside the model would be: the folder named, or the GGUF's folder as
    # named (before following a symlink to the GGUF).
    template_dir: Path


# GGUF metadata value types (gguf.GGUFValueType) and the sizes of the fixed-size ones.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class _GGUFHeader:
    """Reads a GGUF file's metadata key/value pairs one by one, never its tensors (the
    ``gguf`` package's reader maps every tensor and takes seconds on 2 cores)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        if f.read(4) != b"GGUF":
            raise ModelSourceError("not a GGUF file (bad magic)")
        self.version = self._unpack("I")
        if self.version < 2:
            raise ModelSourceError(f"GGUF version {self.version} is not supported")
        self.tensor_count, self.kv_count = self._unpack("Q"), self._unpack("Q")

    def _unpack(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ModelSourceError("truncated GGUF metadata")
        return struct.unpack("<" + fmt, data)[0]

    def _string(self) -> str:
        return self.f.read(self._unpack("Q")).decode("utf-8", errors="replace")

    def _value(self, kind: int) -> Any:
        if kind in _GGUF_SCALARS:
            return self._unpack(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return self._string()
        if kind == _GGUF_ARRAY:
            item, count = self._unpack("I"), self._unpack("Q")
            if item in _GGUF_SCALARS:  # skipped whole: arrays are token tables, never needed here
                self.f.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), 1)
            else:
                for _ in range(count):
                    self._value(item)
            return None
        raise ModelSourceError(f"unknown GGUF metadata type {kind}")

    def items(self) -> Iterator[tuple[str, Any]]:
        for _ in range(self.kv_count):
            key = self._string()
            yield key, self._value(self._unpack("I"))


def _gguf_context_length(path: Path) -> int:
    arch: str | None = None
    found: dict[str, int] = {}
    with path.open("rb") as f:
        for key, value in _GGUFHeader(f).items():
            if key == "general.architecture":
                arch = str(value)
            elif key.endswith(".context_length") and isinstance(value, int):
                found[key] = value
            if arch is not None and f"{arch}.context_length" in found:
                break
    if arch is not None and f"{arch}.context_length" in found:
        return found[f"{arch}.context_length"]
    return DEFAULT_CONTEXT


def _ir_context_length(folder: Path) -> int:
    config = folder / "config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
            if isinstance(data.get(key), int):
                return int(data[key])
    return DEFAULT_CONTEXT


def check_ir_folder(folder: Path) -> None:
    """An IR folder the pipeline can load: each model's .xml with its .bin, and the tokenizer
    IRs (without them OpenVINO GenAI fails deep in its load with a message naming neither)."""
    for name in (IR_MODEL_FILE, *IR_TOKENIZER_FILES):
        xml = folder / name
        if not xml.is_file():
            raise ModelSourceError(
                f"OpenVINO IR folder {str(folder)!r} has no {name} (export the model with its tokenizer: "
                "genmesh-export, or optimum-cli export openvino)"
            )
        if not xml.with_suffix(".bin").is_file():
            raise ModelSourceError(f"{str(xml)!r} has no weights file {xml.with_suffix('.bin').name} beside it")


def default_served_name(path: Path) -> str:
    if path.is_dir():
        return path.name
    return _QUANT_SUFFIX.sub("", path.stem)


def resolve(model: str, served_name: str | None = None, max_model_len: int | None = None) -> ModelSource:
    """Find what ``--model`` points at, or say clearly why it cannot be served."""
    return _resolve(Path(model).expanduser(), served_name, max_model_len, None)


def _resolve(path: Path, served_name: str | None, max_model_len: int | None, folder: Path | None) -> ModelSource:
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
        check_ir_folder(path)
        context = _ir_context_length(path)
    else:
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            raise ModelSourceError(
                f"folder {str(path)!r} holds neither {IR_MODEL_FILE} (an OpenVINO IR export) nor exactly one .gguf file"
            )
        return _resolve(ggufs[0], served_name or path.name, max_model_len, path)
    return ModelSource(
        path=path.resolve(),
        kind=kind,
        served_name=served_name or default_served_name(path),
        context_length=max_model_len or context,
        template_dir=folder or (path if path.is_dir() else path.parent),
    )
