"""Where one decode step of a served IR goes, node type by node type, as the continuous-batching pipeline runs it:
the IR (the engine's cached folder, ``~/.cache/genmesh/<model>-<hash>``) read with the int8 extension, turned into
its PagedAttention form by the transformation OpenVINO GenAI applies, compiled for the CPU (f32, two threads, the
plugin's per-node counters on), one sequence's prompt of ``--context`` tokens, then ``--steps`` steps of one token.

    .venv/bin/python scripts/int8_probe/node_profile.py ~/.cache/genmesh/SmolLM2-135M-Instruct.Q4_1-<hash> \
        [--context 150] [--steps 60] [--streams 1] [--max-cpu-isa AVX2]

``--max-cpu-isa AVX2`` caps oneDNN as ``GENMESH_ENGINE_MAX_CPU_ISA`` does in the engine (what an AVX2 CPU runs).
The plugin's counters are averages over the calls of every request of the compiled model (one graph), so each
step's time is the change of average times calls, and the first ``--warm`` steps are taken out. Prints the step's
median wall time, the split (the genmesh ops, PagedAttention, every other node, and outside the nodes: the graph's
walk and the request's inputs), then the node types by time. ``--streams N`` decodes N sequences together (each its
own prompt of ``--context`` tokens), a step of N tokens as the pipeline batches them at concurrency N. The engine
adds its scheduler, sampler and Python to the wall time (its TPOT).
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ir", type=Path, help="an IR folder (openvino_model.xml) or the .xml itself")
    p.add_argument("--context", type=int, default=150, help="prompt tokens before the decode steps")
    p.add_argument("--steps", type=int, default=60, help="decode steps, the warm ones included")
    p.add_argument("--warm", type=int, default=8, help="decode steps left out of the figures")
    p.add_argument("--streams", type=int, default=1, help="sequences decoded together (a step of that many tokens)")
    p.add_argument("--max-cpu-isa", default="", help="cap oneDNN (ONEDNN_MAX_CPU_ISA), e.g. AVX2")
    p.add_argument("--top", type=int, default=12, help="node types listed")
    args = p.parse_args()
    if args.steps <= args.warm or args.streams < 1:
        p.error("need steps > warm and streams >= 1")
    if args.max_cpu_isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.max_cpu_isa  # before OpenVINO loads oneDNN
    xml = args.ir / "openvino_model.xml" if args.ir.is_dir() else args.ir
    profile(xml, args.context, args.steps, args.warm, args.top, args.streams)


def profile(xml: Path, context: int, steps: int, warm: int, top: int, streams: int = 1) -> None:
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
    per_seq = (context + steps + BLOCK - 1) // BLOCK  # each sequence's own run of blocks
    for port in compiled.inputs:
        if "cache" in port.get_any_name():  # key_cache.N / value_cache.N [blocks, kv heads, BLOCK, head size]
            shape = [per_seq * streams] + [d.get_length() for d in list(port.get_partial_shape())[1:]]
            cache = ov.Tensor(port.get_element_type(), shape)
            prompt_request.set_tensor(port.get_any_name(), cache)
            request.set_tensor(port.get_any_name(), cache)

    def run(req: Any, seqs: list[tuple[list[int], int, int]]) -> None:
        """One step over ``seqs``: each (its new token ids, its past length, its index among the streams)."""
        begins, block_begins, blocks, positions, sampled, longest = [0], [0], [], [], [], 0
        for ids, past, index in seqs:
            length = past + len(ids)
            used = (length + BLOCK - 1) // BLOCK
            positions += range(past, length)
            begins.append(begins[-1] + len(ids))
            sampled.append(begins[-1] - 1)
            blocks += range(index * per_seq, index * per_seq + used)
            block_begins.append(len(blocks))
            longest = max(longest, length)
        feed = {
            "input_ids": np.array([t for ids, _, _ in seqs for t in ids]),
            "position_ids": np.array(positions),
            "sampled_tokens_indices": np.array(sampled),
            "max_context_len": np.array(longest),
            "past_lens": np.array([past for _, past, _ in seqs]),
            "subsequence_begins": np.array(begins),
            "block_indices_begins": np.array(block_begins),
            "block_indices": np.array(blocks),
        }
        req.infer({k: v.astype(np.int64 if types[k] == ov.Type.i64 else np.int32) for k, v in feed.items()})

    def totals(calls: int) -> collections.Counter[tuple[str, str]]:
        out: collections.Counter[tuple[str, str]] = collections.Counter()
        for info in request.profiling_info:
            if info.status == info.Status.EXECUTED:
                out[(info.node_type, info.exec_type)] += info.real_time.total_seconds() * calls
        return out

    for index in range(streams):
        run(prompt_request, [(list(range(1000 + index, 1000 + index + context)), 0, index)])
    walls, before = [], collections.Counter[tuple[str, str]]()
    for i in range(steps):
        t = time.perf_counter()
        run(request, [([1234], context + i, index) for index in range(streams)])
        walls.append(time.perf_counter() - t)
        if i + 1 == warm:
            before = totals(streams + warm)  # the counters are the graph's: the prompts' calls count too
    after, n = totals(streams + steps), steps - warm
    per_step = {k: (after[k] - before.get(k, 0.0)) / n * 1e3 for k in after}  # ms
    nodes = collections.Counter(
        (info.node_type, info.exec_type) for info in request.profiling_info if info.status == info.Status.EXECUTED
    )
    wall = statistics.median(walls[warm:]) * 1e3
    ops = sum(v for k, v in per_step.items() if k[0] == "Reference")
    attention = sum(v for k, v in per_step.items() if k[0] == "PagedAttentionExtension")
    other = sum(per_step.values()) - ops - attention
    what = f"{n} decode steps" + (f" of {streams} streams" if streams > 1 else "")
    print(f"{xml.parent.name}: context {context}, {what}; wall per step (median) {wall:.2f} ms")
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
