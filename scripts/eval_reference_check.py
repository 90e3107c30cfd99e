#!/usr/bin/env python3
"""Is the numpy fp32 reference the model? (``make eval-reference-check``; docs/accuracy.md)

A one-off check of ``genmesh/accuracy/reference.py`` against Hugging Face transformers' own GGUF
loader (``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``: it dequantises with the same
``gguf`` package and runs its own Llama / Qwen2 modelling code) in torch fp32, on a few prompts:
both score every next token of each prompt (teacher-forced), and the check reports the largest
|Δ logprob| of those tokens, the largest over the whole vocabulary at any position, and how often the
two most likely tokens agree. Runs in ``.venv-eval`` (torch, transformers, gguf) with the reference
package on ``PYTHONPATH``; transformers' model is freed before the reference is loaded, so the peak
memory is one fp32 copy of the model (``--lazy``: the reference dequantises each tensor at each use).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

import numpy as np

PROMPTS = (
    "def fibonacci(n):\n    ",
    "The capital of France is Paris. The capital of Italy is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "import numpy as np\n\n# compute the mean of each row of a matrix\ndef row_means(m):\n",
)
CHAT = "Write a Python function that checks whether a string is a palindrome."


def log_softmax(z: Any) -> Any:
    z = np.asarray(z, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def prompts(tok: Any) -> list[list[int]]:
    out = [list(tok(p, add_special_tokens=False)["input_ids"]) for p in PROMPTS]
    if tok.chat_template:
        chat = [{"role": "user", "content": CHAT}]
        out.append(list(tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]))
    return out


def transformers_logprobs(model_path: Path, threads: int) -> tuple[list[list[int]], list[Any], str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    folder, name = str(model_path.parent), model_path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    ids = prompts(tok)
    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    print(f"transformers loaded {name} in fp32 ({time.monotonic() - started:.0f} s)", flush=True)
    out = []
    with torch.no_grad():
        for seq in ids:
            logits = model(torch.tensor([seq])).logits[0].to(torch.float64).numpy()
            out.append(log_softmax(logits))
    kind = type(model).__name__
    del model
    gc.collect()
    return ids, out, kind


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The numpy fp32 reference against transformers' GGUF loader (fp32).")
    p.add_argument("--model", type=Path, default=Path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--lazy", action="store_true", help="dequantise each tensor at each use (less memory)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from genmesh.accuracy.reference import NumpyDecoder

    ids, theirs, kind = transformers_logprobs(args.model, args.threads)
    started = time.monotonic()
    ref = NumpyDecoder.from_gguf(args.model, lazy=args.lazy)
    tokens = 0
    worst_token = worst_vocab = 0.0
    top_equal = positions = 0
    for seq, hf in zip(ids, theirs, strict=True):
        ours = log_softmax(ref.logits(seq))
        targets = np.asarray(seq[1:])
        rows = np.arange(len(targets))
        worst_token = max(worst_token, float(np.abs(ours[rows, targets] - hf[rows, targets]).max()))
        worst_vocab = max(worst_vocab, float(np.abs(ours - hf).max()))
        top_equal += int((ours.argmax(-1) == hf.argmax(-1)).sum())
        positions += len(seq)
        tokens += len(targets)
    print(f"reference ({ref.config.arch}, numpy fp32) ran in {time.monotonic() - started:.0f} s")
    print(f"{args.model.name}: transformers {kind} fp32 vs genmesh reference, {len(ids)} prompts")
    print(f"  max |Δ logprob| over the prompts' {tokens} next tokens: {worst_token:.2e} nats")
    print(f"  max |Δ logprob| over the whole vocabulary, {positions} positions: {worst_vocab:.2e} nats")
    print(f"  most likely token equal: {top_equal} of {positions}")
    return 0 if worst_token < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
