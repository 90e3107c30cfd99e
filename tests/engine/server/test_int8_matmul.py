"""The int8 path for the exact form's Q4_1 matmuls (genmesh::Q41MatMul, genmesh.engine.native), forced with
``--int8-matmul genmesh`` on whatever CPU runs the suite, against the session's default engine.

The op's arithmetic differs from OpenVINO's (int8 activations per block of 32, as llama.cpp's Q8_1), so no
test compares text: the forced engine serves chat, ``/v1/config`` names its path and why, and its
teacher-forced log-probabilities along the fp32 reference's greedy answers (genmesh/accuracy/reference.json,
as tests/engine/server/test_accuracy.py) stay within make eval's floor of the reference and close to the
default engine's. Measured on AMD EPYC Zen 4 (family 25 model 17; bf16 arithmetic around the op): median |Δ| to
the reference 0.013 nats (the default engine's 0.012), top token 99.0 % of 98 (98.0 %); between the two engines
median 0.018 nats, p95 0.16. With the eight-column kernel (2026-12-06, same CPU): 0.014 nats (0.015), p95 0.097
(0.112), top token 98.0 % (98.0 %); between the engines median 0.021, p95 0.18.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from genmesh.accuracy import fixture
from genmesh.accuracy.compare import answer_pairs, token_figures
from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR, EXACT_OP_KEY, cache_folder
from genmesh.engine.models.cpu_threads import cpu_flags
from genmesh.engine.native.selection import AVX2_FLAGS, INT8_FLAGS, choose
from support.servers import DEFAULT_MODEL, GENMESH_ENGINE_ONLY, MODEL_NAME, start_engine

pytestmark = GENMESH_ENGINE_ONLY

COMP = "/v1/completions"


@pytest.fixture(scope="module")
def forced_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_engine(
        tmp_path_factory.mktemp("int8-engine-logs"), "--int8-matmul", "genmesh", "--served-model-name", MODEL_NAME
    )
    yield server.url
    server.stop()


def int8_config(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/v1/config", timeout=30)
    assert r.status_code == 200, r.text
    described: dict[str, Any] = r.json()[MODEL_NAME]["int8_matmul"]
    return described


def score(client: httpx.Client, url: str, ids: list[int]) -> dict[str, Any]:
    r = client.post(url + COMP, json={"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1})
    assert r.status_code == 200, r.text
    lp: dict[str, Any] = r.json()["choices"][0]["logprobs"]
    return lp


def test_the_forced_engine_serves_chat_through_the_op(forced_url: str) -> None:
    described = int8_config(forced_url)
    assert described["path"] == "genmesh", described
    assert described["op"] == "genmesh::Q41MatMul, genmesh::Q4KMatMul, genmesh::Q6KMatMul, genmesh::Q80MatMul"
    assert described["reason"].startswith("--int8-matmul genmesh"), described
    assert Path(described["library"]).is_file()
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12}
    r = httpx.post(forced_url + "/v1/chat/completions", json={**body, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    # every Q4_1 matmul of the exact form became the op (SmolLM2: 7 per layer x 30 layers), and its Q8_0 output
    # matrix (tied to the embedding, whose Gather stays GenAI's) Q80MatMul, in its own folder
    marker = cache_folder(DEFAULT_MODEL.resolve(), Path(DEFAULT_CACHE_DIR).expanduser(), EXACT_OP_KEY) / "exact.json"
    written = json.loads(marker.read_text())
    assert (written["q41_matmul_ops"], written["q80_matmul_ops"], written["rewritten_matmuls"]) == (210, 1, 211)


def test_the_default_engine_runs_openvinos_path_and_auto_would_choose_by_the_cpu(engine_url: str) -> None:
    described = int8_config(engine_url)
    assert described["path"] == "openvino", described  # the default until the op is measured on AVX2 CPUs
    assert described["reason"].startswith("--int8-matmul openvino"), described
    flags = cpu_flags()
    expected = "genmesh" if flags >= AVX2_FLAGS and not (flags & INT8_FLAGS) else "openvino"
    assert choose("auto", flags, lambda: Path("lib.so")).path == expected, sorted(flags & (INT8_FLAGS | AVX2_FLAGS))


def test_teacher_forced_logprobs_stay_within_the_floor_and_near_the_default(forced_url: str, engine_url: str) -> None:
    items = fixture.load()["chat"][::3]  # 10 answers, 98 tokens
    forced: list[tuple[float, float, bool]] = []
    default: list[tuple[float, float, bool]] = []
    with httpx.Client(timeout=120) as client:
        for c in items:
            ids = c["prompt_ids"] + c["answer_ids"]
            forced += answer_pairs(score(client, forced_url, ids), c)
            default += answer_pairs(score(client, engine_url, ids), c)
    figures = token_figures(forced)
    between = np.abs(np.array([f[0] for f in forced]) - np.array([d[0] for d in default]))
    # the figures, for the docs (pytest -rP shows them)
    print(f"forced vs reference: {figures}; default vs reference: {token_figures(default)}")
    print(f"between the engines: median {np.median(between):.4f}, p95 {np.percentile(between, 95):.4f}")
    assert figures.tokens >= 90
    assert figures.median_dlp <= 0.05, figures  # make eval's floor against the fp32 reference
    assert figures.top_agreement >= 0.9, figures
    assert float(np.median(between)) <= 0.05, (float(np.median(between)), float(np.percentile(between, 95)))
    assert float(np.percentile(between, 95)) <= 0.3, float(np.percentile(between, 95))
