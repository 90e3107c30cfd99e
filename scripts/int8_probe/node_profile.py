"""Where one decode step of a served IR goes, node type by node type, as the continuous-batching pipeline runs it:
the IR (the engine's cached folder, ``~/.cache/genmesh/<model>-<hash>``) read with the int8 extension, turned into
its PagedAttention form by the transformation OpenVINO GenAI applies, compiled for the CPU (f32, two threads, the
plugin's per-node counters on), one sequence's prompt of ``--context`` tokens, then ``--steps`` steps of one token.

    .venv/bin/python scripts/int8_probe/node_profile.py ~/.cache/genmesh/SmolLM2-135M-Instruct.Q4_1-<hash> \
        [--context 150] [--steps 60] [--max-cpu-isa AVX2]

``--max-cpu-isa AVX2`` caps oneDNN as ``GENMESH_ENGINE_MAX_CPU_ISA`` does in the engine (what an AVX2 CPU runs).
The plugin's counters are averages over a request's calls, so the prompt runs on a request of its own (sharing the
cache tensors) and the first ``--warm`` steps are taken out. Prints the step's median wall time, the split (the
genmesh ops, PagedAttention, every other node, and outside the nodes: the graph's walk and the request's inputs),
then the node types by time. The engine adds its scheduler, sampler and Python to the wall time (its TPOT).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BLOCK = 32  # tokens per KV-cache block of the CPU plugin
BLOCKS = 128  # blocks in the probe's cache (4,096 tokens)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ir", type=Path, help="an IR folder (openvino_model.xml) or the .xml itself")
    p.add_argument("--context", type=int, default=150, help="prompt tokens before the decode steps")
    p.add_argument("--steps", type=int, default=60, help="decode steps, the warm ones included")
    p.add_argument("--warm", type=int, default=8, help="decode steps left out of the figures")
    p.add_argument("--max-cpu-isa", default="", help="cap oneDNN (ONEDNN_MAX_CPU_ISA), e.g. AVX2")
    p.add_argument("--top", type=int, default=12, help="node types listed")
    args = p.parse_args()
    if args.context + args.steps > BLOCK * BLOCKS or args.steps <= args.warm:
        p.error(f"need context + steps <= {BLOCK * BLOCKS} and steps > warm")
    if args.max_cpu_isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.max_cpu_isa  # before OpenVINO loads oneDNN
    xml = args.ir / "openvino_model.xml" if args.ir.is_dir() else args.ir
    profile(xml, args.context, args.steps, args.warm, args.top)


def profile(xml: Path, context: int, steps: int, warm: int, top: int) -> None:
    import numpy as np
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from int8_probe import q41

    core = ov.Core()
    core.add_extension(str(q41.build_extension()))
    model = core.read_model(str(xml))
    paged_attention_transformation(model)
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "PERF_COUNT": True}
    compiled = core.compile_model(model, "CPU", config)
    prompt_request, request = compiled.create_infer_request(), compiled.create_infer_request()
    types = {i.get_any_name(): i.get_element_type() for i in compiled.inputs}
    for port in compiled.inputs:
        if "cache" in port.get_any_name():  # key_cache.N / value_cache.N [blocks, kv heads, BLOCK, head size]
            shape = [BLOCKS] + [d.get_length() for d in list(port.get_partial_shape())[1:]]
            cache = ov.Tensor(port.get_element_type(), shape)
            prompt_request.set_tensor(port.get_any_name(), cache)
            request.set_tensor(port.get_any_name(), cache)

    def run(req: Any, ids: list[int], past: int) -> None:
        tokens, length = len(ids), past + len(ids)
        blocks = (length + BLOCK - 1) // BLOCK
        feed = {
            "input_ids": np.array(ids),
            "position_ids": np.arange(past, length),
            "sampled_tokens_indices": np.array([tokens - 1]),
            "max_context_len": np.array(length),
            "past_lens": np.array([past]),
            "subsequence_begins": np.array([0, tokens]),
            "block_indices_begins": np.array([0, blocks]),
            "block_indices": np.arange(blocks),
        }
        req.infer({k: v.astype(np.int64 if types[k] == ov.Type.i64 else np.int32) for k, v in feed.items()})

    def totals(calls: int) -> collections.Counter[tuple[str, str]]:
        out: collections.Counter[tuple[str, str]] = collections.Counter()
        for info in request.profiling_info:
            if info.status == info.Status.EXECUTED:
                out[(info.node_type, info.exec_type)] += info.real_time.total_seconds() * calls
        return out

    run(prompt_request, list(range(1000, 1000 + context)), 0)
    walls, before = [], collections.Counter[tuple[str, str]]()
    for i in range(steps):
        t = time.perf_counter()
        run(request, [1234], context + i)
        walls.append(time.perf_counter() - t)
        if i + 1 == warm:
            before = totals(warm)
    after, n = totals(steps), steps - warm
    per_step = {k: (after[k] - before.get(k, 0.0)) / n * 1e3 for k in after}  # ms
    nodes = collections.Counter(
        (info.node_type, info.exec_type) for info in request.profiling_info if info.status == info.Status.EXECUTED
    )
    wall = statistics.median(walls[warm:]) * 1e3
    ops = sum(v for k, v in per_step.items() if k[0] == "Reference")
    attention = sum(v for k, v in per_step.items() if k[0] == "PagedAttentionExtension")
    other = sum(per_step.values()) - ops - attention
    print(f"{xml.parent.name}: context {context}, {n} decode steps; wall per step (median) {wall:.2f} ms")
    for name, ms in [
        ("genmesh ops (Reference)", ops),
        ("PagedAttention", attention),
        ("other nodes", other),
        ("outside the nodes", wall - ops - attention - other),
    ]:
        print(f"  {name:26s} {ms:7.3f} ms  {ms / wall:6.1%}")
    for (kind, impl), ms in sorted(per_step.items(), key=lambda kv: -kv[1])[:top]:
        count = nodes[(kind, impl)]
        print(f"  {kind + ' ' + impl:44s} {ms:7.3f} ms  {count:4d} nodes  {ms / count * 1e3:7.1f} us a node")


if __name__ == "__main__":
    main()
