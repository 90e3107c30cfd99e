"""An exact compressed OpenVINO model of a GGUF whose blocks carry a float minimum (Q4_1).

Q4_1 stores, per block of 32 weights, ``w = d * q + m`` (``d`` and ``m`` f16, ``q`` in 0..15), so

    W x = (d ∘ Q) x + M · S(x)

where ``d ∘ Q`` is a u4 weight with a per-block f16 scale and no zero point (the CPU plugin's
compressed fully-connected fast path), ``S(x)`` the sum of ``x`` over each block of 32 inputs and
``M`` the ``[out, in/32]`` matrix of block minimums. Exact up to the arithmetic: ``d`` and ``m``
are f16 in the file.

How: OpenVINO GenAI builds its model from the GGUF (``(q - zero_point) * scale``, the zero point
``round(-m / d)``: the misreading, gguf_reencode.py) and writes it (``enable_save_ov_model``). Its
``q`` and ``d`` are the file's own (checked here, block by block); only the zero point is wrong.
So each such MatMul loses its ``Subtract`` and gains the ``M · S(x)`` term, with ``M`` read from
the GGUF. Everything else in the graph (attention, RoPE, the KV state, the Q8_0 embedding and
output matrix, norms) stays exactly as OpenVINO GenAI builds it, which is why this post-processes
its IR rather than building the decoder anew.

GenAI reorders the rows of ``attn_q``/``attn_k`` (llama.cpp's RoPE permutation undone, per head);
the converter finds each weight's GGUF tensor and row order by its scales, and refuses (the caller
falls back to the F16 re-encoding) unless every ``q`` and ``d`` then equals the file's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("genmesh.engine.core.gguf_exact")

QK = 32  # weights per Q4_1 block
# Weight-matrix types the exact form covers: Q4_1 rewritten, the rest read exactly by OpenVINO GenAI.
EXACT_TYPES = frozenset({"Q4_1"})
AS_READ_TYPES = frozenset({"F16", "Q8_0", "Q4_0"})
IR_XML = "openvino_model.xml"
GGUF_LINK = "model.gguf"  # the source GGUF, linked beside the IR: the tokenizer is built from it
MARKER = "exact.json"  # written last into a complete folder: what was rewritten, by which version
VERSION = 2  # bump when the rewrite changes (with gguf_reencode.EXACT_KEY, which keys the folder)


class NotExact(RuntimeError):
    """The GGUF or the IR OpenVINO GenAI built from it is not of the form this converter rewrites."""


def covered(types: dict[str, str]) -> tuple[bool, list[str]]:
    """(whether the exact form serves a file whose weight matrices have these types, the types it
    does not cover). ``types`` maps tensor name to type name, weight matrices only."""
    kinds = set(types.values())
    missing = sorted(kinds - EXACT_TYPES - AS_READ_TYPES)
    return (not missing and bool(kinds & EXACT_TYPES)), missing


def weight_types(reader: Any) -> dict[str, str]:
    from gguf import GGMLQuantizationType

    return {t.name: GGMLQuantizationType(t.tensor_type).name for t in reader.tensors if len(t.shape) >= 2}


@dataclass(frozen=True)
class Q4_1:
    """One Q4_1 matrix in numpy order: d, m [rows, blocks] f16; q [rows, blocks, 32] u8 (0..15)."""

    d: Any
    m: Any
    q: Any

    @classmethod
    def from_raw(cls, raw: Any) -> Q4_1:
        import numpy as np

        blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 4 + QK // 2)
        d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
        m = blocks[..., 2:4].copy().view(np.float16)[..., 0]
        qs = blocks[..., 4:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1)  # ggml: low nibbles first, then high
        return cls(d, m, q)

    def rows(self, order: Any) -> Q4_1:
        return Q4_1(self.d[order], self.m[order], self.q[order])


def rope_order(rows: int, head_dim: int) -> Any:
    """The row order OpenVINO GenAI gives ``attn_q``/``attn_k``: per head, the even rows of the
    GGUF first, then the odd ones (llama.cpp's RoPE permutation undone)."""
    import numpy as np

    half = np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])
    return (np.arange(0, rows, head_dim)[:, None] + half[None, :]).reshape(-1)


def _input_node(node: Any, i: int) -> Any:
    return node.input(i).get_source_output().get_node()


@dataclass
class _Decompression:
    matmul: Any
    subtract: Any
    weight: Any  # the u4 Constant [out, blocks, 32]
    scale: Any  # the f16 Constant [out, blocks, 1]


def _decompressions(model: Any) -> Iterator[_Decompression]:
    """Every MatMul whose weight is ``Convert(Reshape(Multiply(Subtract(Convert(u4), Convert(zp)), scale)))``."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        node = _input_node(op, 1)
        for _ in range(3):  # Convert(Reshape(...)) between the MatMul and the Multiply
            if node.get_type_name() not in ("Convert", "Reshape"):
                break
            node = _input_node(node, 0)
        if node.get_type_name() != "Multiply":
            continue
        sub, scale = _input_node(node, 0), _input_node(node, 1)
        if sub.get_type_name() != "Subtract" or scale.get_type_name() != "Constant":
            continue
        conv = _input_node(sub, 0)
        if conv.get_type_name() != "Convert":
            continue
        weight = _input_node(conv, 0)
        if weight.get_type_name() != "Constant" or weight.get_element_type().get_type_name() != "u4":
            continue
        yield _Decompression(op, sub, weight, scale)


def _unpack_u4(const: Any) -> Any:
    import numpy as np

    shape = tuple(const.get_output_shape(0))
    packed = np.asarray(const.get_data(), dtype=np.uint8)
    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(shape)  # OpenVINO: element 2k low


def _block_sums(ov_ops: Any, np: Any, x: Any, blocks: int) -> Any:
    """``S(x)``: x [batch, tokens, in] summed per block of 32 inputs -> [batch, tokens, in/32]."""
    shape = ov_ops.constant(np.array([0, 0, blocks, QK], dtype=np.int64))
    return ov_ops.reduce_sum(ov_ops.reshape(x, shape, special_zero=True), ov_ops.constant(np.array([-1])), False)


def _minimum_term(ov_ops: Any, np: Any, sums: Any, m: Any) -> Any:
    """``M · S(x)``, ``M`` [out, in/32] f16 as in the file."""
    mins = ov_ops.convert(ov_ops.constant(np.ascontiguousarray(m, dtype=np.float16)), "f32")
    return ov_ops.matmul(sums, mins, False, True)


def rewrite(model: Any, reader: Any) -> int:
    """Rewrite every misread Q4_1 MatMul of ``model`` (the IR OpenVINO GenAI built from ``reader``'s
    GGUF) into the exact form, in place. Returns how many; raises NotExact if a weight is not the
    file's."""
    import numpy as np
    import openvino.opset13 as ops
    from gguf import GGMLQuantizationType, Keys

    arch = str(reader.fields[Keys.General.ARCHITECTURE].contents())
    heads = {
        "attn_q": int(reader.fields[f"{arch}.attention.head_count"].contents()),
        "attn_k": int(reader.fields[f"{arch}.attention.head_count_kv"].contents()),
    }
    candidates: dict[bytes, tuple[str, Q4_1]] = {}
    for t in reader.tensors:
        if GGMLQuantizationType(t.tensor_type).name not in EXACT_TYPES:
            continue
        w = Q4_1.from_raw(t.data)
        kind = t.name.split(".")[-2]
        if kind in heads:
            w = w.rows(rope_order(w.d.shape[0], w.d.shape[0] // heads[kind]))
        candidates[w.d.tobytes()] = (t.name, w)
    done = 0
    sums: dict[tuple[str, int], Any] = {}
    for dec in _decompressions(model):
        scale = np.asarray(dec.scale.get_data())
        if scale.dtype != np.float16:
            raise NotExact(f"{dec.matmul.get_friendly_name()}: scale of type {scale.dtype}, not f16")
        found = candidates.pop(scale[..., 0].tobytes(), None)
        if found is None:
            raise NotExact(f"{dec.matmul.get_friendly_name()}: no Q4_1 tensor of the GGUF has its scales")
        name, w = found
        if not np.array_equal(_unpack_u4(dec.weight), w.q):
            raise NotExact(f"{name}: the 4-bit values OpenVINO GenAI built are not the file's")
        # (q - zp) * d  ->  q * d : the Subtract's consumers read the converted q directly.
        dec.subtract.output(0).replace(dec.subtract.input(0).get_source_output())
        out = dec.matmul.output(0)
        consumers = list(out.get_target_inputs())
        x = dec.matmul.input(0).get_source_output()
        key = (x.get_node().get_friendly_name(), x.get_index())  # q/k/v and gate/up share one input: one S(x)
        if key not in sums:
            sums[key] = _block_sums(ops, np, x, w.m.shape[1])
        exact = ops.add(out, _minimum_term(ops, np, sums[key], w.m))
        exact.set_friendly_name(f"{dec.matmul.get_friendly_name()}/exact_minimum")
        for consumer in consumers:
            consumer.replace_source_output(exact.output(0))
        done += 1
    if candidates:
        raise NotExact(f"{len(candidates)} Q4_1 tensors of the GGUF not found in OpenVINO GenAI's model")
    model.validate_nodes_and_infer_types()
    return done


def _genai_ir(src: Path, work: Path) -> Path:
    """The IR OpenVINO GenAI builds from ``src``, written into ``work``. It writes it while it reads
    the GGUF, before it compiles: a device that does not exist stops it right there (seconds)."""
    import openvino_genai as ov_genai

    gguf = work / GGUF_LINK
    gguf.symlink_to(src)
    sc = ov_genai.SchedulerConfig()
    sc.cache_size = 1
    # "Device ... is not registered": raised after the model was read and written
    with contextlib.suppress(RuntimeError):
        ov_genai.ContinuousBatchingPipeline(str(gguf), sc, "GENMESH_NO_DEVICE", {"enable_save_ov_model": True})
    xml = work / IR_XML
    if not (xml.is_file() and xml.with_suffix(".bin").is_file()):
        raise NotExact(f"OpenVINO GenAI wrote no model for {src}")
    return xml


def build(src: str | Path, folder: str | Path) -> int:
    """Write the exact IR of the GGUF ``src`` into ``folder`` (``openvino_model.xml``/``.bin`` and a
    link to ``src`` for the tokenizer), atomically: the folder appears complete or not at all.
    Returns how many MatMuls were rewritten."""
    import openvino as ov
    from gguf import GGUFReader

    src, folder = Path(src).resolve(), Path(folder)
    reader = GGUFReader(str(src))
    ok, missing = covered(weight_types(reader))
    if not ok:
        raise NotExact(f"{src}: weight types {missing or 'none to rewrite'} are not covered by the exact form")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".part", dir=folder.parent))
    try:
        (work / "genai").mkdir()
        genai_xml = _genai_ir(src, work / "genai")
        core = ov.Core()
        model = core.read_model(str(genai_xml))
        done = rewrite(model, reader)
        ov.save_model(model, str(work / IR_XML), compress_to_fp16=False)
        del model
        shutil.rmtree(work / "genai")
        (work / GGUF_LINK).symlink_to(src)
        (work / MARKER).write_text(json.dumps({"version": VERSION, "source": str(src), "rewritten_matmuls": done}))
        os.chmod(work, 0o755)
        if (folder / MARKER).is_file():  # another process (a replica) finished first: keep its folder
            return done
        if folder.exists():
            shutil.rmtree(folder)  # an incomplete leftover
        os.replace(work, folder)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return done
