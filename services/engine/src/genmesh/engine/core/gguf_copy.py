"""A copy of a GGUF with some of its tensors re-encoded: metadata, alignment and every other tensor
kept as they are (the F16/Q8_0 re-encodings of gguf_reencode.py, the exact Q8_0 copy of Q5_0
matrices that gguf_exact.py hands to OpenVINO GenAI, a draft model's Q4_1 copy: draft_model.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _types() -> Any:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType


@dataclass(frozen=True)
class TensorPlan:
    name: str
    source_type: str
    target_type: str  # == source_type when the tensor is copied as it is

    @property
    def reencoded(self) -> bool:
        return self.source_type != self.target_type


def _file_type(plans: Iterable[TensorPlan]) -> int:
    from gguf import LlamaFileType

    weights = {p.target_type for p in plans}
    if any(p.reencoded and p.target_type == "Q4_1" for p in plans):
        return int(LlamaFileType.MOSTLY_Q4_1)
    if "Q8_0" in weights:
        return int(LlamaFileType.MOSTLY_Q8_0)
    if "Q4_0" in weights:
        return int(LlamaFileType.MOSTLY_Q4_0)
    return int(LlamaFileType.MOSTLY_F16)


def q5_0_as_q8_0_copy(src: str | Path, dst: str | Path) -> int:
    """Write ``dst``: ``src`` with every Q5_0 matrix as the Q8_0 of the very same weights (OpenVINO
    GenAI refuses Q5_0 and reads Q8_0 exactly; gguf_kquants.q5_0_as_q8_0). Returns how many."""
    from gguf import GGUFReader

    from .gguf_kquants import q5_0_as_q8_0

    t = _types()
    reader = GGUFReader(str(src))
    plans = [
        TensorPlan(x.name, t(x.tensor_type).name, "Q8_0" if t(x.tensor_type).name == "Q5_0" else t(x.tensor_type).name)
        for x in reader.tensors
    ]
    write_copy(reader, dst, plans, lambda tensor, _: q5_0_as_q8_0(tensor.data))
    return sum(p.reencoded for p in plans)


# What a draft model's weight matrices may be re-quantised to (``--draft-quantization``: draft_model.py)
REQUANT_TYPES = ("Q4_1",)
# Kept as they are in a re-quantised copy: the token embedding is a lookup (one row a token), not a matmul
REQUANT_KEEP = frozenset({"token_embd.weight"})
_NOT_QUANTISED = frozenset({"F32", "F16", "BF16"})


def requantised_copy(src: str | Path, dst: str | Path, target: str = "Q4_1") -> int:
    """Write ``dst``: ``src`` with every quantised weight matrix but the token embedding re-quantised to
    ``target`` (the ``gguf`` package's exact dequantisation, then its quantisation), a Q5_0 embedding as its exact
    Q8_0 copy (OpenVINO GenAI refuses Q5_0), every other tensor as it is. Returns how many were re-quantised."""
    import numpy as np
    from gguf import GGUFReader, quants

    from .gguf_kquants import q5_0_as_q8_0

    if target not in REQUANT_TYPES:
        raise ValueError(f"cannot re-quantise to {target!r}: one of {', '.join(REQUANT_TYPES)}")
    t = _types()
    reader = GGUFReader(str(src))
    plans = []
    for x in reader.tensors:
        kind = t(x.tensor_type).name
        if kind in _NOT_QUANTISED or kind == target or len(x.shape) != 2:
            plans.append(TensorPlan(x.name, kind, kind))
        elif x.name in REQUANT_KEEP:
            plans.append(TensorPlan(x.name, kind, "Q8_0" if kind == "Q5_0" else kind))
        else:
            plans.append(TensorPlan(x.name, kind, target))

    def encode(tensor: Any, plan: TensorPlan) -> Any:
        if plan.target_type == "Q8_0":
            return q5_0_as_q8_0(tensor.data)
        weights = quants.dequantize(tensor.data, t(tensor.tensor_type)).astype(np.float32)
        return quants.quantize(weights, t[plan.target_type])

    write_copy(reader, dst, plans, encode)
    return sum(p.reencoded and p.target_type == target for p in plans)


def write_copy(reader: Any, dst: str | Path, plans: list[TensorPlan], encode: Any) -> None:
    """Write ``dst``: ``reader``'s metadata and tensors, each re-encoded one ``encode(tensor, plan)``."""
    import numpy as np
    from gguf import GGUFValueType, GGUFWriter, Keys, quants

    t = _types()
    arch = str(reader.fields[Keys.General.ARCHITECTURE].contents())
    writer = GGUFWriter(str(dst), arch)
    alignment = reader.fields.get(Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.name == Keys.General.FILE_TYPE:
            value = _file_type(plans)
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    by_name = {p.name: p for p in plans}
    for tensor in reader.tensors:
        p = by_name[tensor.name]
        if not p.reencoded:
            writer.add_tensor_info(
                tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
            )
            continue
        qtype = t[p.target_type]
        rows = tuple(int(d) for d in reversed(tensor.shape))  # numpy order: rows last-but-one
        quantised = p.target_type not in _NOT_QUANTISED
        byte_shape = quants.quant_shape_to_byte_shape(rows, qtype) if quantised else rows
        dtype = np.dtype(np.uint8) if quantised else np.dtype(np.float16)
        nbytes = int(np.prod(byte_shape)) * dtype.itemsize
        writer.add_tensor_info(tensor.name, byte_shape, dtype, nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        p = by_name[tensor.name]
        if not p.reencoded:
            writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
            continue
        writer.write_tensor_data(encode(tensor, p))
    writer.close()
