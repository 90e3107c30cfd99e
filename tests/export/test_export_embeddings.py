"""``genmesh-export embeddings_ov`` (the real console script in .venv-export): the checkpoint copied
into an OVMS repository with its embeddings graph and config.json entry, then served beside the
chat model by the real engine, its vectors the reference's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx

from genmesh.engine.models.ovms_embeddings_graph import embeddings_node_options
from support.embeddings import REFERENCE, SENTENCES, cosines, vectors_of
from support.exports import EXPORT_TIMEOUT_S, GENMESH_EXPORT, run_export
from support.servers import EMBEDDING_MODEL, ROOT, start_repository_engine


def export_embeddings(repo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert GENMESH_EXPORT.is_file(), "run 'make export-venv' first (make test does it)"
    argv = [str(GENMESH_EXPORT), "embeddings_ov", "--source_model", str(EMBEDDING_MODEL)]
    argv += ["--model_repository_path", str(repo), "--model_name", "minilm", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, cwd=ROOT, check=False)


def test_embeddings_export_is_served_beside_the_chat_model(tmp_path: Path) -> None:
    done = export_embeddings(tmp_path, "--truncate", "--num_streams", "1")
    assert done.returncode == 0, done.stderr
    graph = embeddings_node_options((tmp_path / "minilm" / "graph.pbtxt").read_text(), "graph")
    assert graph is not None
    assert (graph.pooling, graph.normalize_embeddings, graph.truncate) == ("MEAN", True, True)
    assert graph.plugin_config == {"NUM_STREAMS": "1"}
    again = export_embeddings(tmp_path, "--truncate")
    assert again.returncode == 0, again.stderr
    assert "reusing it" in again.stdout + again.stderr
    chat = run_export(tmp_path, "chat", "--weight-format", "int8", "--cache_size", "1")
    assert chat.returncode == 0, chat.stderr
    config = json.loads((tmp_path / "config.json").read_text())
    assert {e["name"] for e in config["mediapipe_config_list"]} == {"minilm", "chat"}
    server = start_repository_engine(tmp_path / "config.json", tmp_path)
    try:
        models = {m["id"] for m in httpx.get(server.url + "/v1/models", timeout=10).json()["data"]}
        assert models == {"minilm", "chat"}
        r = httpx.post(server.url + "/v3/embeddings", json={"model": "minilm", "input": SENTENCES[:10]}, timeout=60)
        assert r.status_code == 200, r.text
        assert cosines(vectors_of(r.json()), REFERENCE[:10]).min() >= 0.9999
    finally:
        server.stop()


def test_a_folder_that_is_not_a_checkpoint_is_refused(tmp_path: Path) -> None:
    assert GENMESH_EXPORT.is_file(), "run 'make export-venv' first (make test does it)"
    argv = [str(GENMESH_EXPORT), "embeddings_ov", "--source_model", str(tmp_path), "--model_repository_path"]
    done = subprocess.run([*argv, str(tmp_path / "repo")], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "model.safetensors" in done.stderr
