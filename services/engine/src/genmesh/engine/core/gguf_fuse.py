"""Fewer, larger nodes in the exact form: the Q4_1 MatMuls that read one input fused into one (issue 56, item 3).

In the exact form (gguf_exact.py) each Q4_1 MatMul is ``W x + M S(x)``: a compressed fully-connected (u4 values
times f16 block scales), a minimums MatMul over the block sums ``S(x)`` and an Add. A layer's q, k and v read one
input, as do its gate and up. ``fuse`` makes each such group one branch: values, scales and minimums concatenated
along N, then one ``VariadicSplit``, so the CPU plugin runs 4 fully-connected nodes per layer instead of 7 (on
SmolLM2: 421 -> 241 in the compiled model). The arithmetic is the same, row for row: in f32 the logits are
bit-identical to the unfused IR's; one stream decodes 1.12-1.22x faster on AMD Zen 4 (docs/int8-avx2.md, "Fewer
nodes"). Only branches with f16 scales and minimums (Q4_1) are rewritten by default (``KINDS``): Q4_K's (f32
scales ``d·sc``, minimums ``-dmin·m``) can be, and compute the same to 1.2e-4 on the Qwen 1.5B's logits in f32,
but measured even there (1.01x one stream: its decode is bound by memory, not by nodes), so they stay as they
are, as do Q6_K and the op's ``Q41MatMul``.

With ``zp`` (the exact form's default since gguf_exact.VERSION 4) every branch, fused or not, is one compressed
MatMul whose f32 zero point ``-m/d`` carries the minimums (``(q - z) d = d q + m``, ``zero_point_form``): no
``S(x)``, no minimums' MatMul, no Add (SmolLM2: 121 fully-connected nodes, 1.31-1.37x one stream and 1.20x at c=8
against the unfused form on Zen 4). Not exact to the bit: the f32 rounding of ``-m/d`` moves logits by up to 2e-4
in f32 (4e-5 nats); ``make eval`` is within the floor (docs/accuracy.md).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from .gguf_kquants import QK
from .ov_graph import input_node, u4_values


@dataclass
class Branch:
    """One exact-form Q4_1 MatMul: ``add = matmul(x, W) + minimum(S(x), M)``."""

    matmul: Any
    add: Any
    minimum: Any  # MatMul(S(x), Convert(M)), transpose_b
    codes: Any  # u4 Constant [n, blocks, 32]
    scale: Any  # Constant [n, blocks, 1]: f16 (Q4_1) or f32 (Q4_K: d·sc)
    mins: Any  # Constant [n, blocks]: f16 (read through a Convert) or f32 (Q4_K's -dmin·m, mostly)

    @property
    def kind(self) -> str:
        """``f16`` (Q4_1) or ``f32`` (Q4_K): only branches of one kind are fused together."""
        return str(self.scale.get_element_type().get_type_name())


def _kind(node: Any) -> str:
    return str(node.get_type_name())


def _branch(matmul: Any) -> Branch | None:
    """``matmul`` as an exact-form branch (``Convert(Reshape(Multiply(Convert(u4), f16)))`` weight, one Add
    consumer whose other input is the minimums' MatMul), else None."""
    attrs = matmul.get_attributes()
    if attrs.get("transpose_a") or not attrs.get("transpose_b"):
        return None
    conv = input_node(matmul, 1)
    reshape = input_node(conv, 0) if _kind(conv) == "Convert" else None
    mul = input_node(reshape, 0) if reshape is not None and _kind(reshape) == "Reshape" else None
    if mul is None or _kind(mul) != "Multiply":
        return None
    values, scale = input_node(mul, 0), input_node(mul, 1)
    if _kind(values) != "Convert" or _kind(scale) != "Constant":
        return None
    if (kind := scale.get_element_type().get_type_name()) not in ("f16", "f32"):
        return None
    codes = input_node(values, 0)
    if _kind(codes) != "Constant" or codes.get_element_type().get_type_name() != "u4":
        return None
    users = list(matmul.output(0).get_target_inputs())
    if len(users) != 1 or _kind(users[0].get_node()) != "Add":
        return None
    add = users[0].get_node()
    minimum = input_node(add, 1 - users[0].get_index())
    if _kind(minimum) != "MatMul":
        return None
    mins = input_node(minimum, 1)
    if _kind(mins) == "Convert":  # f16 minimums (Q4_1's; a Q4_K matrix's where all are f16 values)
        mins = input_node(mins, 0)
    if _kind(mins) != "Constant" or mins.get_element_type().get_type_name() not in ("f16", kind):
        return None
    return Branch(matmul, add, minimum, codes, scale, mins)


def groups(model: Any) -> list[list[Branch]]:
    """The exact-form branches of ``model`` grouped by their shared input (q/k/v: 3, gate/up: 2, o/down: 1)."""
    by_input: dict[tuple[str, int], list[Branch]] = collections.defaultdict(list)
    for op in model.get_ordered_ops():
        if _kind(op) != "MatMul":
            continue
        b = _branch(op)
        if b is not None:
            x = op.input(0).get_source_output()
            by_input[(x.get_node().get_friendly_name(), x.get_index())].append(b)
    return [sorted(group, key=_content_order) for group in by_input.values()]


def _content_order(b: Branch) -> tuple[int, str]:
    """A group's branches in an order of their own (larger first, then by the values' digest), not the graph's:
    OpenVINO GenAI writes its graph in another order on other CPUs, and the fused constants' bytes (pinned by
    fetch_model.py) must not follow it."""
    import hashlib

    import numpy as np

    return -int(b.codes.get_output_shape(0)[0]), hashlib.sha256(np.asarray(b.codes.get_data()).tobytes()).hexdigest()


ZERO_POINT = "zp"  # a branch in the zero-point form is named ``<MatMul>/zp<group size>``


def in_zero_point_form(model: Any) -> bool:
    """Whether ``fuse(zp=True)`` wrote any branch of ``model`` in the zero-point form."""
    return any(f"/{ZERO_POINT}" in op.get_friendly_name() for op in model.get_ops())


class NoZeroPoint(ValueError):
    """A branch that the zero-point form cannot carry exactly: it is written as ``W x + M S(x)``."""


def zero_point_form(q: Any, d: Any, m: Any) -> tuple[Any, Any]:
    """``(z, s)`` f32 with ``(q - z) * s == d q + m`` per block: ``z = -m / d``, ``s = d`` (a block with
    ``d = 0`` holds one value ``q0`` for all 32: ``z = q0 - 1``, ``s = m``). ``q`` [n, blocks, 32] (only read
    for ``d = 0`` blocks: may be None when there are none), ``d``, ``m`` [n, blocks]."""
    import numpy as np

    d32, m32 = np.asarray(d, np.float32), np.asarray(m, np.float32)
    zero = d32 == 0
    z = np.divide(-m32, d32, out=np.zeros_like(m32), where=~zero)
    s = d32.copy()
    if zero.any():
        q0 = q[..., 0]
        if not (q[zero] == q0[zero][:, None]).all():
            raise NoZeroPoint("a block with scale 0 and different values")
        z[zero] = q0[zero].astype(np.float32) - 1
        s[zero] = m32[zero]
    return z, s


def _rewrite(group: list[Branch], zp: bool) -> Any:
    """One branch for ``group`` (values, scales and minimums concatenated along N, a VariadicSplit after when
    there are several): ``W x + M S(x)`` as before, or (``zp``) one compressed MatMul whose f32 zero point
    ``-m/d`` carries the minimums (no ``S(x)``, no minimums' MatMul, no Add)."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    first = group[0]
    x = first.matmul.input(0).get_source_output()
    sums = first.minimum.input(0).get_source_output()
    sizes = [int(b.codes.get_output_shape(0)[0]) for b in group]
    n, blocks, qk = sum(sizes), *(int(d) for d in first.codes.get_output_shape(0)[1:])
    if qk != QK:  # (a group's branches share K and the block sums: ``_fusable``)
        raise ValueError(f"blocks of {qk} values, not {QK}")
    packed = np.concatenate([np.asarray(b.codes.get_data(), dtype=np.uint8).reshape(-1) for b in group])
    codes = ov.op.Constant(ov.Tensor(packed, ov.Shape([n, blocks, qk]), ov.Type.u4), shared_memory=False)
    half = first.kind == "f16"  # Q4_1: f16 scales and minimums; Q4_K: f32 (f16 minimums widened exactly)
    dtype = np.float16 if half else np.float32
    d = np.concatenate([np.asarray(b.scale.get_data(), dtype=dtype) for b in group])  # [n, blocks, 1]
    m = np.concatenate([np.asarray(b.mins.get_data(), dtype=dtype) for b in group])  # [n, blocks]
    shape = ops.constant(np.array([n, blocks * qk], dtype=np.int64))
    if zp:
        q = u4_values(packed, (n, blocks, qk)) if (d == 0).any() else None
        z, scale = zero_point_form(q, d[..., 0], m)
        if half:
            scale16 = scale.astype(np.float16)  # d or m: f16 values (the plugin holds an f32 copy)
            if not np.array_equal(scale16.astype(np.float32), scale):
                raise NoZeroPoint("a scale that is not an f16 value")
            s_node = ops.convert(ops.constant(scale16[..., None]), "f32")
        else:
            s_node = ops.constant(scale[..., None])
        w = ops.multiply(ops.subtract(ops.convert(codes, "f32"), ops.constant(z[..., None])), s_node)
        y = ops.matmul(x, ops.reshape(w, shape, False), False, True)
    elif half:
        w = ops.convert(ops.reshape(ops.multiply(ops.convert(codes, "f16"), ops.constant(d)), shape, False), "f32")
        y = ops.add(ops.matmul(x, w, False, True), ops.matmul(sums, ops.convert(ops.constant(m), "f32"), False, True))
    else:
        w = ops.reshape(ops.multiply(ops.convert(codes, "f32"), ops.constant(d)), shape, False)
        y = ops.add(ops.matmul(x, w, False, True), ops.matmul(sums, ops.constant(m), False, True))
    name = first.matmul.get_friendly_name()
    y.set_friendly_name(f"{name}/{ZERO_POINT if zp else 'exact_minimum'}{len(group)}")
    if len(group) == 1:
        first.add.output(0).replace(y.output(0))
        return y
    parts = ops.variadic_split(y, ops.constant(np.int64(-1)), ops.constant(np.array(sizes, dtype=np.int64)))
    parts.set_friendly_name(f"{name}/fused{len(group)}/split")
    for i, b in enumerate(group):
        b.add.output(0).replace(parts.output(i))
    return parts


def _fusable(group: list[Branch]) -> bool:
    """The branches share K, the block sums and their kind (what ``_rewrite`` concatenates along N)."""
    first = group[0]
    k = tuple(first.codes.get_output_shape(0)[1:])
    sums = first.minimum.input(0).get_source_output()
    return all(
        tuple(b.codes.get_output_shape(0)[1:]) == k
        and b.minimum.input(0).get_source_output() == sums
        and b.kind == first.kind
        for b in group
    )


FUSED_SIZES = (2, 3)  # gate/up, q/k/v


KINDS = ("f16",)  # Q4_1 only: Q4_K (f32) measured even on the Qwen 1.5B (1.01x at c=1, docs/int8-avx2.md)


def fuse(model: Any, sizes: tuple[int, ...] = FUSED_SIZES, zp: bool = False, kinds: tuple[str, ...] = KINDS) -> int:
    """Fuse, in place, every group of ``sizes`` branches of ``kinds`` sharing one input (``zp``: and write every
    such branch in the zero-point form). Returns how many groups were fused."""
    done = 0
    for found in groups(model):
        group = [b for b in found if b.kind in kinds]
        if len(group) in sizes and _fusable(group):
            _rewrite_or_keep_minimums(group, zp)
            done += 1
        elif zp:
            for branch in group:
                _rewrite_or_keep_minimums([branch], zp)
    model.validate_nodes_and_infer_types()
    return done


def _rewrite_or_keep_minimums(group: list[Branch], zp: bool) -> None:
    """``_rewrite``, keeping ``W x + M S(x)`` where the zero-point form cannot be exact (a Q4_K block whose
    scale is 0 and whose values differ: its weights are all ``m``, which no ``(q - z) s`` gives)."""
    try:
        _rewrite(group, zp)
    except NoZeroPoint:
        if not zp:
            raise
        _rewrite(group, False)
