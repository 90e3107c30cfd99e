"""The in-process baseline runs the model the engine serves: for the default Q4_1 GGUF, which OpenVINO
GenAI misreads as it is, that is the engine's faithful re-encoding, never the file itself."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from genmesh.bench.inprocess import served_file
from genmesh.engine.core.config import CoreConfig
from genmesh.engine.core.model_loading import prepare_model
from genmesh.engine.settings import parse_settings
from support.servers import DEFAULT_MODEL


def test_the_baseline_loads_the_file_the_engine_core_loads() -> None:
    s = parse_settings(["--model", str(DEFAULT_MODEL)])
    fidelity = {k: getattr(s, k) for k in ("gguf_reencode", "gguf_reencode_type", "gguf_cache_dir")}
    config = dataclasses.replace(CoreConfig(str(DEFAULT_MODEL), "CPU", 1, 1, 16, True, False), **fidelity)
    engine_loads = prepare_model(config).path
    assert served_file(str(DEFAULT_MODEL)) == str(engine_loads)
    assert engine_loads.resolve() != DEFAULT_MODEL.resolve()  # Q4_1: the exact IR's folder, not the file


def test_an_ir_folder_is_loaded_as_it_is(tmp_path: Path) -> None:
    assert served_file(str(tmp_path)) == str(tmp_path)
