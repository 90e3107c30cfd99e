"""The fused-matmul probe (scripts/fuse_probe.py, issue 56 item 3): q/k/v and gate/up of the exact IR fused into
one MatMul each, and the minimums carried by an f32 zero point, compute the unfused IR's logits with fewer
compiled nodes.

The exact IR is the engine's (the GGUF cache; built once when missing, as an engine start would).
"""

from __future__ import annotations

import numpy as np
import openvino as ov

import fuse_probe

IDS = np.array([[1, 504, 3303, 9043, 563, 1488, 8891, 282]], dtype=np.int64)


def fully_connected(compiled: ov.CompiledModel) -> int:
    types = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()]
    return types.count("FullyConnected")


def test_fused_and_zero_point_forms_give_the_unfused_logits_with_fewer_nodes() -> None:
    xml = str(fuse_probe.exact_ir())
    core = ov.Core()
    ref_model = core.compile_model(core.read_model(xml), "CPU", fuse_probe.F32)
    ref = fuse_probe.logits(ref_model, IDS)
    assert ref.shape == (1, IDS.shape[1], ref.shape[-1])
    for zp, tolerance, fc_fewer in ((False, 1e-4, 30 * (6 - 2) + 30 * (4 - 2)), (True, 2e-3, 421 - 121)):
        model = core.read_model(xml)
        sizes = [len(g) for g in fuse_probe.groups(model)]
        assert sizes.count(3) == sizes.count(2) == 30  # SmolLM2: 30 layers of q/k/v and gate/up
        assert fuse_probe.fuse(model, (2, 3), zp) == 60
        compiled = core.compile_model(model, "CPU", fuse_probe.F32)
        got = fuse_probe.logits(compiled, IDS)
        # measured: 0.0 fused (each output column's dot product is unchanged), 2e-4 with the zero point
        assert float(np.abs(got - ref).max()) <= tolerance, zp
        assert (got.argmax(-1) == ref.argmax(-1)).all()
        assert fully_connected(ref_model) - fully_connected(compiled) == fc_fewer


def test_zero_point_form_is_the_blocks_values() -> None:
    rng = np.random.default_rng(0)
    q = rng.integers(0, 16, (4, 3, 32)).astype(np.uint8)
    d = (rng.random((4, 3)) * 0.01).astype(np.float16)
    m = (-8 * d.astype(np.float32) + 0.001).astype(np.float16)
    d[1, 2], q[1, 2] = 0, 5  # a constant block: d = 0, every value m
    d[2, 0], q[2, 0], m[2, 0] = 0, 0, 0.25
    z, s = fuse_probe.zero_point_form(q, d, m)
    want = d.astype(np.float64)[..., None] * q + m.astype(np.float64)[..., None]
    got = (q.astype(np.float32) - z[..., None]) * s[..., None]
    assert np.isfinite(z).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    assert got[1, 2].tolist() == [float(m[1, 2])] * 32
    assert got[2, 0].tolist() == [0.25] * 32
