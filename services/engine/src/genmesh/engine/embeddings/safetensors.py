"""A reader for the safetensors format (an 8-byte header length, a JSON header, raw tensors), as
numpy arrays over one memory map: the format is small enough that a dependency is not worth it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}
MAX_HEADER = 100 << 20


class SafetensorsError(ValueError):
    pass


def read(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of ``path`` by name (read-only views of a memory map)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if data.size < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8].tobytes())
    if size > min(MAX_HEADER, data.size - 8):
        raise SafetensorsError(f"{path}: header length {size} is out of range")
    header = json.loads(data[8 : 8 + size].tobytes())
    base = 8 + size
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise SafetensorsError(f"{path}: tensor {name} has dtype {info['dtype']}, not supported")
        start, end = info["data_offsets"]
        flat = data[base + start : base + end].view(dtype)
        tensors[name] = flat.reshape(info["shape"])
    return tensors
