"""Issue 56, item 3: fewer, larger nodes for one stream. A probe, not the engine's path.

The exact IR (gguf_exact.py) computes each Q4_1 MatMul as ``W x + M S(x)``: a compressed fully-connected
(u4 values times f16 block scales), a minimums MatMul over the block sums ``S(x)`` (one ReduceSum per shared
input already) and an Add. Q, K and V read one input, as do gate and up. This writes variants of the exact IR
whose MatMuls on one input are one MatMul (values, scales and minimums concatenated along N, one
VariadicSplit after the Add):

    unfused   the exact IR without fusion (what the engine served before gguf_fuse.py)
    qkv       q/k/v fused per layer (3 inputs -> 1 x 3 nodes fewer in the graph)
    gate_up   gate/up fused per layer
    both      both
    zp        every branch as one compressed MatMul whose f32 zero point ``-m/d`` carries the minimums:
              ``(q - z) d = d q + m`` per block (no ReduceSum, no minimums' MatMul, no Add)
    zp_both   zp, with q/k/v and gate/up fused
    op        the int8 path's IR (``gguf_exact.build(q41_op=True)``): each Q4_1 MatMul one ``genmesh::Q41MatMul``
    op_group  op, with the ops of one input (q/k/v, gate/up) as one ``Q41MatMul`` with an output per matrix
              (gguf_op_groups.py: 120 op nodes instead of 210, no Split); compare with ``--baseline op``
    op_qkv    op_group for q/k/v only (150 op nodes)
    op_swiglu op_group, with each layer's gate/up, SiLU and product as one ``genmesh::Q41SwiGLU``
              (gguf_op_swiglu.py: 90 op nodes; off in the engine: gguf_exact.SWIGLU); compare with op_group
    op_x8     op_group over the blocks interleaved eight columns at a time (``genmesh::Q41X8MatMul``,
              gguf_op_x8.py: the engine's IR since it; the other op variants keep the file's layout); compare with
              op_group

and checks that each variant's logits equal the unfused IR's (f32, ``ov.Core``, a few prompts), counts the
compiled model's nodes, and times one stream's decode through ``ContinuousBatchingPipeline`` the way the
engine drives it (``add_request`` + ``step()``), the variants interleaved round by round:

    .venv/bin/python scripts/fuse_probe.py check            # logits, node counts, the plugin's own fusions
    .venv/bin/python scripts/fuse_probe.py bench --rounds 7 # decode speed, c=1 (quiet machine)
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/fuse_probe.py bench --variants op_group --baseline op \
        --precision f32                                     # the op grouped per input against per matrix
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/fuse_probe.py bench --variants op_swiglu \
        --baseline op_group --precision f32                 # the SwiGLU op against the grouped gate/up
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/fuse_probe.py bench --variants op_x8 \
        --baseline op_group --precision f32                 # the interleaved layout against the file's

Results: docs/int8-avx2.md ("Fewer nodes: fused QKV and gate/up (probe)").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # int8_probe

from genmesh.engine.core.gguf_fuse import fuse, groups, zero_point_form  # noqa: E402  (the test reads them here)

__all__ = ["exact_ir", "fuse", "groups", "zero_point_form"]
BUILD = ROOT / "scripts" / "build" / "fuse-probe"  # the variants' IRs (gitignored)
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
VARIANTS = ("unfused", "qkv", "gate_up", "both", "zp", "zp_both")
# the int8 path's IR, per matrix and grouped per input (need the extension): the group sizes made one op
OP_GROUPS = {"op": (), "op_group": (2, 3), "op_qkv": (3,), "op_swiglu": (2, 3), "op_x8": (2, 3)}
OP_X8 = frozenset({"op_x8"})  # (the others over the file's layout: gguf_exact.build(interleave=False))
OP_SWIGLU = frozenset({"op_swiglu"})  # (the others without it: gguf_exact.build(swiglu=False))
OP_VARIANTS = tuple(OP_GROUPS)
# (group sizes fused: q/k/v 3, gate/up 2; the minimums as an f32 zero point)
FUSE = {
    "unfused": ((), False),
    "qkv": ((3,), False),
    "gate_up": ((2,), False),
    "both": ((2, 3), False),
    "zp": ((), True),
    "zp_both": ((2, 3), True),
}
PROMPTS = (
    "The sea covers about seventy percent of the Earth's surface. Its waves are driven by the wind,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Write a short poem about the sea.",
)


def exact_ir(model: Path = MODEL) -> Path:
    """The exact IR of ``model`` without the fusion the engine's now has (``gguf_exact.build(fused=False)``),
    under BUILD: the baseline of every variant (built once, ~10 s)."""
    from genmesh.engine.core.gguf_exact import IR_XML, MARKER, build

    folder = BUILD / "exact-unfused"
    if not (folder / MARKER).is_file():
        build(model, folder, fused=False)
    return folder / IR_XML


def op_ir(
    folder: Path, op_groups: tuple[int, ...], model: Path = MODEL, swiglu: bool = False, interleave: bool = False
) -> Path:
    """The int8 path's IR of ``model`` in ``folder`` (``gguf_exact.build(q41_op=True)``; ``op_groups``: the
    sizes of the sets of ops of one input made one op; ``swiglu``: gate/up, SiLU and product as one op;
    ``interleave``: the Q4_1 ops over the interleaved layout, as the engine's), with the GGUF's tokenizer."""
    from genmesh.engine.core.gguf_exact import GGUF_LINK, MARKER, build
    from genmesh.engine.core.gguf_tokenizer import tokenizer_gguf

    if not (folder / MARKER).is_file():
        build(model, folder, q41_op=True, op_groups=op_groups, swiglu=swiglu, interleave=interleave)
    if not (folder / "tokenizer.gguf").is_file():
        tokenizer_gguf((folder / GGUF_LINK).resolve(), folder)
    print(json.dumps({"variant": folder.name, "marker": json.loads((folder / MARKER).read_text())}), flush=True)
    return folder


def write_variants(src: Path, out: Path = BUILD, names: tuple[str, ...] = VARIANTS) -> dict[str, Path]:
    """Each variant's IR folder under ``out`` (the unfused one links the exact IR), with the GGUF's tokenizer."""
    import openvino as ov

    from genmesh.engine.core.gguf_tokenizer import tokenizer_gguf

    folders: dict[str, Path] = {}
    for name in names:
        folder = out / name
        if name in OP_VARIANTS:
            folders[name] = op_ir(folder, OP_GROUPS[name], swiglu=name in OP_SWIGLU, interleave=name in OP_X8)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer_gguf((src.parent / "model.gguf").resolve(), folder)
        xml = folder / "openvino_model.xml"
        if name == "unfused":
            for suffix in (".xml", ".bin"):
                link = xml.with_suffix(suffix)
                link.unlink(missing_ok=True)
                link.symlink_to(src.with_suffix(suffix))
        else:
            model = ov.Core().read_model(str(src))
            fused = fuse(model, *FUSE[name])
            ov.save_model(model, str(xml), compress_to_fp16=False)
            print(json.dumps({"variant": name, "fused_groups": fused, "ir": str(folder)}), flush=True)
        folders[name] = folder
    return folders


# --- check: logits and nodes ---------------------------------------------------------------------------------


def logits(compiled: Any, ids: Any) -> Any:
    """All positions' logits of the stateful IR for one prompt (a fresh request: empty state)."""
    from int8_probe.logits_check import all_logits

    return all_logits(compiled, ids)


F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def runtime_ops(core: Any, model: Any, config: dict[str, Any]) -> collections.Counter[str]:
    """The compiled model's nodes by the plugin's layer type, after OpenVINO GenAI's paged-attention
    transformation (what ``ContinuousBatchingPipeline`` compiles)."""
    from openvino._offline_transformations import paged_attention_transformation

    paged_attention_transformation(model)
    compiled = core.compile_model(model, "CPU", config)
    kinds = collections.Counter(
        str(op.get_rt_info()["layerType"].astype(str)) for op in compiled.get_runtime_model().get_ops()
    )
    del compiled
    return kinds


def _log_softmax(x: Any) -> Any:
    import numpy as np

    x = np.asarray(x, np.float64) - np.asarray(x, np.float64).max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def check(
    folders: dict[str, Path], config: dict[str, Any], logits_config: dict[str, Any], baseline: str = "unfused"
) -> None:
    """Per variant: its logits against the ``baseline`` IR's (``logits_config``: f32 unless --logits-precision),
    and its compiled nodes by type (``config``: the benchmark's; its ``extensions`` are added to the core)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    core = ov.Core()
    config = dict(config)
    for extension in config.pop("extensions", []):
        core.add_extension(extension)
    tokenizer = ov_genai.Tokenizer(str(folders[baseline] / "tokenizer.gguf"))
    from int8_probe.logits_check import TEXT  # 64 tokens of English: more positions

    prompts = [np.asarray(tokenizer.encode(p).input_ids.data, dtype=np.int64) for p in (*PROMPTS, TEXT)]

    def run(xml: str, cfg: dict[str, Any]) -> list[Any]:
        compiled = core.compile_model(core.read_model(xml), "CPU", cfg)
        return [logits(compiled, ids) for ids in prompts]

    def compare(out: list[Any], ref: list[Any]) -> dict[str, float]:
        """max |Δ logit|; median and max |Δ logprob| of ``ref``'s top token; top-1 agreement (all positions)."""
        lp, rp = [_log_softmax(a[0]) for a in out], [_log_softmax(a[0]) for a in ref]
        top = [r.argmax(-1) for r in rp]
        dlp = np.concatenate(
            [np.abs(a[np.arange(len(t)), t] - r[np.arange(len(t)), t]) for a, r, t in zip(lp, rp, top, strict=True)]
        )
        agree = np.concatenate([a.argmax(-1) == t for a, t in zip(lp, top, strict=True)])
        return {
            "max_abs_logit_diff": round(max(float(np.abs(a - b).max()) for a, b in zip(out, ref, strict=True)), 6),
            "median_abs_dlogprob": round(float(np.median(dlp)), 5),
            "max_abs_dlogprob": round(float(dlp.max()), 5),
            "top1_agreement": round(float(agree.mean()), 4),
        }

    xml_of = {name: str(folder / "openvino_model.xml") for name, folder in folders.items()}
    exact_f32 = run(xml_of[baseline], F32)  # the reference: the baseline IR in f32
    ref = run(xml_of[baseline], logits_config)
    for name, xml in xml_of.items():
        out = ref if name == baseline else run(xml, logits_config)
        kinds = runtime_ops(core, core.read_model(xml), config)
        row: dict[str, Any] = {"variant": name, "positions": sum(int(p.shape[1]) for p in prompts)}
        row["max_abs_logit"] = round(max(float(np.abs(a).max()) for a in ref), 2)
        row[f"vs_{baseline}"] = compare(out, ref)
        if logits_config != F32:
            row[f"vs_{baseline}_f32"] = compare(out, exact_f32)
        row.update(runtime_nodes=sum(kinds.values()), runtime_types=dict(kinds.most_common()))
        print(json.dumps(row), flush=True)


# --- bench: one stream through ContinuousBatchingPipeline -----------------------------------------------------


def one_request(ov: Any, pipe: Any, ids: Any, gc: Any, request_id: int, concurrency: int = 1) -> dict[str, Any]:
    """``concurrency`` greedy requests added at once and driven as the engine's step loop does: per-step wall
    times (with several, a step decodes one token of each), the first request's tokens."""
    handles = [pipe.add_request(request_id * 100 + i, ov.Tensor(ids), gc) for i in range(concurrency)]
    steps: list[float] = []
    tokens: list[int] = []
    cpu = time.process_time()
    while pipe.has_non_finished_requests():
        t = time.perf_counter()
        pipe.step()
        steps.append(time.perf_counter() - t)
        if handles[0].can_read():
            for out in handles[0].read().values():
                tokens.extend(out.generated_ids)
    cpu = time.process_time() - cpu
    decode = steps[1:]  # step 1: the prompts (one chunk) and the first tokens
    return {
        "prefill_ms": steps[0] * 1e3,
        "tpot_ms": sum(decode) / len(decode) * 1e3,
        "cpu_ms_per_token": cpu * 1e3 / max(1, len(tokens) * concurrency),
        "tokens": tokens,
    }


def bench(
    folders: dict[str, Path],
    config: dict[str, Any],
    rounds: int,
    new_tokens: int,
    concurrency: int = 1,
    baseline: str = "unfused",
) -> None:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens = gc.min_new_tokens = new_tokens
    gc.do_sample = False
    pipes: dict[str, Any] = {}
    ids: Any = None
    for name, folder in folders.items():
        tokenizer = ov_genai.Tokenizer(str(folder / "tokenizer.gguf"))
        ids = np.asarray(tokenizer.encode(PROMPTS[0]).input_ids.data, dtype=np.int64)
        sc = ov_genai.SchedulerConfig()
        sc.num_kv_blocks = 64 * concurrency  # room for the requests; the engine's other scheduler fields are defaults
        sc.enable_prefix_caching = False  # each round's prompt is computed anew
        started = time.monotonic()
        pipes[name] = ov_genai.ContinuousBatchingPipeline(str(folder), tokenizer, sc, "CPU", **config)
        load_s = time.monotonic() - started
        warm = one_request(ov, pipes[name], ids, gc, 0, concurrency)
        print(json.dumps({"variant": name, "load_s": round(load_s, 2), "warmup_tpot_ms": round(warm["tpot_ms"], 2)}))
    names = list(folders)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotated: no variant always runs first
        for name in order:
            results[name].append(one_request(ov, pipes[name], ids, gc, 1000 + r, concurrency))
        row = {n: round(results[n][-1]["tpot_ms"], 2) for n in names}
        print(json.dumps({"round": r, "order": order, "tpot_ms": row, "load": os.getloadavg()[0]}), flush=True)
    base = results[baseline]
    for name in names:
        res = results[name]
        ratios = [b["tpot_ms"] / v["tpot_ms"] for b, v in zip(base, res, strict=True)]  # > 1: faster
        row = {
            "variant": name,
            "tpot_ms_median": round(statistics.median(v["tpot_ms"] for v in res), 2),
            "decode_tok_s_median": round(1e3 / statistics.median(v["tpot_ms"] for v in res), 1),
            f"speed_vs_{baseline}_median_of_ratios": round(statistics.median(ratios), 3),
            "per_round_ratios": [round(x, 3) for x in ratios],
            "prefill_ms_median": round(statistics.median(v["prefill_ms"] for v in res), 1),
            "cpu_ms_per_token_median": round(statistics.median(v["cpu_ms_per_token"] for v in res), 2),
            f"same_tokens_as_{baseline}": all(v["tokens"] == b["tokens"] for v, b in zip(res, base, strict=True)),
        }
        print(json.dumps(row), flush=True)


def _dso_shares(data: Path) -> dict[str, float]:
    """Where the samples of ``data`` fell, by shared object (perf report --sort dso), percent."""
    import subprocess

    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "--no-children", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    shares: dict[str, float] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            shares[" ".join(parts[1:])] = float(parts[0].rstrip("%"))
    return shares


def profile(folders: dict[str, Path], config: dict[str, Any], requests: int, new_tokens: int, out: Path) -> None:
    """``perf record`` of this process over ``requests`` decode requests of each variant in turn (after the
    loads and a warm-up): where one stream's time goes, by shared object (JIT code: perf's ``[JIT]``/anon)."""
    import signal
    import subprocess

    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens = gc.min_new_tokens = new_tokens
    gc.do_sample = False
    out.mkdir(parents=True, exist_ok=True)
    for name, folder in folders.items():
        tokenizer = ov_genai.Tokenizer(str(folder / "tokenizer.gguf"))
        ids = np.asarray(tokenizer.encode(PROMPTS[0]).input_ids.data, dtype=np.int64)
        sc = ov_genai.SchedulerConfig()
        sc.num_kv_blocks = 64
        sc.enable_prefix_caching = False
        pipe = ov_genai.ContinuousBatchingPipeline(str(folder), tokenizer, sc, "CPU", **config)
        one_request(ov, pipe, ids, gc, 0)
        data = out / f"{name}.perf.data"
        cmd = ["perf", "record", "-F", "999", "-g", "-o", str(data), "-p", str(os.getpid())]
        perf = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # perf attaches (a fixed pause: nothing to poll for)
        cpu = time.process_time()
        tpot = [one_request(ov, pipe, ids, gc, 1 + i)["tpot_ms"] for i in range(requests)]
        cpu_ms = (time.process_time() - cpu) * 1e3 / (requests * new_tokens)  # both threads, per token
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=60)
        del pipe
        top = dict(list(_dso_shares(data).items())[:8])
        row = {"variant": name, "tpot_ms_median": round(statistics.median(tpot), 2), "dso_pct": top}
        row["cpu_ms_per_token"] = round(cpu_ms, 2)
        row["dso_cpu_ms_per_token"] = {dso: round(pct * cpu_ms / 100, 2) for dso, pct in top.items()}
        row["load"] = os.getloadavg()[0]
        print(json.dumps(row), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "what", choices=("write", "check", "bench", "perf"), help="write the IRs; check logits/nodes; time c=1; profile"
    )
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of {','.join(VARIANTS + OP_VARIANTS)} (the baseline always runs)",
    )
    p.add_argument(
        "--baseline", default="unfused", help="bench: the variant the others are timed against (op: the ops')"
    )
    p.add_argument("--precision", default=None, help="INFERENCE_PRECISION_HINT (unset: OpenVINO's, as the engine)")
    p.add_argument(
        "--logits-precision", default="f32", help="check: INFERENCE_PRECISION_HINT of the logits ('default': unset)"
    )
    p.add_argument("--threads", type=int, default=2, help="INFERENCE_NUM_THREADS")
    p.add_argument("--rounds", type=int, default=7, help="bench: interleaved rounds")
    p.add_argument("--new-tokens", type=int, default=64, help="bench: greedy tokens per request")
    p.add_argument("--concurrency", type=int, default=1, help="bench: requests decoded together (c)")
    p.add_argument("--requests", type=int, default=5, help="perf: requests per variant while perf records")
    p.add_argument("--perf-dir", type=Path, default=BUILD / "perf", help="perf: where perf.data files go")
    a = p.parse_args()
    names = tuple(dict.fromkeys([a.baseline, *a.variants.split(",")]))
    folders = {n: BUILD / n for n in names}
    if a.what == "write" or not all((f / "openvino_model.xml").is_file() for f in folders.values()):
        src = exact_ir() if set(names) - set(OP_VARIANTS) else MODEL  # (the op variants build their own)
        folders = write_variants(src, BUILD, names)
    # The engine's plugin config: f32 activations into the 4-bit FC (no dynamic quantization), 2 threads.
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": a.threads, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    if a.precision:
        config["INFERENCE_PRECISION_HINT"] = a.precision
    if set(names) & set(OP_VARIANTS):  # the int8 extension, as the engine passes it to the pipeline
        from genmesh.engine.native.build import build as build_extension

        config["extensions"] = [str(build_extension())]
    if a.what == "check":
        logits_config = dict(F32)
        if a.logits_precision == "default":
            del logits_config["INFERENCE_PRECISION_HINT"]
        else:
            logits_config["INFERENCE_PRECISION_HINT"] = a.logits_precision
        check(folders, config, logits_config, a.baseline)
    elif a.what == "bench":
        bench(folders, config, a.rounds, a.new_tokens, a.concurrency, a.baseline)
    elif a.what == "perf":
        profile(folders, config, a.requests, a.new_tokens, a.perf_dir)


if __name__ == "__main__":
    main()
