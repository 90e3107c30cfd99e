"""An embeddings servable in an OVMS model repository, read without an engine: ``config.json``
with the chat model and all-MiniLM-L6-v2 side by side, and the embeddings ``graph.pbtxt``
(``EmbeddingsCalculatorOV``) with its options. tests/engine/server/test_embeddings_repository.py
serves the same repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from genmesh.engine.models.ovms_config import from_config
from genmesh.engine.models.ovms_embeddings_graph import EmbeddingsNodeOptions, embeddings_node_options, render
from genmesh.engine.models.ovms_graph import GraphError
from genmesh.engine.settings import EngineSettings
from support.embeddings import write_repository


def test_the_repository_splits_chat_and_embedding_models(tmp_path: Path) -> None:
    repo = from_config(write_repository(tmp_path), EngineSettings())
    assert [m.name for m in repo.models] == ["chat"]
    specs = {s.name: s.options for s in repo.embeddings}
    assert specs["mean"].pooling == "mean"
    assert specs["mean"].truncate
    assert specs["cls"].pooling == "cls"
    assert specs["cls"].normalize is False
    assert specs["plain"].pooling is None  # the checkpoint's own


def test_the_graph_round_trips_and_typos_are_errors() -> None:
    options = EmbeddingsNodeOptions(models_path="m", pooling="LAST", target_device="CPU", plugin_config={"A": "1"})
    assert embeddings_node_options(render(options), "g") == options
    with pytest.raises(GraphError, match="normalise"):
        embeddings_node_options(render(options).replace("pooling", "normalise: true,\n      pooling"), "g")
    with pytest.raises(GraphError, match="pooling"):
        embeddings_node_options(render(options).replace("LAST", "MAX"), "g")
