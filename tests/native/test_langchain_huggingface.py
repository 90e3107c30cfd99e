"""langchain-huggingface's ``HuggingFaceEndpointEmbeddings`` and ``HuggingFaceEndpoint`` at every hop
(the engine, the microservice, the gateway with an API key), run in .venv-opea by
tests/native/langchain_hf.py (one process for the three hops, ~10 s). Their vectors are
``/v1/embeddings``' (cosine 1.000000), their greedy text, plain and streamed, greedy
``/v1/completions``'; the class with its defaults (``typical_p`` 0.95) gets TGI's 422 ``validation`` naming it, which
huggingface_hub raises as its ``ValidationError``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from support.embeddings_mesh import Mesh
from support.servers import EMBEDDING_NAME, MODEL_NAME, ROOT

OPEA_PYTHON = ROOT / ".venv-opea" / "bin" / "python"
SCRIPT = Path(__file__).with_name("langchain_hf.py")
TEXTS = ["The cat sat on the mat.", "Paris is the capital of France."]
PROMPT = "The capital of France is"


def cosine(a: Any, b: Any) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def test_langchain_huggingface_at_every_hop(embedding_engine_url: str, embeddings_mesh: Mesh, tmp_path: Path) -> None:
    assert OPEA_PYTHON.is_file(), "run 'make opea-venv' first (make test does it)"
    engine = embedding_engine_url
    vectors = httpx.post(engine + "/v1/embeddings", json={"model": EMBEDDING_NAME, "input": TEXTS}, timeout=60).json()[
        "data"
    ]
    completion = httpx.post(
        engine + "/v1/completions",
        json={"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8, "temperature": 0},
        timeout=60,
    ).json()
    expected_text = completion["choices"][0]["text"]
    secret, _ = embeddings_mesh.key()
    hops = {"engine": (engine, ""), "microservice": (embeddings_mesh.microservice.url, "")}
    hops["gateway"] = (embeddings_mesh.gateway.url, secret)
    out = tmp_path / "langchain.json"
    argv = [str(OPEA_PYTHON), str(SCRIPT), "--prompt", PROMPT, "--max-new-tokens", "8", "--out", str(out)]
    for text in TEXTS:
        argv += ["--text", text]
    for name, (url, key) in hops.items():
        argv += ["--hop", name, url, key]
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_INFERENCE_ENDPOINT"):  # (offline mode refuses loopback too)
        env.pop(name, None)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    answers = json.loads(out.read_text())
    assert set(answers) == set(hops)
    for name, got in answers.items():
        assert round(cosine(got["query"], vectors[0]["embedding"]), 6) == 1.0, name
        assert len(got["documents"]) == len(TEXTS)
        for vector, ref in zip(got["documents"], vectors, strict=True):
            assert round(cosine(vector, ref["embedding"]), 6) == 1.0, name
        assert got["invoked"] == expected_text, name
        assert len(got["streamed"]) > 1, name  # token by token
        assert "".join(got["streamed"]) == expected_text, name
        refused = got["defaults_refused"]
        assert refused is not None, name
        assert refused["type"] == "ValidationError", (name, refused)
        assert "typical_p" in refused["message"]
