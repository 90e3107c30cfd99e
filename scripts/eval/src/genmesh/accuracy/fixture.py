"""The reference fixture: what the GGUF's own weights, in fp32, say about the task set.

``python -m genmesh.accuracy.fixture`` (once, ~2 minutes on 2 cores) runs ``reference.py`` on
``tasks.py`` and writes ``reference.json`` beside this file: for every multiple-choice item the
token ids lm-eval sends (context and continuation tokenised as lm-eval does), the
log-likelihood of each choice and whether it is the greedy continuation; for every chat
question the prompt's token ids (the chat template applied) and the greedy answer with its
token log-probabilities. ``make eval`` and the bounded accuracy test compare the served model
with it; neither needs the reference model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from .reference import NumpyLlama, greedy, log_softmax
from .tasks import chat_questions, multiple_choice

FIXTURE = Path(__file__).with_name("reference.json")
DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_ANSWER_TOKENS = 32


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def build(model_path: Path) -> dict[str, Any]:
    import openvino_genai as ov_genai

    tok = ov_genai.Tokenizer(str(model_path))

    def encode(text: str) -> list[int]:
        return [int(t) for t in tok.encode(text, add_special_tokens=False).input_ids.data[0]]

    model = NumpyLlama.from_gguf(model_path)
    mc: list[dict[str, Any]] = []
    for item in multiple_choice():
        ctx = encode(item.context)
        choices = []
        for cont in item.choices:
            whole = encode(item.context + cont)
            lp = log_softmax(model.logits(whole)[len(ctx) - 1 : len(whole) - 1])
            targets = whole[len(ctx) :]
            chosen = [float(lp[j, t]) for j, t in enumerate(targets)]
            is_greedy = all(int(np.argmax(lp[j])) == t for j, t in enumerate(targets))
            choices.append({"ids": whole, "ll": sum(chosen), "greedy": is_greedy})
        mc.append({**item.__dict__, "ctxlen": len(ctx), "reference": choices})
    chat: list[dict[str, Any]] = []
    eos = int(tok.get_eos_token_id())
    for q in chat_questions():
        text = tok.apply_chat_template([{"role": "user", "content": q.question}], add_generation_prompt=True)
        prompt = encode(text)
        ids, lps = greedy(model, prompt, MAX_ANSWER_TOKENS, {eos})
        answer = str(tok.decode(ids, skip_special_tokens=True))
        chat.append({**q.__dict__, "prompt_ids": prompt, "answer_ids": ids, "answer_logprobs": lps, "answer": answer})
    return {
        "model": {"file": model_path.name, "sha256": _sha256(model_path)},
        "made_by": "python -m genmesh.accuracy.fixture (numpy fp32 reference, genmesh/accuracy/reference.py)",
        "max_answer_tokens": MAX_ANSWER_TOKENS,
        "multiple_choice": mc,
        "chat": chat,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write the accuracy reference fixture (numpy fp32 reference).")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--out", default=str(FIXTURE))
    args = p.parse_args(argv)
    start = time.monotonic()
    data = build(Path(args.model))
    Path(args.out).write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    mc = data["multiple_choice"]
    acc = sum(int(np.argmax([c["ll"] for c in m["reference"]]) == m["gold"]) for m in mc) / len(mc)
    print(f"wrote {args.out}: {len(mc)} choice items (accuracy {acc:.3f}), {len(data['chat'])} chat answers, "
          f"{time.monotonic() - start:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
