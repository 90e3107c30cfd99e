"""Rerank servables in an OVMS model repository, read without an engine: a ``RerankCalculatorOV``
graph and its options, a bare cross-encoder folder told apart from an embedding model's, and the
rerank and score bodies of the shared wire format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from genmesh.engine.models.ovms_config import from_config
from genmesh.engine.models.ovms_graph import GraphError
from genmesh.engine.models.ovms_rerank_graph import RerankNodeOptions, render, rerank_node_options
from genmesh.engine.settings import EngineSettings
from genmesh.protocol import RerankRequest, ScoreRequest
from support.servers import EMBEDDING_MODEL


def _cross_folder(path: Path) -> Path:
    path.mkdir()
    for name in ("tokenizer.json", "model.safetensors"):
        (path / name).symlink_to(EMBEDDING_MODEL / name)
    cfg = json.loads((EMBEDDING_MODEL / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertForSequenceClassification"]}))
    return path


def test_the_repository_tells_rerank_graphs_and_cross_encoders_from_embedding_models(tmp_path: Path) -> None:
    _cross_folder(tmp_path / "ce")
    (tmp_path / "minilm").symlink_to(EMBEDDING_MODEL)
    (tmp_path / "graph").mkdir()
    options = RerankNodeOptions(models_path="../ce", max_allowed_chunks=7, max_position_embeddings=64)
    (tmp_path / "graph" / "graph.pbtxt").write_text(render(options))
    entries = [{"name": n, "base_path": n} for n in ("ce", "minilm", "graph")]
    (tmp_path / "config.json").write_text(json.dumps({"mediapipe_config_list": entries}))
    settings = EngineSettings(rerank_max_allowed_chunks=99, rerank_max_documents=5)
    specs = {s.name: s.options for s in from_config(tmp_path / "config.json", settings).embeddings}
    assert {n: o.kind for n, o in specs.items()} == {"ce": "rerank", "minilm": "embeddings", "graph": "rerank"}
    assert (specs["ce"].max_allowed_chunks, specs["ce"].max_length, specs["ce"].max_documents) == (99, None, 5)
    assert (specs["graph"].max_allowed_chunks, specs["graph"].max_length) == (7, 64)
    assert specs["graph"].path.resolve() == (tmp_path / "ce").resolve()


def test_the_rerank_graph_round_trips_and_typos_are_errors() -> None:
    options = RerankNodeOptions(models_path="m", max_allowed_chunks=10, target_device="CPU", plugin_config={"A": "1"})
    assert rerank_node_options(render(options), "g") == options
    with pytest.raises(GraphError, match="max_chunks"):
        rerank_node_options(render(options).replace("max_allowed_chunks", "max_chunks"), "g")


def test_rerank_and_score_bodies() -> None:
    body = RerankRequest.model_validate({"query": "q", "documents": ["a", {"text": "b", "title": "t"}]})
    assert body.texts() == ["a", "b"]
    for bad, field in (({"documents": []}, "documents"), ({"documents": ["a"], "top_n": 0}, "top_n")):
        with pytest.raises(ValidationError, match=field):
            RerankRequest.model_validate({"query": "q", **bad})
    assert ScoreRequest(text_1="q", text_2=["a", "b"]).pairs() == (["q", "q"], ["a", "b"])
    assert ScoreRequest(text_1=["x", "y"], text_2=["a", "b"]).pairs() == (["x", "y"], ["a", "b"])
    with pytest.raises(ValueError, match="text_1 holds 2"):
        ScoreRequest(text_1=["x", "y"], text_2=["a", "b", "c"]).pairs()
