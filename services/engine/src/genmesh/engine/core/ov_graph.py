"""What the GGUF rewrites of an OpenVINO graph (gguf_exact.py, gguf_fuse.py) both read it with."""

from __future__ import annotations

from typing import Any


def input_node(node: Any, i: int) -> Any:
    """The node whose output feeds ``node``'s input ``i``."""
    return node.input(i).get_source_output().get_node()


def u4_values(packed: Any, shape: tuple[int, ...]) -> Any:
    """OpenVINO's packed u4 bytes as one value per element (element 2k in byte k's low nibble)."""
    import numpy as np

    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(shape)
