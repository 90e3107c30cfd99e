"""``genmesh-bench serve`` against the real engine: a handful of requests, counted and timed."""

from __future__ import annotations

import json
from pathlib import Path

from genmesh.bench.cli import main
from genmesh.bench.servers import int8_path
from support.servers import DEFAULT_MODEL


def test_serve_against_the_engine_writes_sane_results(engine_url: str, tmp_path: Path) -> None:
    rc = main(
        [
            "serve",
            "--base-url", engine_url,
            "--tokenizer", str(DEFAULT_MODEL),
            "--num-prompts", "4",
            "--max-concurrency", "2",
            "--random-input-len", "32",
            "--random-output-len", "8",
            "--warmup-requests", "1",
            "--goodput", "e2el:600000",
            "--result-dir", str(tmp_path),
            "--no-progress",
            "--no-plot",
        ]
    )  # fmt: skip
    assert rc == 0
    [path] = tmp_path.glob("serve-*.json")
    [result] = json.loads(path.read_text())
    assert (result["completed"], result["failed"]) == (4, 0)
    assert result["total_output_tokens"] == 32  # ignore_eos: exactly max_tokens each, from usage
    assert result["output_lens"] == [8, 8, 8, 8]
    assert all(n >= 32 for n in result["input_lens"])  # 32 random tokens plus the chat template
    assert result["max_concurrency"] == 2
    assert 0 < result["median_ttft_ms"] <= result["median_e2el_ms"]
    assert result["mean_tpot_ms"] > 0
    assert result["median_itl_ms"] > 0
    assert result["output_throughput"] > 0
    assert result["goodput"] == result["request_throughput"]  # a 10-minute SLO: every request meets it
    assert 0 <= result["steal_percent"] <= 100


def test_the_report_reads_which_path_multiplies_the_matrices(engine_url: str) -> None:
    # the engine's /v1/config names its path and why; the report's settings line carries both
    text = int8_path(engine_url)
    assert text.startswith(("matrices by genmesh's path (`", "matrices by openvino's path: ")), text
    assert len(text.split(": ", 1)[1]) > 10, text  # the reason, not an empty string


def test_a_server_without_the_config_gives_no_path() -> None:
    assert int8_path("http://127.0.0.1:9") == ""  # nothing listens on the discard port: no line, no crash
