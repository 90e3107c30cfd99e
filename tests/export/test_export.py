"""genmesh-export on the default GGUF: the files OVMS's export_model.py writes, int8 weights, the
graph options as given, config.json entries kept, and no other model ever overwritten without
--overwrite_models. (Serving the export: tests/engine/server/test_ir_serving.py.)"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from genmesh.engine.models.ovms_config import from_config
from genmesh.engine.models.ovms_graph import llm_node_options
from genmesh.engine.settings import EngineSettings
from support.exports import EXPORT_VENV, run_export
from support.servers import DEFAULT_MODEL, ROOT

IR_FILES = [f"openvino_{m}.{e}" for m in ("model", "tokenizer", "detokenizer") for e in ("xml", "bin")]


def stamp(folder: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((folder / "genmesh_export.json").read_text())
    return data


def test_int8_export_is_an_ovms_model_folder(int8_export: Path) -> None:
    names = {p.name for p in int8_export.iterdir()}
    assert set(IR_FILES) | {"graph.pbtxt", "config.json", "tokenizer_config.json"} <= names
    options = llm_node_options((int8_export / "graph.pbtxt").read_text(), "graph.pbtxt")
    assert (options.models_path, options.cache_size, options.device) == ("./", 1, "CPU")
    assert options.enable_prefix_caching is False
    config = json.loads((int8_export.parent / "config.json").read_text())
    assert config["mediapipe_config_list"] == [{"name": "smol-int8", "base_path": "smol-int8"}]
    assert json.loads((int8_export / "config.json").read_text())["max_position_embeddings"] == 8192
    assert stamp(int8_export)["weight_format"] == "int8"
    # int8 weights: the matrices are u8 constants, and the weights file is half the fp16 one (~258 MiB)
    xml = (int8_export / "openvino_model.xml").read_text()
    assert len(re.findall(r'element_type="u8"', xml)) >= 200
    assert (int8_export / "openvino_model.bin").stat().st_size < 150 * 2**20
    # the chat template travels in the tokenizer IR (and in tokenizer_config.json for OVMS)
    rt_info = ElementTree.parse(int8_export / "openvino_tokenizer.xml").getroot().find("rt_info")
    assert rt_info is not None
    template = rt_info.find("chat_template")
    assert template is not None
    assert "<|im_start|>" in template.get("value", "")
    assert "<|im_start|>" in json.loads((int8_export / "tokenizer_config.json").read_text())["chat_template"]


def test_pipeline_options_reach_the_graph_and_other_entries_stay(tmp_path: Path) -> None:
    other = {"name": "other", "base_path": "elsewhere"}
    (tmp_path / "config.json").write_text(json.dumps({"model_config_list": [{"config": other}]}))
    flags = ["--weight-format", "fp16", "--target_device", "GPU.1", "--cache_size", "3", "--enable_prefix_caching"]
    flags += ["--max_num_seqs", "64", "--max_num_batched_tokens", "512", "--pipeline_type", "LM_CB"]
    flags += ["--kv_cache_precision", "u8"]
    done = run_export(tmp_path, "org/smol-fp16", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "org" / "smol-fp16"
    options = llm_node_options((folder / "graph.pbtxt").read_text())
    assert options.settings_overrides() == {
        "cache_size": 3,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 512,
        "enable_prefix_caching": True,
        "device": "GPU.1",
        "plugin_config": {"KV_CACHE_PRECISION": "u8"},
    }
    assert options.pipeline_type == "LM_CB"
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_config_list"] == [{"config": other}]
    assert config["mediapipe_config_list"] == [{"name": "org/smol-fp16", "base_path": "org/smol-fp16"}]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "model.gguf").symlink_to(DEFAULT_MODEL)
    repo = from_config(tmp_path / "config.json", EngineSettings())  # what the engine makes of it
    assert {m.name: m.source.kind for m in repo.models} == {"other": "gguf", "org/smol-fp16": "openvino_ir"}
    assert repo.models[1].settings.device == "GPU.1"


def test_a_different_model_is_never_overwritten_without_the_flag(tmp_path: Path) -> None:
    assert run_export(tmp_path, "m", "--weight-format", "fp16").returncode == 0
    folder = tmp_path / "m"
    refused = run_export(tmp_path, "m", "--weight-format", "int8")
    assert refused.returncode == 2
    assert f"{folder} holds another export" in refused.stderr
    assert "--overwrite_models" in refused.stderr
    assert stamp(folder)["weight_format"] == "fp16"
    same = run_export(tmp_path, "m", "--weight-format", "fp16", "--cache_size", "4")
    assert same.returncode == 0
    assert "already holds this export" in same.stderr
    assert llm_node_options((folder / "graph.pbtxt").read_text()).cache_size == 4, "the graph is rewritten"
    replaced = run_export(tmp_path, "m", "--weight-format", "int8", "--overwrite_models")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert stamp(folder)["weight_format"] == "int8"
    # a config.json entry of that name pointing at another folder is another model too
    (tmp_path / "config.json").write_text(json.dumps({"mediapipe_config_list": [{"name": "x", "base_path": "m"}]}))
    clash = run_export(tmp_path, "x", "--weight-format", "fp16")
    assert clash.returncode == 2
    assert f"{tmp_path / 'config.json'} already has a model 'x' at 'm'" in clash.stderr


def test_bad_sources_are_explained(tmp_path: Path) -> None:
    missing = run_export(tmp_path, "m", source=tmp_path / "nothing.gguf")
    assert (missing.returncode, "no such file or folder" in missing.stderr) == (2, True)
    (tmp_path / "notes.txt").write_text("x")
    assert "is a file but not a .gguf model" in run_export(tmp_path, "m", source=tmp_path / "notes.txt").stderr


HAS_OPTIMUM = (EXPORT_VENV / "bin" / "optimum-cli").is_file()


@pytest.mark.skipif(HAS_OPTIMUM, reason="optimum-intel is installed (make export-hf): the HF test runs instead")
def test_a_hugging_face_folder_needs_optimum(tmp_path: Path) -> None:
    hf = tmp_path / "hf-model"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    done = run_export(tmp_path, "m", source=hf)
    assert done.returncode == 2
    assert "make export-hf" in done.stderr


@pytest.mark.skipif(not HAS_OPTIMUM, reason="needs optimum-intel and torch in .venv-export: make export-hf")
def test_a_hugging_face_folder_is_exported_with_optimum(tmp_path: Path) -> None:
    hf = tmp_path / "hf-model"
    python = str(EXPORT_VENV / "bin" / "python")
    convert = [python, "scripts/vllm_cpu_convert.py", "--gguf", str(DEFAULT_MODEL), "--out", str(hf)]
    subprocess.run([*convert, "--dtype", "float32"], check=True, cwd=ROOT, timeout=600)
    done = run_export(tmp_path, "hf-int8", "--weight-format", "int8", source=hf)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "hf-int8"
    assert set(IR_FILES) <= {p.name for p in folder.iterdir()}
    repo = from_config(tmp_path / "config.json", EngineSettings())
    assert repo.models[0].source.kind == "openvino_ir"


def test_exact_export_is_the_ir_the_engine_serves(tmp_path: Path) -> None:
    """--weight-format exact: the engine's exact compressed IR of the Q4_1 GGUF (made by make model,
    sha256 in scripts/fetch_model.py), with the tokenizer IRs and metadata of any export."""
    done = run_export(tmp_path, "smol-exact", "--weight-format", "exact")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "smol-exact"
    assert set(IR_FILES) | {"graph.pbtxt", "config.json", "tokenizer_config.json"} <= {p.name for p in folder.iterdir()}
    assert stamp(folder)["weight_format"] == "exact"
    spec = importlib.util.spec_from_file_location("fetch_model", ROOT / "scripts" / "fetch_model.py")
    assert spec is not None
    assert spec.loader is not None
    fetch_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_model)
    assert fetch_model.weights_digest(folder / "openvino_model.xml") == fetch_model.EXACT_WEIGHTS_SHA256
    # the 210 Q4_1 matrices as u4 constants: q/k/v and gate/up of each layer fused (4 per layer, 30 layers)
    assert len(re.findall(r'element_type="u4"', (folder / "openvino_model.xml").read_text())) == 120
