"""A test cross-encoder from real parts: all-MiniLM-L6-v2's encoder and pooler weights plus a
classification head with fixed random weights (seed 46), written as a sentence-transformers
``CrossEncoder`` folder (``BertForSequenceClassification``, one label). No trained cross-encoder is
reachable here; the tests (tests/support/rerank.py) and ``genmesh-bench rerank`` use this one."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np

SEED = 46
HIDDEN = 384


def read_f32(path: Path) -> dict[str, np.ndarray]:
    """The F32 tensors of a safetensors file (names as stored)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + size + start : 8 + size + end], dtype="<f4").reshape(info["shape"])
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def make_cross_encoder(encoder: Path, folder: Path) -> Path:
    """``folder``: ``encoder``'s (a BERT sentence-transformers folder) weights under ``bert.``, and a random head."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (encoder / name).is_file():
            shutil.copy(encoder / name, folder / name)
    cfg = json.loads((encoder / "config.json").read_text())
    cfg.update(architectures=["BertForSequenceClassification"], num_labels=1, id2label={"0": "LABEL_0"})
    cfg["label2id"] = {"LABEL_0": 0}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    rng = np.random.default_rng(SEED)
    tensors = {f"bert.{k}": v for k, v in read_f32(encoder / "model.safetensors").items()}
    tensors["classifier.weight"] = rng.normal(0.0, 0.5, (1, HIDDEN))
    tensors["classifier.bias"] = np.array([0.1])
    write_safetensors(folder / "model.safetensors", tensors)
    return folder
