"""``make eval MODEL=``'s pieces that need no mesh: the served name from the file, the fixture per file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genmesh.accuracy import evaluate, fixture
from support.servers import DEFAULT_MODEL


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
        ("qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder-0.5b-instruct"),
        ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
        ("model.F16.gguf", "model"),
        ("model.IQ4_XS.gguf", "model"),
    ],
)
def test_the_served_name_is_the_file_stem_without_its_gguf_type(file: str, name: str) -> None:
    assert evaluate.served_name(Path(file)) == name


def test_the_default_model_gets_the_shipped_fixture_and_another_file_its_cached_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fixture, "CACHE_DIR", tmp_path)
    assert fixture.for_model(Path(DEFAULT_MODEL)) == fixture.load()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"not the default model")
    made = {"model": {"file": other.name}, "chat": [], "multiple_choice": []}
    fixture.cached(other, fixture._sha256(other)).write_text(json.dumps(made))
    assert fixture.for_model(other) == made  # found in the cache: nothing is built
