"""One fully connected layer over the same Q4_1 blocks, timed through OpenVINO at several row counts: the exact
form as the engine runs it today (u4 values x f16 scale per block, plus ``M S(x)``: docs/accuracy.md) against
the ``Q41MatMul`` custom op (int8 activations, AVX2 ``maddubs``), and the exact form's zero-point layer
(``exact-zp``: one compressed MatMul with an f32 zero point, the engine's exact form since its VERSION 4).
Random blocks: this measures the kernels. ``--format q4k``: Q4_K blocks instead (the Qwen 1.5B's matrices): the
exact form's Q4_K layer (u4 values x the f32 scale ``d*sc`` per 32, plus ``M S(x)``, ``exact-dq*``) against
``Q4KMatMul`` (int8 activations per 256) and ``Q4KX8MatMul`` (the same blocks interleaved eight rows at a time:
the engine's form); ``--format q6k``: Q6_K blocks, the exact form's Q6_K layer (i8 values
``q - 32`` x the f32 scale ``d*sc`` per 16) against ``Q6KMatMul``; ``--format q80``: Q8_0 blocks (SmolLM2's tied
output matrix, 576 -> 49,152), OpenVINO GenAI's Q8_0 layer (u8 values, zero point 128, f16 d per 32) against
``Q80MatMul`` (int8 activations per 32).

    .venv/bin/python scripts/int8_probe/bench_layer.py --shape 576x1536 --shape 1536x8960 --rows 1,32 \
        --threads 2 [--max-cpu-isa AVX2] [--format q4k|q6k|q80]

Each row of output: form, shape, rows, the median and the best of ``--reps`` interleaved rounds (ms per
inference, Python's call overhead included: the ``noop`` form is that overhead alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def exact_layer(ov: Any, ops: Any, np: Any, q: Any, d: Any, m: Any) -> Any:
    """The exact IR's Q4_1 matmul: ``x (Convert(u4 q) * d)^T + S(x) M^T`` (gguf_exact.py's form; with an f32 ``d``
    and ``m``, its Q4_K matmul: ``Convert(u4 q)`` to f32 times the exact scale ``d*sc``)."""
    n, nb, qk = q.shape
    x = ops.parameter([-1, -1, nb * qk], np.float32, name="x")
    flat = q.reshape(-1)
    packed = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)  # OpenVINO's u4: element 2k in the low nibble
    codes = ov.op.Constant(ov.Tensor(packed, ov.Shape([n, nb, qk]), ov.Type.u4), shared_memory=False)
    w = ops.multiply(ops.convert(codes, d.dtype), ops.constant(d[..., None]))
    w = ops.convert(ops.reshape(w, ops.constant(np.array([n, nb * qk], dtype=np.int64)), False), np.float32)
    main = ops.matmul(x, w, False, True)
    sums = ops.reduce_sum(
        ops.reshape(x, ops.constant(np.array([0, 0, nb, qk], dtype=np.int64)), special_zero=True),
        ops.constant(np.array([-1])),
        False,
    )
    minimum = ops.matmul(sums, ops.convert(ops.constant(m), np.float32), False, True)
    return ov.Model([ops.add(main, minimum)], [x])


def zero_point_layer(ov: Any, ops: Any, np: Any, q: Any, d: Any, m: Any) -> Any:
    """The exact form's zero-point layer (``gguf_exact.VERSION`` 4): ``exact_layer`` rewritten by the engine's own
    ``gguf_fuse.fuse(zp=True)`` into one compressed MatMul ``x ((Convert(u4 q) - z) * d)^T``, ``z = -m/d``."""
    from genmesh.engine.core.gguf_fuse import fuse

    model = exact_layer(ov, ops, np, q, d, m)
    fuse(model, zp=True)
    return model


def q6k_layer(ov: Any, ops: Any, np: Any, q: Any, scale: Any) -> Any:
    """The exact IR's Q6_K matmul: ``x (Convert(i8 q - 32) * d*sc)^T``, per 16 (gguf_exact.py's form)."""
    n, nb, group = q.shape
    x = ops.parameter([-1, -1, nb * group], np.float32, name="x")
    w = ops.multiply(ops.convert(ops.constant(q), np.float32), ops.constant(scale[..., None]))
    w = ops.reshape(w, ops.constant(np.array([n, nb * group], dtype=np.int64)), False)
    return ov.Model([ops.matmul(x, w, False, True)], [x])


def q8_0_layer(ov: Any, ops: Any, np: Any, blocks: Any) -> Any:
    """A Q8_0 matmul as OpenVINO GenAI builds it (and the exact form keeps it): ``x ((Convert(u8 q + 128) -
    Convert(u8 128)) * f16 d)^T``, per 32."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, 34)
    nb = b.shape[1]
    x = ops.parameter([-1, -1, nb * 32], np.float32, name="x")
    values = ops.constant((b[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8))
    zero = ops.constant(np.full((n, nb, 1), 128, np.uint8))
    d = ops.constant(np.ascontiguousarray(b[..., 0:2]).view(np.float16))
    w = ops.multiply(ops.subtract(ops.convert(values, np.float16), ops.convert(zero, np.float16)), d)
    w = ops.convert(ops.reshape(w, ops.constant(np.array([n, nb * 32], dtype=np.int64)), False), np.float32)
    return ov.Model([ops.matmul(x, w, False, True)], [x])


def kquant_blocks(rng: Any, kind: str, n: int, k: int) -> Any:
    """Random blocks [n, k/256 * bytes] of ``kind`` (ggml's block_q4_K or block_q6_K): random bytes (every pattern
    is a valid block: scales, minimums, values) with f16 d (and Q4_K's dmin) of a trained model's size."""
    import numpy as np

    from genmesh.engine.native.q41_op import K_OPS

    b = rng.integers(0, 256, (n, k // 256, K_OPS[kind][1]), dtype=np.uint8)
    scale = (rng.random((n, k // 256, 1)) * 4e-3 + 1e-4).astype(np.float16).view(np.uint8)
    if kind == "Q6_K":
        b[..., 208:210] = (scale.view(np.float16) / 16).view(np.uint8)  # int8 scales up to 127
    else:
        b[..., 0:2] = scale
        b[..., 2:4] = (rng.random((n, k // 256, 1)) * 4e-3).astype(np.float16).view(np.uint8)
    return b.reshape(n, -1)


def q8_0_blocks(rng: Any, n: int, k: int) -> Any:
    """Random blocks [n, k/32 * 34] in ggml's block_q8_0 layout: random int8 values (every byte, -128 included)
    with an f16 d of a trained model's size."""
    import numpy as np

    b = rng.integers(0, 256, (n, k // 32, 34), dtype=np.uint8)
    b[..., 0:2] = (rng.random((n, k // 32, 1)) * 4e-4 + 1e-5).astype(np.float16).view(np.uint8)
    return b.reshape(n, -1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", action="append", help="KxN (inputs x outputs); repeatable", default=[])
    p.add_argument("--rows", default="1,32", help="comma-separated row counts M")
    p.add_argument(
        "--format", choices=("q41", "q4k", "q6k", "q80"), default="q41", help="the blocks: Q4_1, Q4_K, Q6_K, Q8_0"
    )
    p.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS")
    p.add_argument("--reps", type=int, default=7, help="interleaved rounds")
    p.add_argument("--budget-ms", type=float, default=150.0, help="time per form per round")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time; cpu: the process's CPU time (steadier on a shared machine; with --threads 1)",
    )
    p.add_argument("--max-cpu-isa", default=None, help="ONEDNN_MAX_CPU_ISA (set before OpenVINO loads)")
    p.add_argument(
        "--library",
        default=None,
        help="the extension to time (e.g. a copy of an earlier build); default: the engine's, built from the sources",
    )
    a = p.parse_args()
    if a.max_cpu_isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = a.max_cpu_isa
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    from genmesh.engine.core.gguf_kquants import UNPACK
    from genmesh.engine.native.q41_op import kquant_matmul, pack_q4k_x8, x8_matmul
    from int8_probe import q41

    core = ov.Core()
    core.add_extension(a.library or str(q41.build_extension()))
    base = {"INFERENCE_NUM_THREADS": a.threads, "INFERENCE_PRECISION_HINT": "f32"}
    rng = np.random.default_rng(0)
    shapes = a.shape or ["576x1536", "1536x8960"]
    for shape in shapes:
        k, n = (int(v) for v in shape.split("x"))
        kind = {"q4k": "Q4_K", "q6k": "Q6_K", "q80": "Q8_0"}.get(a.format, "")
        if kind == "Q8_0":
            blocks = q8_0_blocks(rng, n, k)
            b = blocks.reshape(n, -1, 34)
            q = b[..., 2:].view(np.int8)
            d, m = np.ascontiguousarray(b[..., 0:2]).view(np.float16)[..., 0], np.zeros((n, k // 32), np.float32)
        elif kind:
            blocks = kquant_blocks(rng, kind, n, k)
            w = UNPACK[kind](blocks)
            q, d, m = w.q, w.scale, w.m
            if m is None:  # Q6_K: (q - 32) * d*sc per 16, no minimum
                q, m = q.astype(np.int8) - np.int8(32), np.zeros(d.shape, np.float32)
        else:
            q = rng.integers(0, 16, (n, k // 32, 32)).astype(np.uint8)
            d = (rng.random((n, k // 32)) * 0.02 + 0.001).astype(np.float16)
            m = (-8 * d.astype(np.float32) * (0.5 + rng.random((n, k // 32)))).astype(np.float16)
            blocks = q41.pack_blocks(q, d, m)
        weights = (d.astype(np.float64)[..., None] * q + m.astype(np.float64)[..., None]).reshape(n, k)
        x = ops.parameter([-1, -1, k], np.float32)
        forms: dict[str, Any] = {}
        # Under ONEDNN_MAX_CPU_ISA=AVX2 on a VNNI CPU, OpenVINO 2026.4's dynamic quantization returns an empty
        # [0, 0, N] output (measured on Zen 4): only dq0 there, which is what an AVX2-only CPU runs anyway.
        for dq in (0,) if a.max_cpu_isa == "AVX2" else (0, 32):
            if a.format == "q80":
                layer = q8_0_layer(ov, ops, np, blocks)
            elif a.format == "q6k":
                layer = q6k_layer(ov, ops, np, q, d)
            else:
                layer = exact_layer(ov, ops, np, q, d, m)
            forms[f"exact-dq{dq}"] = core.compile_model(layer, "CPU", {**base, "DYNAMIC_QUANTIZATION_GROUP_SIZE": dq})
            if a.format == "q41":  # (the engine writes Q4_K as exact_layer: gguf_fuse.KINDS)
                forms[f"exact-zp-dq{dq}"] = core.compile_model(
                    zero_point_layer(ov, ops, np, q, d, m), "CPU", {**base, "DYNAMIC_QUANTIZATION_GROUP_SIZE": dq}
                )
        for kernel in ("avx2", "scalar"):
            xo = x.output(0)
            op = kquant_matmul(kind, xo, blocks, kernel) if kind else q41.q41_matmul(xo, blocks, kernel)
            model = ov.Model([op.output(0)], [x])
            forms[f"{a.format}-{kernel}"] = core.compile_model(q41.through_ir(core, model), "CPU", base)
            if kind == "Q4_K":  # the form the exact IR writes: the blocks interleaved eight rows at a time
                x8 = ov.Model([x8_matmul("Q4_K", xo, pack_q4k_x8(blocks), kernel).output(0)], [x])
                forms[f"q4kx8-{kernel}"] = core.compile_model(q41.through_ir(core, x8), "CPU", base)
        y = ops.parameter([-1, -1, k], np.float32)
        forms["noop"] = core.compile_model(ov.Model([ops.relu(y)], [y]), "CPU", base)
        for rows in (int(r) for r in a.rows.split(",")):
            xv = rng.standard_normal((1, rows, k)).astype(np.float32)
            requests = {name: cm.create_infer_request() for name, cm in forms.items()}
            ref = xv.reshape(rows, k).astype(np.float64) @ weights.T
            errors = {}
            for name, req in requests.items():
                out = req.infer({0: xv})[0].reshape(rows, -1)
                if name != "noop":
                    errors[name] = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
            times: dict[str, list[float]] = {name: [] for name in requests}
            clock = time.perf_counter if a.clock == "wall" else time.process_time
            for _ in range(a.reps):
                for name, req in requests.items():
                    calls, started = 0, clock()
                    while (clock() - started) * 1e3 < a.budget_ms or calls < 3:
                        req.infer({0: xv})
                        calls += 1
                    times[name].append((clock() - started) * 1e3 / calls)
            for name, ts in times.items():
                row = {"form": name, "shape": shape, "rows": rows, "median_ms": round(statistics.median(ts), 4)}
                row.update(best_ms=round(min(ts), 4), rel_err_vs_fp64=errors.get(name), clock=a.clock)
                row.update(isa=a.max_cpu_isa or "native", threads=a.threads)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
