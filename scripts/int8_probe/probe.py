"""Issue 56's probe: can OpenVINO GenAI's ContinuousBatchingPipeline run a model with a custom operation built
from this repository? One command:

    .venv/bin/python scripts/int8_probe/probe.py [--layers 1|all] [--max-cpu-isa AVX2]

It builds the ``Q41MatMul`` extension (q41_matmul.cpp, cmake, ~10 s), replaces ``--layers`` of the exact IR's
Q4_1 matmuls (``W x + M S(x)``) with the op over the same Q4_1 blocks, saves that IR, and runs each case in a
subprocess of its own (a fresh ``ov::Core``): the unmodified IR (baseline), the custom-op IR through
ContinuousBatchingPipeline without the extension (it should fail), with the C++ extension passed as the
``extensions`` property, through LLMPipeline the same way, and with a Python ``openvino.Op`` (numpy evaluate())
instead of the C++ library. Each prints one JSON line: load time, greedy text, decode speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PROMPT = "Write a short poem about the sea."
NEW_TOKENS = 48
CASES = ("baseline", "cb-no-extension", "cb-extension", "llm-extension", "cb-python-op")


def exact_ir() -> Path:
    """The default model's exact IR with each Q4_1 MatMul as ``W x + M S(x)`` (``<MatMul>/exact_minimum``),
    not fused and without the zero-point form the engine now serves: built once under scripts/build/
    (fuse_probe.exact_ir), whatever the GGUF cache holds."""
    from fuse_probe import exact_ir as unfused

    return unfused()


def prepare(layers: str, kernel: str) -> tuple[Path, Path, int]:
    """(baseline folder, custom-op folder, matmuls replaced): IR folders under build/ with the tokenizer."""
    import openvino as ov

    from genmesh.engine.core.gguf_tokenizer import tokenizer_gguf
    from int8_probe import q41

    src = exact_ir()
    out = q41.BUILD / f"probe-{layers}-{kernel}"
    base = q41.BUILD / "probe-baseline"
    for folder in (out, base):
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer_gguf((src.parent / "model.gguf").resolve(), folder)
    for suffix in (".xml", ".bin"):
        link = base / f"openvino_model{suffix}"
        if not link.exists():
            link.symlink_to(src.with_suffix(suffix))
    model = ov.Core().read_model(str(src))
    done = q41.replace_matmuls(model, None if layers == "all" else int(layers), kernel)
    ov.save_model(model, str(out / "openvino_model.xml"), compress_to_fp16=False)
    return base, out, len(done)


def python_op_class() -> Any:
    """A Python ``openvino.Op`` of the same type, whose evaluate() runs the fp64 reference in numpy."""
    import numpy as np

    from int8_probe import q41

    class Q41MatMulPython(q41.Q41MatMulStandIn):
        def clone_with_new_inputs(self, new_inputs: list[Any]) -> Any:
            return Q41MatMulPython(new_inputs, self._kernel)

        def has_evaluate(self) -> bool:
            return True

        def evaluate(self, outputs: Any, inputs: Any) -> bool:
            x, blocks = inputs[0].data, inputs[1].data
            y = q41.reference(x, blocks).astype(np.float32).reshape(*x.shape[:-1], blocks.shape[0])
            outputs[0].shape = y.shape
            outputs[0].data[:] = y
            return True

    return Q41MatMulPython


def run_case(case: str, folder: Path, precision: str, threads: int) -> dict[str, Any]:
    import openvino_genai as ov_genai

    from int8_probe import q41

    # no dynamic quantization: the f32 arithmetic an AVX2 CPU runs (the op quantises its own activations)
    props: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": precision,
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
    }
    if case in ("cb-extension", "llm-extension"):
        props["extensions"] = [str(q41.build_extension())]
    elif case == "cb-python-op":
        props["extensions"] = [python_op_class()]
    tokenizer = ov_genai.Tokenizer(str(folder / "tokenizer.gguf"))
    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens = NEW_TOKENS
    gc.min_new_tokens = NEW_TOKENS
    gc.do_sample = False
    result: dict[str, Any] = {"case": case, "folder": folder.name, "precision": precision}
    started = time.monotonic()
    try:
        if case.startswith("llm"):
            pipe: Any = ov_genai.LLMPipeline(str(folder), tokenizer, "CPU", **props)
        else:
            sc = ov_genai.SchedulerConfig()
            sc.cache_size = 1
            pipe = ov_genai.ContinuousBatchingPipeline(str(folder), tokenizer, sc, "CPU", **props)
        result["load_s"] = round(time.monotonic() - started, 2)
        pipe.generate(PROMPT, gc) if case.startswith("llm") else pipe.generate([PROMPT], [gc])  # warm-up
        started, cpu = time.monotonic(), time.process_time()
        if case.startswith("llm"):
            text = str(pipe.generate(PROMPT, gc))
        else:
            text = pipe.generate([PROMPT], [gc])[0].m_generation_ids[0]
        took, cpu = time.monotonic() - started, time.process_time() - cpu
    except Exception as exc:  # the probe records what fails, and how
        result.update(ok=False, error=str(exc).strip().splitlines()[:6])
        return result
    result.update(ok=True, text=text, generate_s=round(took, 3), tok_per_s=round(NEW_TOKENS / took, 1))
    result["cpu_ms_per_token"] = round(cpu * 1e3 / NEW_TOKENS, 2)  # steadier than wall time on a shared machine
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="1", help="how many Q4_1 matmuls to replace: a number or 'all'")
    p.add_argument("--kernel", default="auto", choices=("auto", "avx2", "scalar"), help="the op's kernel")
    p.add_argument("--max-cpu-isa", default=None, help="ONEDNN_MAX_CPU_ISA for every case, e.g. AVX2")
    p.add_argument("--precision", default="f32", help="INFERENCE_PRECISION_HINT (f32: the op's own arithmetic)")
    p.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.case:
        print(json.dumps(run_case(a.case, Path(a.folder), a.precision, a.threads)), flush=True)
        return
    from int8_probe import q41

    q41.build_extension()
    base, custom, replaced = prepare(a.layers, a.kernel)
    print(json.dumps({"replaced_matmuls": replaced, "ir": str(custom), "max_cpu_isa": a.max_cpu_isa}), flush=True)
    env = dict(os.environ)
    if a.max_cpu_isa:
        env["ONEDNN_MAX_CPU_ISA"] = a.max_cpu_isa
    for case in a.cases.split(","):
        folder = base if case == "baseline" else custom
        cmd = [sys.executable, __file__, "--case", case, "--folder", str(folder), "--precision", a.precision]
        cmd += ["--threads", str(a.threads)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if lines:
            print(lines[-1], flush=True)
        else:
            tail = proc.stderr.strip().splitlines()[-6:]
            print(json.dumps({"case": case, "ok": False, "returncode": proc.returncode, "stderr": tail}), flush=True)


if __name__ == "__main__":
    main()
