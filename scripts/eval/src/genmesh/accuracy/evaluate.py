"""``make eval``: accuracy over the API, at the engine and through the gateway, against the fixture.

The model is ``--model`` (``make eval MODEL=path.gguf``; SmolLM2-135M by default), served under a
name taken from its file name, with the fixture of that very file (``fixture.for_model``: the
shipped one for the default model, else made once into the cache from the fp32 reference).

1. Start a private mesh (``scripts/launch_mesh.py`` on free ports), unless ``--engine-url`` and
   ``--gateway-url`` name a running one.
2. Run lm-eval (``scripts/lm_eval_mesh.py``, in ``.venv-eval``) on the task set at each hop:
   the multiple-choice items by log-likelihood, the chat questions greedily.
3. Ask each hop for the greedy answers with their logprobs, and run the fp32 reference
   (``reference.py``) on exactly the tokens served: per generated token, |Δ logprob| and whether
   the reference's most likely token is the one served.
4. Print every figure beside its target; exit 1 when one misses.

``--tokens-only`` (``EVAL_ARGS=--tokens-only``) leaves lm-eval out: step 3 alone, with the greedy
answers compared as texts from those same completions. It gives the floor's three figures (median
|Δ logprob|, top token, greedy n of 30) in minutes, and none of the multiple-choice ones.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from genmesh.bench.results import describe
from genmesh.bench.servers import PORT, ManagedServer, free_port, start

from . import embeddings, fixture
from .compare import ChoiceFigures, TokenFigures, answers_equal, choice_figures, token_figures
from .reference import NumpyDecoder, log_softmax


def served_name(model: Path) -> str:
    """The name the model is served under, from its file: the stem without a GGUF type suffix."""
    return GGUF_TYPE_SUFFIX.sub("", model.stem)


ROOT = Path(__file__).resolve().parents[5]
# A trailing ".<GGUF type>" is not part of the name: SmolLM2-135M-Instruct.Q4_1.gguf serves as SmolLM2-135M-Instruct.
GGUF_TYPE_SUFFIX = re.compile(r"\.(I?Q\d\w*|[BF]F?\d+)$", re.IGNORECASE)
TARGETS = {
    "median |Δ logprob| per generated token": "≤ 0.05 nats",
    "top-token agreement": "≥ 95 %",
    "multiple-choice accuracy": "within 2 points of the reference",
    "choice agreement": "≥ 95 %",
    "median |Δ loglikelihood| per choice": "≤ 0.15 nats",
    "greedy chat answers equal to the reference": "≥ 23 of 30 (the bf16 floor)",
}


def write_tasks(folder: Path, data: dict[str, Any]) -> None:
    choice = folder / "choice.jsonl"
    chat = folder / "chat.jsonl"
    choice.write_text(
        "".join(
            json.dumps({"id": m["id"], "context": m["context"], "choices": m["choices"], "gold": m["gold"]}) + "\n"
            for m in data["multiple_choice"]
        )
    )
    chat.write_text(
        "".join(
            json.dumps({"id": c["id"], "question": c["question"], "answer": c["answer"]}) + "\n" for c in data["chat"]
        )
    )
    common = "dataset_path: json\ntest_split: test\n"
    (folder / "genmesh_choice.yaml").write_text(
        "task: genmesh_choice\n" + common + f"dataset_kwargs:\n  data_files:\n    test: {choice}\n"
        "output_type: multiple_choice\ndoc_to_text: '{{context}}'\ndoc_to_choice: choices\ndoc_to_target: gold\n"
        "target_delimiter: ''\nmetric_list:\n  - metric: acc\n"
    )
    (folder / "genmesh_chat.yaml").write_text(
        "task: genmesh_chat\n" + common + f"dataset_kwargs:\n  data_files:\n    test: {chat}\n"
        "output_type: generate_until\ndoc_to_text: '{{question}}'\ndoc_to_target: '{{answer}}'\n"
        f"target_delimiter: ''\ngeneration_kwargs:\n  until: []\n  max_gen_toks: {data['max_answer_tokens']}\n"
        "  do_sample: false\n  temperature: 0\nmetric_list:\n  - metric: exact_match\n"
    )


def run_lm_eval(python: str, hop_url: str, engine_url: str, name: str, tasks: Path, out: Path) -> dict[str, Any]:
    cmd = [python, str(ROOT / "scripts" / "lm_eval_mesh.py"), "--base-url", hop_url, "--engine-url", engine_url,
           "--model", name, "--tasks-dir", str(tasks), "--out", str(out)]  # fmt: skip
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=3600)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def served_tokens(
    client: httpx.Client, url: str, engine_url: str, name: str, prompt: list[int], max_tokens: int
) -> tuple[str, tuple[list[int], list[float]] | None]:
    """A hop's greedy answer: its text, and (token ids, logprobs), None when a token's text does not
    map back to exactly one id (the reference must score the very tokens served). ``logprobs`` 0: each token's
    log-probability as the pipeline computed it while generating (1 or more would bring the scorer's, which
    re-runs the tokens on its own model: OpenVINO's path where the int8 ops generate)."""
    body = {"model": name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 0}
    r = client.post(f"{url}/v1/completions", json=body)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    ids: list[int] = []
    for text in lp["tokens"]:
        tok = client.post(f"{engine_url}/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
        if len(tok["tokens"]) != 1:
            return choice["text"], None
        ids.append(tok["tokens"][0])
    return choice["text"], (ids, lp["token_logprobs"])


def token_pairs(
    model: NumpyDecoder, prompt: list[int], ids: list[int], lps: list[float]
) -> list[tuple[float, float, bool]]:
    ref = log_softmax(model.logits(prompt + ids)[len(prompt) - 1 : len(prompt) - 1 + len(ids)])
    return [(lp, float(ref[j, t]), int(np.argmax(ref[j])) == t) for j, (t, lp) in enumerate(zip(ids, lps, strict=True))]


def evaluate_hop(
    hop: str, url: str, engine_url: str, data: dict[str, Any], model: NumpyDecoder, python: str | None, work: Path
) -> dict[str, Any]:
    """One hop's figures; ``python`` None: without lm-eval (``--tokens-only``)."""
    started, name = time.monotonic(), data["served_name"]
    choice, answers = None, {}
    if python is not None:
        lm = run_lm_eval(python, url, engine_url, name, work, work / f"lm-eval-{hop}.json")
        choice = choice_figures({c["id"]: c["ll"] for c in lm["choice"]}, data["multiple_choice"])
        answers = {c["id"]: c["answer"] for c in lm["chat"]}
    pairs: list[tuple[float, float, bool]] = []
    skipped = 0
    with httpx.Client(timeout=300) as client:
        for n, c in enumerate(data["chat"], 1):
            if n % 5 == 0:
                print(f"  {hop}: {n} answers ({time.monotonic() - started:.0f} s)", flush=True)
            text, got = served_tokens(client, url, engine_url, name, c["prompt_ids"], data["max_answer_tokens"])
            answers.setdefault(c["id"], text)
            if got is None:
                skipped += 1
                continue
            pairs.extend(token_pairs(model, c["prompt_ids"], *got))
    equal, asked = answers_equal(answers, data["chat"])
    return {
        "hop": hop,
        "url": url,
        "choice": choice,
        "chat_equal": (equal, asked),
        "tokens": token_figures(pairs),
        "answers_skipped": skipped,
        "seconds": time.monotonic() - started,
    }


def verdicts(h: dict[str, Any]) -> list[tuple[str, str, bool]]:
    c: ChoiceFigures | None = h["choice"]
    t: TokenFigures = h["tokens"]
    equal, asked = h["chat_equal"]
    tokens = [
        (
            "median |Δ logprob| per generated token",
            f"{t.median_dlp:.4f} nats (p95 {t.p95_dlp:.3f}; {t.tokens} tokens)",
            t.median_dlp <= 0.05,
        ),
        ("top-token agreement", f"{100 * t.top_agreement:.1f} %", t.top_agreement >= 0.95),
    ]
    greedy = [("greedy chat answers equal to the reference", f"{equal} of {asked}", equal >= 23 * asked / 30)]
    if c is None:
        return [*tokens, *greedy]
    drift = abs(c.accuracy - c.reference_accuracy)
    choices = [
        (
            "multiple-choice accuracy",
            f"{c.accuracy:.3f} (reference {c.reference_accuracy:.3f}; {c.items} items)",
            drift <= 0.02,
        ),
        ("choice agreement", f"{100 * c.agreement:.1f} %", c.agreement >= 0.95),
        (
            "median |Δ loglikelihood| per choice",
            f"{c.median_dll:.4f} nats (p95 {c.p95_dll:.3f})",
            c.median_dll <= 0.15,
        ),
    ]
    return [*tokens, *choices, *greedy]


def report(hops: list[dict[str, Any]], name: str) -> bool:
    ok = True
    targets = {**TARGETS, **embeddings.TARGETS}
    print(f"\nAccuracy over the API — {name}, CPU: {describe()['cpu']}")
    for h in hops:
        print(f"\n{h['hop']} ({h['url']}, {h['seconds']:.0f} s)")
        for what, value, passed in verdicts(h) + h.get("embeddings", []):
            ok = ok and passed
            print(f"  {'ok  ' if passed else 'MISS'} {what:44s} {value:48s} target {targets[what]}")
        if h["answers_skipped"]:
            print(
                f"  ({h['answers_skipped']} answers had a token whose text is not one token: not in the token figures)"
            )
    return ok


def start_mesh(run_dir: Path, model: Path, name: str) -> tuple[ManagedServer, str, str]:
    ports = {k: free_port() for k in ("engine", "microservice", "redis")}
    argv = [sys.executable, str(ROOT / "scripts" / "launch_mesh.py"), "--model", str(model),
            "--served-model-name", name,
            "--engine-port", str(ports["engine"]), "--microservice-port", str(ports["microservice"]),
            "--gateway-port", PORT, "--run-dir", str(run_dir),
            "--redis-url", f"redis://127.0.0.1:{ports['redis']}/0"]  # fmt: skip
    print(f"starting a private mesh (logs in {run_dir}/logs)", flush=True)
    mesh = start("mesh", argv, run_dir / "launcher.log", timeout_s=900)
    return mesh, f"http://127.0.0.1:{ports['engine']}", mesh.url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Accuracy over the API (make eval).")
    p.add_argument("--lm-eval-python", required=True, help="python of the venv with lm-eval (.venv-eval)")
    p.add_argument("--engine-url", help="a running engine (with --gateway-url: no private mesh)")
    p.add_argument("--gateway-url", help="a running gateway in front of that engine")
    p.add_argument("--model", type=Path, default=Path(fixture.DEFAULT_MODEL), help="the GGUF served and referenced")
    p.add_argument("--served-model-name", help="the name it is served under (default: from the file name)")
    p.add_argument(
        "--lazy-reference",
        action="store_true",
        help="dequantise the reference's weights at each use: far less memory (a 1.5B: ~6 GiB in fp32), much slower",
    )
    p.add_argument(
        "--tokens-only",
        action="store_true",
        help="no lm-eval: the generated tokens' figures and the greedy answers only (minutes, not half an hour)",
    )
    p.add_argument("--hops", nargs="+", choices=("engine", "gateway"), default=["engine", "gateway"])
    p.add_argument("--run-dir", type=Path, default=ROOT / ".run" / "eval")
    args = p.parse_args(argv)
    path = args.model if args.model.is_absolute() else ROOT / args.model
    name = args.served_model_name or served_name(path)
    print(f"loading the fp32 reference ({path.name})", flush=True)
    model = NumpyDecoder.from_gguf(path, lazy=args.lazy_reference)
    data = {**fixture.for_model(path, model, chat_only=args.tokens_only), "served_name": name}
    mesh = None
    if args.engine_url and args.gateway_url:
        engine_url, gateway_url = args.engine_url.rstrip("/"), args.gateway_url.rstrip("/")
    else:
        mesh, engine_url, gateway_url = start_mesh(args.run_dir, path, name)
    try:
        with tempfile.TemporaryDirectory(prefix="genmesh-eval-") as tmp:
            work = Path(tmp)
            if not args.tokens_only:
                write_tasks(work, data)
            hops = [
                evaluate_hop(hop, url, engine_url, data, model, None if args.tokens_only else args.lm_eval_python, work)
                for hop, url in (("engine", engine_url), ("gateway", gateway_url))
                if hop in args.hops
            ]
        for hop in hops:  # the embedding model served beside the chat model (make run's default)
            hop["embeddings"] = embeddings.check(hop["url"])
    finally:
        if mesh is not None:
            mesh.stop()
    return 0 if report(hops, name) else 1


if __name__ == "__main__":
    raise SystemExit(main())
