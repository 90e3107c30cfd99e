#!/usr/bin/env python3
"""Run lm-evaluation-harness against one hop of the mesh; write per-item results as JSON.

Runs in ``make eval``'s own virtual environment (.venv-eval: lm-eval and the CPU build of
torch, which lm-eval imports), never in the services' one. Loglikelihood items go through
lm-eval's ``local-completions`` (token-id prompts, ``echo`` + ``logprobs``), chat items through
``local-chat-completions``. Both tokenise with the engine's own tokenizer (lm-eval's remote
tokenizer backend: ``/tokenizer_info``, ``/tokenize``, ``/detokenize`` on the engine), while the
requests themselves go to ``--base-url``, which may be the gateway.

Usage: lm_eval_mesh.py --base-url URL --engine-url URL --model NAME --tasks-dir DIR --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the tasks are local files
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from lm_eval import simple_evaluate
from lm_eval.api.registry import register_model
from lm_eval.models.openai_completions import LocalCompletionsAPI
from lm_eval.tasks import TaskManager


@register_model("genmesh-completions")
class MeshCompletions(LocalCompletionsAPI):  # type: ignore[misc]
    """``local-completions`` whose remote tokenizer is the engine's, wherever the requests go."""

    def __init__(self, base_url: str, engine_url: str, **kwargs: Any) -> None:
        super().__init__(base_url=f"{engine_url}/v1/completions", tokenizer_backend="remote", **kwargs)
        self.base_url = base_url


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True, help="the hop under test, e.g. http://127.0.0.1:8888")
    p.add_argument("--engine-url", required=True, help="the engine (its tokenizer endpoints)")
    p.add_argument("--model", required=True)
    p.add_argument("--tasks-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--num-concurrent", type=int, default=4)
    args = p.parse_args()
    manager = TaskManager(include_path=args.tasks_dir)
    common = {"model": args.model, "num_concurrent": args.num_concurrent, "max_retries": 1, "timeout": 300}
    mc = simple_evaluate(
        model="genmesh-completions",
        model_args={**common, "base_url": f"{args.base_url}/v1/completions", "engine_url": args.engine_url},
        tasks=["genmesh_choice"],
        task_manager=manager,
        log_samples=True,
    )
    chat = simple_evaluate(
        model="local-chat-completions",
        model_args={**common, "base_url": f"{args.base_url}/v1/chat/completions", "tokenizer_backend": None},
        tasks=["genmesh_chat"],
        task_manager=manager,
        log_samples=True,
        apply_chat_template=True,
    )
    out = {
        "choice": [
            {"id": s["doc"]["id"], "ll": [r[0][0] for r in s["resps"]], "greedy": [bool(r[0][1]) for r in s["resps"]]}
            for s in mc["samples"]["genmesh_choice"]
        ],
        "chat": [{"id": s["doc"]["id"], "answer": s["resps"][0][0]} for s in chat["samples"]["genmesh_chat"]],
        "lm_eval": {"choice": mc["results"]["genmesh_choice"], "chat": chat["results"]["genmesh_chat"]},
    }
    Path(args.out).write_text(json.dumps(out, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
