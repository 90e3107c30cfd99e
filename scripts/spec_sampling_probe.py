"""Sampled continuations straight from OpenVINO GenAI's ``ContinuousBatchingPipeline``, with or without
a draft model: does its sampled speculative decoding keep the model's distribution? (docs/qwen.md)

The engine refuses sampled requests on a drafting engine, so this drives the pipeline itself, as the
engine would (the model's IR folder from the engine's GGUF cache, prefix caching off, one
``GenerationConfig`` per request with its own seed after a random first one, temperature 1). It
prints one JSON object: the count of each continuation of ``--length`` tokens, keyed by its tokens'
texts joined with U+001F (as ``tests/support/spec_distribution.py`` keys the model's own
probabilities); an early end counts under ``"\\u0000other"``.

    .venv/bin/python scripts/spec_sampling_probe.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --draft models/SmolLM2-135M-Instruct.Q4_1.gguf --samples 400
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from collections import Counter

import openvino_genai as ov_genai

from genmesh.engine.core.draft_model import draft_folder
from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR

SEP, OTHER, BATCH = "\x1f", "\x00other", 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model's GGUF (or IR folder)")
    ap.add_argument("--draft", help="the draft's GGUF (or IR folder); none: the pipeline alone")
    ap.add_argument("--prompt", default="My favourite number between 1 and 100 is")
    ap.add_argument("--length", type=int, default=3, help="tokens per continuation")
    ap.add_argument("--samples", type=int, default=400, help="continuations (a multiple of 8)")
    ap.add_argument("--draft-tokens", type=int, default=4, help="num_assistant_tokens")
    ap.add_argument("--seed", type=int, help="the first request's rng_seed (default: a random one)")
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR)
    args = ap.parse_args()

    folder = draft_folder(ov_genai, args.model, args.cache_dir)
    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False  # on, its first sampled drafting step fails (docs/qwen.md)
    scheduler.cache_size = 1
    properties = {}
    if args.draft:
        properties["draft_model"] = ov_genai.draft_model(str(draft_folder(ov_genai, args.draft, args.cache_dir)), "CPU")
    pipe = ov_genai.ContinuousBatchingPipeline(str(folder), scheduler, "CPU", properties)
    tok = pipe.get_tokenizer()
    ids = tok.encode(args.prompt, add_special_tokens=False).input_ids  # a [1, n] tensor, as generate() takes it
    counts: Counter[str] = Counter()
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    started = time.monotonic()
    for batch in range(args.samples // BATCH):
        configs = []
        for i in range(BATCH):
            config = ov_genai.GenerationConfig()
            config.do_sample, config.temperature, config.max_new_tokens = True, 1.0, args.length
            config.rng_seed = seed + batch * BATCH + i
            if args.draft:
                config.num_assistant_tokens = args.draft_tokens
            configs.append(config)
        for result in pipe.generate([ids] * BATCH, configs):
            out = list(result.m_generation_ids[0])
            counts[SEP.join(tok.decode([t]) for t in out) if len(out) == args.length else OTHER] += 1
    seconds = round(time.monotonic() - started, 1)
    print(json.dumps({"draft": bool(args.draft), "seed": seed, "seconds": seconds, "counts": dict(counts)}))


if __name__ == "__main__":
    main()
