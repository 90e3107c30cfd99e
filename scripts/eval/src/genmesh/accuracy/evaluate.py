"""``make eval``: accuracy over the API, at the engine and through the gateway, against the fixture.

1. Start a private mesh (``scripts/launch_mesh.py`` on free ports), unless ``--engine-url`` and
   ``--gateway-url`` name a running one.
2. Run lm-eval (``scripts/lm_eval_mesh.py``, in ``.venv-eval``) on the task set at each hop:
   the multiple-choice items by log-likelihood, the chat questions greedily.
3. Ask each hop for the greedy answers with their logprobs, and run the fp32 reference
   (``reference.py``) on exactly the tokens served: per generated token, |Δ logprob| and whether
   the reference's most likely token is the one served.
4. Print every figure beside its target; exit 1 when one misses.
"""

from __future__ import annotations

import argparse
import json
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
from .reference import NumpyLlama, log_softmax

ROOT = Path(__file__).resolve().parents[5]
MODEL_NAME = "SmolLM2-135M-Instruct"
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


def run_lm_eval(python: str, hop_url: str, engine_url: str, tasks: Path, out: Path) -> dict[str, Any]:
    cmd = [python, str(ROOT / "scripts" / "lm_eval_mesh.py"), "--base-url", hop_url, "--engine-url", engine_url,
           "--model", MODEL_NAME, "--tasks-dir", str(tasks), "--out", str(out)]  # fmt: skip
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=3600)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def served_tokens(client: httpx.Client, url: str, engine_url: str, prompt: list[int], max_tokens: int) -> Any:
    """A hop's greedy answer as (token ids, logprobs); None when a token's text does not map back
    to exactly one id (the reference must score the very tokens served)."""
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}
    r = client.post(f"{url}/v1/completions", json=body)
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]
    ids: list[int] = []
    for text in lp["tokens"]:
        tok = client.post(f"{engine_url}/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
        if len(tok["tokens"]) != 1:
            return None
        ids.append(tok["tokens"][0])
    return ids, lp["token_logprobs"]


def token_pairs(
    model: NumpyLlama, prompt: list[int], ids: list[int], lps: list[float]
) -> list[tuple[float, float, bool]]:
    ref = log_softmax(model.logits(prompt + ids)[len(prompt) - 1 : len(prompt) - 1 + len(ids)])
    return [(lp, float(ref[j, t]), int(np.argmax(ref[j])) == t) for j, (t, lp) in enumerate(zip(ids, lps, strict=True))]


def evaluate_hop(
    name: str, url: str, engine_url: str, data: dict[str, Any], model: NumpyLlama, python: str, work: Path
) -> dict[str, Any]:
    started = time.monotonic()
    lm = run_lm_eval(python, url, engine_url, work, work / f"lm-eval-{name}.json")
    choice = choice_figures({c["id"]: c["ll"] for c in lm["choice"]}, data["multiple_choice"])
    equal, asked = answers_equal({c["id"]: c["answer"] for c in lm["chat"]}, data["chat"])
    pairs: list[tuple[float, float, bool]] = []
    skipped = 0
    with httpx.Client(timeout=300) as client:
        for c in data["chat"]:
            got = served_tokens(client, url, engine_url, c["prompt_ids"], data["max_answer_tokens"])
            if got is None:
                skipped += 1
                continue
            pairs.extend(token_pairs(model, c["prompt_ids"], *got))
    return {
        "hop": name,
        "url": url,
        "choice": choice,
        "chat_equal": (equal, asked),
        "tokens": token_figures(pairs),
        "answers_skipped": skipped,
        "seconds": time.monotonic() - started,
    }


def verdicts(h: dict[str, Any]) -> list[tuple[str, str, bool]]:
    c: ChoiceFigures = h["choice"]
    t: TokenFigures = h["tokens"]
    equal, asked = h["chat_equal"]
    drift = abs(c.accuracy - c.reference_accuracy)
    return [
        (
            "median |Δ logprob| per generated token",
            f"{t.median_dlp:.4f} nats (p95 {t.p95_dlp:.3f}; {t.tokens} tokens)",
            t.median_dlp <= 0.05,
        ),
        ("top-token agreement", f"{100 * t.top_agreement:.1f} %", t.top_agreement >= 0.95),
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
        ("greedy chat answers equal to the reference", f"{equal} of {asked}", equal >= 23 * asked / 30),
    ]


def report(hops: list[dict[str, Any]]) -> bool:
    ok = True
    targets = {**TARGETS, **embeddings.TARGETS}
    print(f"\nAccuracy over the API — {MODEL_NAME}, CPU: {describe()['cpu']}")
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


def start_mesh(run_dir: Path) -> tuple[ManagedServer, str, str]:
    ports = {k: free_port() for k in ("engine", "microservice", "redis")}
    argv = [sys.executable, str(ROOT / "scripts" / "launch_mesh.py"), "--served-model-name", MODEL_NAME,
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
    p.add_argument("--reference-model", default=fixture.DEFAULT_MODEL, help="the GGUF the fixture was made from")
    p.add_argument("--run-dir", type=Path, default=ROOT / ".run" / "eval")
    args = p.parse_args(argv)
    data = fixture.load()
    mesh = None
    if args.engine_url and args.gateway_url:
        engine_url, gateway_url = args.engine_url.rstrip("/"), args.gateway_url.rstrip("/")
    else:
        mesh, engine_url, gateway_url = start_mesh(args.run_dir)
    try:
        print(f"loading the fp32 reference ({args.reference_model})", flush=True)
        model = NumpyLlama.from_gguf(ROOT / args.reference_model)
        with tempfile.TemporaryDirectory(prefix="genmesh-eval-") as tmp:
            work = Path(tmp)
            write_tasks(work, data)
            hops = [
                evaluate_hop(name, url, engine_url, data, model, args.lm_eval_python, work)
                for name, url in (("engine", engine_url), ("gateway", gateway_url))
            ]
        for hop in hops:  # the embedding model served beside the chat model (make run's default)
            hop["embeddings"] = embeddings.check(hop["url"])
    finally:
        if mesh is not None:
            mesh.stop()
    return 0 if report(hops) else 1


if __name__ == "__main__":
    raise SystemExit(main())
