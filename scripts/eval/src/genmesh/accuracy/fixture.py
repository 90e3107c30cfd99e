"""The reference fixture: what the GGUF's own weights, in fp32, say about the task set.

``python -m genmesh.accuracy.fixture`` (once, ~2 minutes on 2 cores) runs ``reference.py`` on
``tasks.py`` and writes ``reference.json`` beside this file (the default model's, shipped);
``--model`` another GGUF writes its fixture into :data:`CACHE_DIR` instead, which is where
``make eval MODEL=...`` finds it (:func:`for_model` makes it there the first time). Each holds,
for every multiple-choice item, the token ids lm-eval sends (context and continuation tokenised as lm-eval does), the
log-likelihood of each choice and whether it is the greedy continuation; for every chat
question the prompt's token ids (the chat template applied) and the greedy answer with its
token log-probabilities. ``make eval`` and the bounded accuracy test compare the served model
with it; neither needs the reference model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .reference import NumpyDecoder, greedy, log_softmax
from .tasks import chat_questions, multiple_choice

FIXTURE = Path(__file__).with_name("reference.json")
DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Fixtures of other models (and each one's metadata-only tokenizer GGUF), keyed by the file's sha256.
CACHE_DIR = Path(os.environ.get("GENMESH_EVAL_CACHE") or Path.home() / ".cache" / "genmesh" / "accuracy")
MAX_ANSWER_TOKENS = 32


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def load(path: Path = FIXTURE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def cached(model_path: Path, digest: str, chat_only: bool = False) -> Path:
    return CACHE_DIR / f"{model_path.stem}-{digest[:16]}{'-chat' if chat_only else ''}.json"


def for_model(model_path: Path, reference: NumpyDecoder | None = None, chat_only: bool = False) -> dict[str, Any]:
    """The fixture of this very file: the shipped one if it was made from it, else the cached one,
    made now if there is none (with ``reference`` when given: the model is not loaded twice).
    ``chat_only``: the chat answers suffice (``make eval``'s ``--tokens-only``; no choice items)."""
    digest = _sha256(model_path)
    shipped = load()
    if shipped["model"]["sha256"] == digest:
        return shipped
    whole = cached(model_path, digest)
    path = cached(model_path, digest, chat_only)
    for found in (whole, path):
        if found.is_file():
            return load(found)
    print(f"making the reference fixture of {model_path.name} into {path} (once)", flush=True)
    data = build(model_path, reference, digest, choices=not chat_only)
    write(path, data)
    return data


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    tmp.replace(path)


def build(
    model_path: Path, reference: NumpyDecoder | None = None, digest: str | None = None, choices: bool = True
) -> dict[str, Any]:
    import openvino_genai as ov_genai

    from genmesh.engine.core.gguf_tokenizer import tokenizer_gguf

    # The engine's own tokenizer source: the GGUF's metadata alone (openvino_genai.Tokenizer on the
    # whole file dequantises every tensor, and refuses the Qwen 0.5B's Q5_0).
    digest = digest or _sha256(model_path)
    tok = ov_genai.Tokenizer(str(tokenizer_gguf(model_path, CACHE_DIR / f"{model_path.stem}-{digest[:16]}")))

    def encode(text: str) -> list[int]:
        return [int(t) for t in tok.encode(text, add_special_tokens=False).input_ids.data[0]]

    model = reference or NumpyDecoder.from_gguf(model_path)
    started = time.monotonic()
    mc: list[dict[str, Any]] = []
    for n, item in enumerate(multiple_choice() if choices else [], 1):
        if n % 25 == 0:
            print(f"  {n} choice items ({time.monotonic() - started:.0f} s)", flush=True)
        ctx = encode(item.context)
        scored = []
        for cont in item.choices:
            whole = encode(item.context + cont)
            lp = log_softmax(model.logits(whole)[len(ctx) - 1 : len(whole) - 1])
            targets = whole[len(ctx) :]
            chosen = [float(lp[j, t]) for j, t in enumerate(targets)]
            is_greedy = all(int(np.argmax(lp[j])) == t for j, t in enumerate(targets))
            scored.append({"ids": whole, "ll": sum(chosen), "greedy": is_greedy})
        mc.append({**item.__dict__, "ctxlen": len(ctx), "reference": scored})
    chat: list[dict[str, Any]] = []
    eos = int(tok.get_eos_token_id())
    for n, q in enumerate(chat_questions(), 1):
        if n % 5 == 0:
            print(f"  {n} chat answers ({time.monotonic() - started:.0f} s)", flush=True)
        text = tok.apply_chat_template([{"role": "user", "content": q.question}], add_generation_prompt=True)
        prompt = encode(text)
        ids, lps = greedy(model, prompt, MAX_ANSWER_TOKENS, {eos})
        answer = str(tok.decode(ids, skip_special_tokens=True))
        chat.append({**q.__dict__, "prompt_ids": prompt, "answer_ids": ids, "answer_logprobs": lps, "answer": answer})
    return {
        "model": {"file": model_path.name, "sha256": digest},
        "made_by": "python -m genmesh.accuracy.fixture (numpy fp32 reference, genmesh/accuracy/reference.py)",
        "max_answer_tokens": MAX_ANSWER_TOKENS,
        "multiple_choice": mc,
        "chat": chat,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write the accuracy reference fixture (numpy fp32 reference).")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--chat-only", action="store_true", help="the chat answers only (enough for --tokens-only)")
    p.add_argument("--out", help=f"where to write it (default: {FIXTURE.name} for the default model, else the cache)")
    args = p.parse_args(argv)
    start = time.monotonic()
    model = Path(args.model)
    data = build(model, choices=not args.chat_only)
    out = Path(args.out) if args.out else FIXTURE if model.name == Path(DEFAULT_MODEL).name else None
    out = out or cached(model, data["model"]["sha256"], args.chat_only)
    write(out, data)
    mc = data["multiple_choice"]
    acc = sum(int(np.argmax([c["ll"] for c in m["reference"]]) == m["gold"]) for m in mc) / max(1, len(mc))
    print(f"wrote {out}: {len(mc)} choice items (accuracy {acc:.3f}), {len(data['chat'])} chat answers, "
          f"{time.monotonic() - start:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
