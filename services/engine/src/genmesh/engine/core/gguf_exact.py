"""An exact compressed OpenVINO model of a GGUF: the file's own values, scales and minimums.

Q4_1 stores, per block of 32 weights, ``w = d * q + m`` (``d`` and ``m`` f16, ``q`` in 0..15), so

    W x = (d ∘ Q) x + M · S(x)

where ``d ∘ Q`` is a u4 weight with a per-block scale and no zero point (the CPU plugin's
compressed fully-connected fast path), ``S(x)`` the sum of ``x`` over each block of 32 inputs and
``M`` the ``[out, in/32]`` matrix of block minimums. Q4_K is the same per sub-block of 32
(``d·sc·q - dmin·mn``) with the scale ``d·sc`` and ``M`` in f32 (exact products of an f16 and a
6-bit integer); Q6_K (``d·sc·(q - 32)`` per 16) becomes i8 values ``q - 32`` with the f32 scale
``d·sc`` and no minimum; Q5_0 is handed to OpenVINO GenAI as the Q8_0 of the same weights (it
refuses Q5_0, reads Q8_0 exactly). Exact up to the arithmetic (gguf_kquants.py unpacks each type).

How: OpenVINO GenAI builds its model from the GGUF (``(q - zero_point) * scale``, the zero point
``round(-min / scale)`` and the scale rounded to f16: the misreading, gguf_reencode.py) and writes
it (``enable_save_ov_model``). Its ``q`` and f16 scales are the file's own, rounded as it rounds
them (checked here, block by block). So each such MatMul (or embedding Gather) loses its
``Subtract`` (and, for K-quants, gets the exact f32 scale) and gains the ``M · S(x)`` term, with
``M`` read from the GGUF. Everything else in the graph (attention, RoPE, the KV state, Q8_0/Q4_0
matrices, norms) stays exactly as OpenVINO GenAI builds it, which is why this post-processes its
IR rather than building the decoder anew.

GenAI reorders the rows of a llama GGUF's ``attn_q``/``attn_k`` (llama.cpp's RoPE permutation
undone, per head); the converter finds each weight's GGUF tensor and row order by its scales, and
refuses (the caller falls back to the F16 re-encoding) unless every ``q`` and scale then equals the
file's.

With ``q41_op`` (the engine's int8 path, native/selection.py), each Q4_1 MatMul becomes one
``genmesh::Q41MatMul`` over the file's own blocks instead of ``W x + M S(x)``: int8 dot products of the
blocks with the activations quantised per block of 32 (docs/int8-avx2.md); each Q4_K and Q6_K MatMul likewise
one ``genmesh::Q4KX8MatMul`` / ``Q6KX8MatMul`` (the file's blocks interleaved eight rows at a time:
q41_op.pack_q4k_x8 / pack_q6k_x8), activations per 256 (``OP_KINDS``), and each
Q8_0 MatMul (SmolLM2's output matrix, tied to its embedding, whose Gather keeps GenAI's exact u8 decompression;
Q5_0 through its exact Q8_0 copy) one ``genmesh::Q80MatMul`` (activations per 32); the ``Q41MatMul`` ops
of one input (a layer's q/k/v, its gate/up) are then one ``Q41MatMul`` with an output per matrix
(gguf_op_groups.py: 120 op nodes instead of 210 on SmolLM2, the same outputs bit for bit); before that, with
``swiglu``, a layer's ``Swish(gate) * up`` over two ``Q41MatMul`` becomes one ``genmesh::Q41SwiGLU`` (gguf_op_swiglu.py:
90 op nodes on SmolLM2, the SiLU in the op's f32); last, with ``interleave`` (the default), every ``Q41MatMul`` is a
``genmesh::Q41X8MatMul`` over its blocks interleaved eight rows at a time (gguf_op_x8.py: the same outputs bit for
bit, no transpose at run time); and where one of these ops makes the logits, the rows the pipeline samples are
gathered in front of it (gguf_op_head.py: OpenVINO GenAI gathers before a MatMul head only). Such an IR needs the
extension to load (its own cache folder: gguf_reencode.EXACT_OP_KEY). Otherwise the Q4_1
MatMuls that read one input (a layer's q/k/v, its gate/up) are then fused into one each, and every Q4_1
MatMul is written with its minimums as an f32 zero point, ``(q - z) d`` with ``z = -m/d`` (gguf_fuse.py: the
same values to f32 rounding; one compressed fully-connected per group and no ``S(x)``, so far fewer nodes for
the CPU plugin).
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

from ..native.q41_op import (
    OP_TYPES,
    Q41_X8,
    SWIGLU_TYPE,
    TYPE_NAME,
    X8_OPS,
    kquant_matmul,
    pack_blocks,
    q41_matmul,
    x8_matmul,
)
from .gguf_fuse import fuse, in_zero_point_form
from .gguf_kquants import QK, UNPACK, Blocks, q5_0_as_q8_0, q8_0
from .gguf_op_groups import SIZES as OP_GROUP_SIZES
from .gguf_op_groups import group as group_ops
from .gguf_op_head import gather_before_head
from .gguf_op_swiglu import fuse_swiglu
from .gguf_op_x8 import interleave as interleave_q41
from .ov_graph import input_node, u4_values

log = logging.getLogger("genmesh.engine.core.gguf_exact")

# Weight-matrix types the exact form covers: rewritten (UNPACK), given to OpenVINO GenAI as an exact
# Q8_0 copy (Q5_0: q5_0_as_q8_0), or read exactly by OpenVINO GenAI as they are.
EXACT_TYPES = frozenset(UNPACK)
COPIED_TYPES = frozenset({"Q5_0"})
AS_READ_TYPES = frozenset({"F16", "Q8_0", "Q4_0"})
IR_XML = "openvino_model.xml"
GGUF_LINK = "model.gguf"  # the source GGUF, linked beside the IR: the tokenizer is built from it
MARKER = "exact.json"  # written last into a complete folder: what was rewritten, by which version
VERSION = 4  # bump when the rewrite changes (with gguf_reencode.EXACT_KEY, which keys the folder); 3: fused;
# 4: the Q4_1 minimums as an f32 zero point


class NotExact(RuntimeError):
    """The GGUF or the IR OpenVINO GenAI built from it is not of the form this converter rewrites."""


def covered(types: dict[str, str]) -> tuple[bool, list[str]]:
    """(whether the exact form serves a file whose weight matrices have these types, the types it
    does not cover). ``types`` maps tensor name to type name, weight matrices only."""
    kinds = set(types.values())
    missing = sorted(kinds - EXACT_TYPES - COPIED_TYPES - AS_READ_TYPES)
    return (not missing and bool(kinds & (EXACT_TYPES | COPIED_TYPES))), missing


def weight_types(reader: Any) -> dict[str, str]:
    from gguf import GGMLQuantizationType

    return {t.name: GGMLQuantizationType(t.tensor_type).name for t in reader.tensors if len(t.shape) >= 2}


def rope_order(rows: int, head_dim: int) -> Any:
    """The row order OpenVINO GenAI gives ``attn_q``/``attn_k`` of a llama GGUF: per head, the even
    rows of the GGUF first, then the odd ones (llama.cpp's RoPE permutation undone)."""
    import numpy as np

    half = np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])
    return (np.arange(0, rows, head_dim)[:, None] + half[None, :]).reshape(-1)


@dataclass
class _Decompression:
    user: Any  # the MatMul (weight: input 1) or Gather (table: input 0) that reads the weight
    subtract: Any
    multiply: Any
    weight: Any  # the u4/u8 Constant [out, groups, group]
    scale: Any  # the f16 Constant [out, groups, 1]


def _decompressions(model: Any) -> Iterator[_Decompression]:
    """Every MatMul/Gather whose weight is
    ``Convert(Reshape(Multiply(Subtract(Convert(u4|u8), Convert(zp)), scale)))``."""
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind not in ("MatMul", "Gather"):
            continue
        node = input_node(op, 1 if kind == "MatMul" else 0)
        for _ in range(3):  # Convert(Reshape(...)) between the MatMul and the Multiply
            if node.get_type_name() not in ("Convert", "Reshape"):
                break
            node = input_node(node, 0)
        if node.get_type_name() != "Multiply":
            continue
        sub, scale = input_node(node, 0), input_node(node, 1)
        if sub.get_type_name() != "Subtract" or scale.get_type_name() != "Constant":
            continue
        conv = input_node(sub, 0)
        if conv.get_type_name() != "Convert":
            continue
        weight = input_node(conv, 0)
        if weight.get_type_name() != "Constant" or weight.get_element_type().get_type_name() not in ("u4", "u8"):
            continue
        yield _Decompression(op, sub, node, weight, scale)


def _weight_values(const: Any) -> Any:
    import numpy as np

    shape = tuple(const.get_output_shape(0))
    packed = np.asarray(const.get_data(), dtype=np.uint8)
    if const.get_element_type().get_type_name() == "u8":
        return packed.reshape(shape)
    return u4_values(packed, shape)


def _block_sums(ov_ops: Any, np: Any, x: Any, blocks: int) -> Any:
    """``S(x)``: x [batch, tokens, in] summed per block of 32 inputs -> [batch, tokens, in/32]."""
    shape = ov_ops.constant(np.array([0, 0, blocks, QK], dtype=np.int64))
    return ov_ops.reduce_sum(ov_ops.reshape(x, shape, special_zero=True), ov_ops.constant(np.array([-1])), False)


def _minimums(ov_ops: Any, np: Any, m: Any) -> Any:
    """``M`` [out, in/32] as an f32 node: stored as f16 where that is exact (Q4_1), else f32 (Q4_K)."""
    if np.array_equal(m.astype(np.float16).astype(np.float32), m):
        return ov_ops.convert(ov_ops.constant(np.ascontiguousarray(m, dtype=np.float16)), "f32")
    return ov_ops.constant(np.ascontiguousarray(m, dtype=np.float32))


def _exact_weight(ov_ops: Any, np: Any, dec: _Decompression, w: Blocks) -> None:
    """Drop the Subtract (Q4_1: the f16 scale is the file's) or rebuild the decompression with the
    exact f32 scale (Q4_K: u4 values; Q6_K: the signed values ``q - 32`` as i8, no zero point)."""
    if w.m is not None and w.scale.dtype == np.float16:
        # (q - zp) * d  ->  q * d : the Subtract's consumers read the converted q directly.
        dec.subtract.output(0).replace(dec.subtract.input(0).get_source_output())
        return
    values: Any = dec.weight.output(0)
    if w.m is None:
        values = ov_ops.constant((w.q.astype(np.int16) - 32).astype(np.int8))
    scale = ov_ops.constant(np.ascontiguousarray(w.scale[..., None], dtype=np.float32))
    dec.multiply.output(0).replace(ov_ops.multiply(ov_ops.convert(values, "f32"), scale).output(0))


def _candidates(reader: Any, as_q8_0: bool = False) -> dict[bytes, tuple[str, Blocks]]:
    """Every rewritten matrix of the GGUF keyed by the f16 scales OpenVINO GenAI builds for it (for
    ``attn_q``/``attn_k`` also in RoPE order: GenAI reorders a llama GGUF's rows); ``as_q8_0``: also every Q8_0
    matrix, and every Q5_0 one as the Q8_0 copy GenAI reads (the int8 path's ``Q80MatMul``)."""
    from gguf import GGMLQuantizationType, Keys

    arch = str(reader.fields[Keys.General.ARCHITECTURE].contents())
    heads = {
        "attn_q": int(reader.fields[f"{arch}.attention.head_count"].contents()),
        "attn_k": int(reader.fields[f"{arch}.attention.head_count_kv"].contents()),
    }
    out: dict[bytes, tuple[str, Blocks]] = {}
    for t in reader.tensors:
        kind = GGMLQuantizationType(t.tensor_type).name
        if len(t.shape) < 2:
            continue
        if kind in UNPACK:
            w = UNPACK[kind](t.data)
        elif as_q8_0 and kind in Q8_0_READ:
            w = q8_0(q5_0_as_q8_0(t.data) if kind == "Q5_0" else t.data)
        else:
            continue
        out[w.genai_scale.tobytes()] = (t.name, w)
        part = t.name.split(".")[-2]
        if part in heads:
            rows = w.q.shape[0]
            reordered = w.rows(rope_order(rows, rows // heads[part]))
            out[reordered.genai_scale.tobytes()] = (t.name, reordered)
    return out


# The GGUF types whose MatMuls the int8 path writes as an op of the extension (native/int8/): the op's name
OP_KINDS = OP_TYPES
# The types OpenVINO GenAI reads as Q8_0, exactly (u8 q + 128, zero point 128, f16 d): the int8 path writes their
# MatMuls as Q80MatMul over the file's (or the copy's) blocks and leaves everything else (the tied embedding's
# Gather) on GenAI's own decompression, unchanged
Q8_0_READ = frozenset({"Q8_0", "Q5_0"})
Q8_0_ZERO_POINT = 128


def _zero_point_is(np: Any, dec: _Decompression, value: int) -> bool:
    """Whether ``dec``'s zero point is the constant ``value`` (``Convert(Constant)`` all equal to it)."""
    node = input_node(dec.subtract, 1)
    if node.get_type_name() == "Convert":
        node = input_node(node, 0)
    return node.get_type_name() == "Constant" and bool((np.asarray(node.get_data()) == value).all())


def _int8_op(np: Any, matmul: Any, w: Blocks) -> Any | None:
    """``Q41MatMul``/``Q4KX8MatMul``/``Q6KX8MatMul``/``Q80MatMul(x, the file's blocks)`` for a Q4_1/Q4_K/Q6_K/Q8_0
    ``matmul``
    (x [..., K] times W [N, K] transposed), else None (another layout: left to OpenVINO)."""
    attrs = matmul.get_attributes()
    if attrs.get("transpose_a") or not attrs.get("transpose_b"):
        return None
    x = matmul.input(0).get_source_output()
    if x.get_element_type().get_type_name() != "f32":
        return None
    if w.kind in X8_OPS:  # Q4_K, Q6_K interleaved eight rows at a time: one stream per task, eight columns a maddubs
        op = x8_matmul(w.kind, x, X8_OPS[w.kind][1](np.ascontiguousarray(w.raw)))
        op.set_friendly_name(f"{matmul.get_friendly_name()}/{w.kind.lower().replace('_', '')}x8")
        return op
    if w.kind != "Q4_1":
        op = kquant_matmul(w.kind, x, np.ascontiguousarray(w.raw))
        op.set_friendly_name(f"{matmul.get_friendly_name()}/{w.kind.lower().replace('_', '')}")
        return op
    assert w.m is not None
    op = q41_matmul(x, pack_blocks(w.q, w.scale, w.m.astype(np.float16)))
    op.set_friendly_name(f"{matmul.get_friendly_name()}/q41")
    return op


# Whether the served op IR writes a gated MLP's Q4_1 gate/up as one Q41SwiGLU. Off: with it SmolLM2's full make eval
# under the AVX2 cap gave 22 of 30 greedy answers equal to the reference (the floor is 23; the grouped IR: 25), its
# other figures as good (docs/int8-avx2.md, "SwiGLU in the op"); the op stays for the probes (fuse_probe op_swiglu).
SWIGLU = False
# Whether the served op IR writes its Q4_1 ops (grouped or not) over the blocks interleaved eight columns at a time
# (Q41X8MatMul, gguf_op_x8.py: bit for bit the same products, no transpose at run time). The probes' baselines
# (fuse_probe) pass False.
INTERLEAVE_Q41 = True


def rewrite(
    model: Any,
    reader: Any,
    q41_op: bool = False,
    op_groups: tuple[int, ...] = OP_GROUP_SIZES,
    swiglu: bool = SWIGLU,
    interleave: bool = INTERLEAVE_Q41,
) -> int:
    """Rewrite every misread MatMul/Gather weight of ``model`` (the IR OpenVINO GenAI built from
    ``reader``'s GGUF) into the exact form, in place (``q41_op``: a Q4_1 MatMul into
    ``genmesh::Q41MatMul``, and the ones of one input, where they are ``op_groups`` many (q/k/v, gate/up), into one
    ``Q41MatMul`` with an output per matrix: gguf_op_groups.py; first, with ``swiglu``, a gated MLP's
    ``Swish(gate) * up`` as one ``Q41SwiGLU``: gguf_op_swiglu.py; off by default: ``SWIGLU``; last, with
    ``interleave``, every ``Q41MatMul`` as a ``Q41X8MatMul`` over its blocks interleaved: gguf_op_x8.py). Returns
    how many matrices; raises NotExact if a weight is not the file's."""
    import numpy as np
    import openvino.opset13 as ops

    candidates = _candidates(reader, as_q8_0=q41_op)
    names = {name for name, w in candidates.values() if w.kind in UNPACK}  # (Q8_0: only where GenAI has a MatMul)
    found: dict[str, tuple[str, Blocks]] = {}  # Subtract -> its tensor (a tied matrix has two users)
    done = 0
    sums: dict[tuple[str, int], Any] = {}
    for dec in list(_decompressions(model)):
        scale = np.asarray(dec.scale.get_data())
        if scale.dtype != np.float16:
            raise NotExact(f"{dec.user.get_friendly_name()}: scale of type {scale.dtype}, not f16")
        key = dec.subtract.get_friendly_name()
        if key not in found:
            hit = candidates.get(scale[..., 0].tobytes())
            if hit is None:
                continue  # a type OpenVINO GenAI reads exactly (Q8_0, Q4_0, Q5_0's copy)
            name, w = hit
            if not np.array_equal(_weight_values(dec.weight), w.q):
                raise NotExact(f"{name}: the values OpenVINO GenAI built are not the file's")
            if w.kind == "Q8_0" and not _zero_point_is(np, dec, Q8_0_ZERO_POINT):
                raise NotExact(f"{name}: OpenVINO GenAI's Q8_0 zero point is not {Q8_0_ZERO_POINT}")
            found[key] = (name, w)
            names.discard(name)
            if w.kind in UNPACK:
                _exact_weight(ops, np, dec, w)
        name, w = found[key]
        as_op = q41_op and w.kind in OP_KINDS and dec.user.get_type_name() == "MatMul"
        op = _int8_op(np, dec.user, w) if as_op else None
        if op is None and w.kind == "Q8_0":
            continue  # read exactly as GenAI built it: a Gather (the tied embedding), or a MatMul of another layout
        done += 1
        out = dec.user.output(0)
        consumers = list(out.get_target_inputs())
        if op is not None:
            exact = op
        elif w.m is None:
            continue  # Q6_K left to OpenVINO: no minimum to add
        elif dec.user.get_type_name() == "Gather":
            exact = _gathered_minimum(ops, np, dec.user, out, w.m)
        else:
            x = dec.user.input(0).get_source_output()
            at = (x.get_node().get_friendly_name(), x.get_index())  # q/k/v and gate/up share one input: one S(x)
            if at not in sums:
                sums[at] = _block_sums(ops, np, x, w.m.shape[1])
            exact = ops.add(out, ops.matmul(sums[at], _minimums(ops, np, w.m), False, True))
        if op is None:
            exact.set_friendly_name(f"{dec.user.get_friendly_name()}/exact_minimum")
        for consumer in consumers:
            consumer.replace_source_output(exact.output(0))
    if names:
        raise NotExact(f"{len(names)} tensors of the GGUF not found in OpenVINO GenAI's model: {sorted(names)[:3]}")
    model.validate_nodes_and_infer_types()
    if q41_op and swiglu:
        fuse_swiglu(model)
    if q41_op and op_groups:
        group_ops(model, op_groups)
    if q41_op and interleave:
        interleave_q41(model)
    return done


def _gathered_minimum(ov_ops: Any, np: Any, gather: Any, out: Any, m: Any) -> Any:
    """An embedding lookup with its exact minimum: the rows of ``M`` gathered like the table's,
    added per block of 32."""
    blocks = m.shape[1]
    ids, axis = gather.input(1).get_source_output(), gather.input(2).get_source_output()
    mins = ov_ops.unsqueeze(ov_ops.gather(_minimums(ov_ops, np, m), ids, axis), ov_ops.constant(np.array([-1])))
    split = ov_ops.reshape(out, ov_ops.constant(np.array([0, 0, blocks, QK], dtype=np.int64)), special_zero=True)
    flat = ov_ops.constant(np.array([0, 0, blocks * QK], dtype=np.int64))
    return ov_ops.reshape(ov_ops.add(split, mins), flat, special_zero=True)


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


def build(
    src: str | Path,
    folder: str | Path,
    q41_op: bool = False,
    fused: bool = True,
    op_groups: tuple[int, ...] = OP_GROUP_SIZES,
    swiglu: bool = SWIGLU,
    interleave: bool = INTERLEAVE_Q41,
) -> int:
    """Write the exact IR of the GGUF ``src`` into ``folder`` (``openvino_model.xml``/``.bin`` and a
    link to ``src`` for the tokenizer), atomically: the folder appears complete or not at all.
    ``q41_op``: Q4_1 MatMuls as ``genmesh::Q41MatMul`` (the IR then needs the extension); ``fused``: the
    Q4_1 MatMuls of one input (q/k/v, gate/up) as one, and each with its minimums as a zero point
    (gguf_fuse.py; not with ``q41_op``; ``False`` keeps ``W x + M S(x)`` per matrix, the probes' baseline);
    ``op_groups`` (with ``q41_op``): the ``Q41MatMul`` ops of one input, where they are so many (3: q/k/v, 2:
    gate/up), as one op with an output per matrix (gguf_op_groups.py; ``()``: one op per matrix, the probe's
    baseline); ``swiglu`` (with ``q41_op``): a gated MLP's gate/up, SiLU and product as one ``Q41SwiGLU``
    (gguf_op_swiglu.py; ``False``, the default: the grouped gate/up and the plugin's SiLU and multiply);
    ``interleave`` (with ``q41_op``): the ``Q41MatMul`` ops as ``Q41X8MatMul`` (gguf_op_x8.py; the default).
    Returns how many MatMuls were rewritten."""
    import openvino as ov
    from gguf import GGUFReader

    from .gguf_copy import q5_0_as_q8_0_copy

    src, folder = Path(src).resolve(), Path(folder)
    reader = GGUFReader(str(src))
    ok, missing = covered(weight_types(reader))
    if not ok:
        raise NotExact(f"{src}: weight types {missing or 'none to rewrite'} are not covered by the exact form")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".part", dir=folder.parent))
    try:
        (work / "genai").mkdir()
        genai_src = src
        if set(weight_types(reader).values()) & COPIED_TYPES:
            genai_src = work / "q8_0-copy.gguf"
            q5_0_as_q8_0_copy(src, genai_src)
        genai_xml = _genai_ir(genai_src, work / "genai")
        core = ov.Core()
        model = core.read_model(str(genai_xml))
        done = rewrite(model, reader, q41_op, op_groups, swiglu, interleave)
        sampled_head = gather_before_head(model) if q41_op else False  # (gguf_op_head.py)
        fused_groups = fuse(model, zp=True) if fused and not q41_op else 0
        op_names = {*OP_KINDS.values(), TYPE_NAME}  # (Q4_1: Q41X8MatMul, or Q41MatMul without ``interleave``)
        grouped_ops = sum(op.get_type_name() in op_names and op.get_output_size() > 1 for op in model.get_ops())
        zero_point = in_zero_point_form(model)  # (Q4_1 only: gguf_fuse.KINDS)
        ops_written = {name: sum(op.get_type_name() == name for op in model.get_ops()) for name in op_names}
        swiglu_ops = sum(op.get_type_name() == SWIGLU_TYPE for op in model.get_ops())
        ov.save_model(model, str(work / IR_XML), compress_to_fp16=False)
        del model
        shutil.rmtree(work / "genai")
        (work / "q8_0-copy.gguf").unlink(missing_ok=True)
        (work / GGUF_LINK).symlink_to(src)
        (work / MARKER).write_text(
            json.dumps(
                {
                    "version": VERSION,
                    "source": str(src),
                    "rewritten_matmuls": done,
                    "fused_groups": fused_groups,
                    "minimums": "zero_point" if zero_point else "in_op" if any(ops_written.values()) else "block_sums",
                    "q41_matmul_ops": ops_written[TYPE_NAME] + ops_written[Q41_X8],
                    "q41_x8_ops": ops_written[Q41_X8],
                    "q41_op_groups": grouped_ops,
                    "q41_swiglu_ops": swiglu_ops,
                    "q4k_matmul_ops": ops_written["Q4KX8MatMul"],
                    "q6k_matmul_ops": ops_written["Q6KX8MatMul"],
                    "q80_matmul_ops": ops_written["Q80MatMul"],
                    "sampled_head": sampled_head,
                }
            )
        )
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
