"""``genmesh-bench embeddings`` against the real engine serving all-MiniLM-L6-v2 beside the chat model:
rows that count what was served, and the chat-cost rounds (the same engine as both variants here)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from genmesh.bench import embeddings
from genmesh.bench.cli import main
from genmesh.bench.render import chat_cost_table


def test_embeddings_rows_count_what_was_served(embedding_engine_url: str, tmp_path: Path) -> None:
    argv = ["embeddings", "--base-url", embedding_engine_url, "--concurrency", "1", "2", "--lengths", "short"]
    rc = main([*argv, "--duration-s", "0.5", "--rounds", "1", "--result-dir", str(tmp_path)])
    assert rc == 0
    [path] = tmp_path.glob("embeddings-*.json")
    rows = json.loads(path.read_text())["rows"]
    assert [(r["target"], r["concurrency"], r["tokens"]) for r in rows] == [("genmesh", 1, 16), ("genmesh", 2, 16)]
    for r in rows:
        assert r["failed"] == 0
        assert r["inputs_per_s"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert "| genmesh | short (16 tokens) | 2 |" in embeddings.table(rows)


def test_chat_cost_rounds_measure_chat_and_the_embeddings_beside_it(embedding_engine_url: str) -> None:
    parser = argparse.ArgumentParser()
    embeddings.add_arguments(parser)
    args = parser.parse_args(["--rounds", "1", "--chat-requests", "4", "--chat-max-tokens", "8"])
    args.chat_concurrency = 2
    rows = asyncio.run(embeddings._chat_cost(embedding_engine_url, embedding_engine_url, args))
    by = {r["variant"]: r for r in rows}
    assert list(by) == ["chat model alone", "both models, embeddings idle", "both models, 4 embedding clients"]
    assert all(r["chat_tok_s"] > 0 for r in rows)
    assert by["chat model alone"]["ratio"] == 1.0
    assert by["both models, embeddings idle"]["embeddings_per_s"] == 0
    assert by["both models, 4 embedding clients"]["embeddings_per_s"] > 0
    assert "| both models, 4 embedding clients |" in chat_cost_table(rows, args, *embeddings.CHAT_COST_BESIDE)
