"""One fully connected layer in two weight forms, timed at 1, 8 and 32 rows (docs/accuracy.md, "The exact
compressed form"): F16 weights (which the CPU plugin runs as f32 on a CPU without f16 arithmetic) against u4
weights with an f32 scale per block of 32 and no zero point (the exact form's matmul). Random weights: this
measures the kernels, not the model.

    .venv/bin/python scripts/fc_form_probe.py --in 576 --out 1536 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import openvino as ov
import openvino.opset13 as op

GROUP = 32


def layer(form: str, k: int, n: int) -> ov.Model:
    x = op.parameter([-1, k], np.float32, name="x")
    rng = np.random.default_rng(0)
    if form == "f16":
        w = op.convert(op.constant(rng.standard_normal((n, k)).astype(np.float16)), np.float32)
    else:
        q = rng.integers(0, 16, (n, k // GROUP, GROUP)).astype(np.uint8)
        codes = ov.op.Constant(ov.Type.u4, ov.Shape([n, k // GROUP, GROUP]), q.flatten().tolist())
        scale = op.constant(rng.random((n, k // GROUP, 1)).astype(np.float32))
        w = op.multiply(op.convert(codes, np.float32), scale)
        w = op.reshape(w, op.constant(np.array([n, k], dtype=np.int64)), False)
    return ov.Model([op.matmul(x, w, False, True)], [x])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--in", dest="k", type=int, default=576, help="input width (a multiple of 32)")
    p.add_argument("--out", dest="n", type=int, default=1536, help="output width")
    p.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS")
    a = p.parse_args()
    core = ov.Core()
    for form in ("f16", "u4"):
        compiled = core.compile_model(layer(form, a.k, a.n), "CPU", {"INFERENCE_NUM_THREADS": a.threads})
        request, cells = compiled.create_infer_request(), []
        for m in (1, 8, 32):
            x = np.random.default_rng(1).random((m, a.k), dtype=np.float32)
            for _ in range(5):
                request.infer([x])
            calls, started = max(10, 200 // m), time.perf_counter()
            for _ in range(calls):
                request.infer([x])
            cells.append(f"M={m}: {(time.perf_counter() - started) / calls * 1e3:.3f} ms")
        print(f"{form:4} {a.k} -> {a.n}, {a.threads} threads: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
