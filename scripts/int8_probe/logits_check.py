"""Teacher-forced next-token log-probabilities of the probe's IRs against the unmodified exact IR: one prompt,
every position, f32 arithmetic, through ``ov.Core`` (the stateful IR as written, no GenAI pipeline). Run
probe.py first (it writes the IRs); then

    .venv/bin/python scripts/int8_probe/logits_check.py [--ir build/probe-all-avx2 ...]

The reference is the exact IR with f32 arithmetic and no dynamic quantization (DYNAMIC_QUANTIZATION_GROUP_SIZE 0:
what an AVX2 CPU computes). ``--ir probe-baseline --dq 32`` compares OpenVINO's own int8 path (VNNI CPUs).
``--reference`` takes another IR folder instead (read with the extension: two exact IRs with the ops, e.g. the
engine's cached ones of two branches), ``--tokenizer`` a GGUF for the text's ids; ``--logits`` adds the max
|delta| of the raw logits; ``--one-by-one`` feeds the text a token at a time (every matmul at M = 1, as decoding;
the prompt at once runs them at M = T).
Prints per IR: positions, median and max |delta logprob| of the reference's top token, top-1 agreement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TEXT = (
    "The sea covers about seventy percent of the Earth's surface. Its waves are driven by the wind, its tides by "
    "the Moon, and its currents carry heat from the equator towards the poles. Sailors have long read the sky "
    "and the water to find their way, and fishermen still follow the seasons of the shoals."
)


def all_logits(compiled: Any, ids: Any, one_by_one: bool = False) -> Any:
    """Every position's logits of a compiled stateful IR for one prompt ``ids`` [1, T] (a fresh request: empty
    state), f32 [1, T, vocab]; ``one_by_one``: the tokens fed one at a time through one request (its state carried,
    so every matmul runs at M = 1, as in decoding)."""
    import numpy as np

    t = ids.shape[1]
    if one_by_one:
        request = compiled.create_infer_request()
        rows = []
        for i in range(t):
            step = {
                "input_ids": ids[:, i : i + 1],
                "attention_mask": np.ones((1, i + 1), dtype=ids.dtype),
                "position_ids": np.array([[i]], dtype=np.int64),
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
            rows.append(np.asarray(request.infer(step)["logits"], dtype=np.float32))
        return np.concatenate(rows, axis=1)
    feed = {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "position_ids": np.arange(t, dtype=np.int64)[None, :],
        "beam_idx": np.zeros(1, dtype=np.int32),
    }
    return np.asarray(compiled.create_infer_request().infer(feed)["logits"], dtype=np.float32)


def logprobs(
    core: Any,
    xml: Path,
    ids: Any,
    python_op: bool,
    dq: int = 0,
    keep: list[Any] | None = None,
    one_by_one: bool = False,
) -> Any:
    """Every position's log-probabilities (fp64) of the IR ``xml``; its raw logits appended to ``keep`` if given;
    ``one_by_one`` as ``all_logits``'."""
    import numpy as np

    if python_op:
        from int8_probe.probe import python_op_class

        core.add_extension(python_op_class())
    model = core.read_model(str(xml))
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": dq}
    cm = core.compile_model(model, "CPU", config)
    logits = all_logits(cm, ids, one_by_one)[0].astype(np.float64)
    if keep is not None:
        keep.append(logits.copy())
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ir", action="append", default=[], help="IR folder (under build/ or absolute); repeatable")
    p.add_argument("--dq", type=int, default=0, help="DYNAMIC_QUANTIZATION_GROUP_SIZE of the compared IRs")
    p.add_argument("--python-op", action="store_true", help="evaluate the op with the Python (numpy) class")
    p.add_argument("--reference", help="IR folder to compare against (read with the extension); default the baseline")
    p.add_argument("--tokenizer", help="GGUF (or tokenizer.gguf) for the text's ids; default the baseline's")
    p.add_argument("--logits", action="store_true", help="also the max |delta| of the raw logits")
    p.add_argument("--one-by-one", action="store_true", help="feed the tokens one at a time (M = 1, as decoding)")
    a = p.parse_args()
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    from int8_probe import q41

    base = q41.BUILD / "probe-baseline"
    tokenizer = ov_genai.Tokenizer(a.tokenizer or str(base / "tokenizer.gguf"))
    ids = np.asarray(tokenizer.encode(TEXT).input_ids.data, dtype=np.int64)
    core = ov.Core()
    if not a.python_op:
        core.add_extension(str(q41.build_extension()))
    reference = Path(a.reference) / "openvino_model.xml" if a.reference else base / "openvino_model.xml"
    ref_logits: list[Any] = []
    ref = logprobs(core if a.reference else ov.Core(), reference, ids, False, keep=ref_logits, one_by_one=a.one_by_one)
    top = ref.argmax(axis=-1)
    for folder in a.ir or ["probe-1-auto", "probe-all-avx2"]:
        path = Path(folder) if Path(folder).is_absolute() else q41.BUILD / folder
        got_logits: list[Any] = []
        lp = logprobs(core, path / "openvino_model.xml", ids, a.python_op, a.dq, got_logits, a.one_by_one)
        delta = np.abs(lp[np.arange(len(top)), top] - ref[np.arange(len(top)), top])
        row = {"ir": path.name, "op": "python" if a.python_op else "c++", "dq": a.dq, "positions": len(top)}
        row.update(median_abs_dlogprob=round(float(np.median(delta)), 5), max_abs_dlogprob=round(float(delta.max()), 5))
        row.update(top1_agreement=round(float((lp.argmax(axis=-1) == top).mean()), 4))
        if a.logits:
            diff = np.abs(got_logits[0] - ref_logits[0])
            row.update(max_abs_dlogit=float(diff.max()), max_abs_logit=float(np.abs(ref_logits[0]).max()))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
