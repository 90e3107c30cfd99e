"""Settings and model sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genmesh.engine.models.source import ModelSourceError, resolve
from genmesh.engine.openai.sampling_params import check_prompt_lookup
from genmesh.engine.settings import EngineSettings, parse_settings
from genmesh.protocol import CompletionRequest, OpenAIError
from support.servers import DEFAULT_MODEL
from support.service_cli import ENGINE_FLAGS, check_flags, refusal


def test_every_flag_of_before_is_accepted_and_in_the_help() -> None:
    check_flags(parse_settings, EngineSettings, ENGINE_FLAGS)


def test_bad_values_exit_2_naming_the_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--port (GENMESH_ENGINE_PORT)" in refusal(parse_settings, ["--port", "0"])
    assert "--gguf-reencode-type" in refusal(parse_settings, ["--gguf-reencode-type", "Q4_0"])
    assert "--cache-size" in refusal(parse_settings, ["--cache-size", "two"])
    monkeypatch.setenv("GENMESH_ENGINE_MAX_NUM_SEQS", "lots")
    assert "GENMESH_ENGINE_MAX_NUM_SEQS" in refusal(parse_settings, [])


def test_cli_overrides_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENMESH_ENGINE_CACHE_SIZE", "7")
    monkeypatch.setenv("GENMESH_ENGINE_MAX_NUM_SEQS", "12")
    monkeypatch.setenv("GENMESH_ENGINE_ENABLE_PREFIX_CACHING", "false")  # the default is on
    s = parse_settings(
        ["--cache-size", "3", "--no-dynamic-split-fuse", "--plugin-config", '{"KV_CACHE_PRECISION":"u8"}']
    )
    assert s.cache_size == 3
    assert s.max_num_seqs == 12
    assert s.enable_prefix_caching is False
    assert s.dynamic_split_fuse is False
    assert s.plugin_config == {"KV_CACHE_PRECISION": "u8"}


def test_prompt_lookup_by_flag_or_by_ovms_plugin_config() -> None:
    off = parse_settings(["--plugin-config", '{"KV_CACHE_PRECISION":"u8"}'])
    assert (off.uses_prompt_lookup, off.request_lookup) == (False, (0, 0))
    assert off.device_config == {"KV_CACHE_PRECISION": "u8", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    flag = parse_settings(["--prompt-lookup", "--num-assistant-tokens", "4"])
    assert (flag.uses_prompt_lookup, flag.request_lookup) == (True, (4, 3))
    ovms = parse_settings(["--plugin-config", '{"prompt_lookup": true, "KV_CACHE_PRECISION":"u8"}'])
    assert ovms.uses_prompt_lookup is True
    assert "prompt_lookup" not in ovms.device_config  # the device never sees the pipeline's key
    assert parse_settings(["--plugin-config", '{"prompt_lookup": false}']).uses_prompt_lookup is False


def test_the_activation_quantization_group_size_is_a_flag_the_plugin_config_overrides() -> None:
    key = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
    assert parse_settings([]).device_config[key] == 0  # off: OpenVINO's 32 misses the floor on VNNI CPUs
    assert parse_settings(["--dynamic-quantization-group-size", "32"]).device_config[key] == 32
    assert parse_settings(["--plugin-config", '{"DYNAMIC_QUANTIZATION_GROUP_SIZE": 64}']).device_config[key] == 64
    assert key not in parse_settings(["--device", "GPU"]).device_config
    assert "--dynamic-quantization-group-size" in refusal(parse_settings, ["--dynamic-quantization-group-size", "-1"])
    # The request defaults may not exceed the limit a request is held to.
    assert "--prompt-lookup-limit" in refusal(parse_settings, ["--prompt-lookup-limit", "4"])
    assert "--prompt-lookup-limit" in refusal(parse_settings, ["--max-ngram-size", "9", "--prompt-lookup-limit", "8"])
    assert parse_settings(["--num-assistant-tokens", "4", "--prompt-lookup-limit", "4"]).prompt_lookup_limit == 4


def test_false_in_environment_is_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENMESH_ENGINE_DYNAMIC_SPLIT_FUSE", "False")
    assert parse_settings([]).dynamic_split_fuse is False


def test_gguf_source_reads_context_and_name() -> None:
    src = resolve(str(DEFAULT_MODEL))
    assert src.kind == "gguf"
    assert src.context_length == 8192
    assert src.served_name == "SmolLM2-135M-Instruct"
    assert resolve(str(DEFAULT_MODEL), "custom", 2048).served_name == "custom"
    assert resolve(str(DEFAULT_MODEL), None, 2048).context_length == 2048


def test_openvino_ir_folder_is_recognised(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen2.5-0.5B-Instruct-int4-ov"
    folder.mkdir()
    for name in ("openvino_model", "openvino_tokenizer", "openvino_detokenizer"):
        (folder / f"{name}.xml").write_text("<net/>")  # resolving reads no IR: the files must only exist
        (folder / f"{name}.bin").write_bytes(b"")
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    src = resolve(str(folder))
    assert (src.kind, src.context_length, src.served_name) == ("openvino_ir", 32768, folder.name)


def test_bad_sources_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="does not exist"):
        resolve(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelSourceError, match="neither"):
        resolve(str(tmp_path))
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(ModelSourceError, match=r"not a \.gguf"):
        resolve(str(other))


def test_a_draft_model_sets_the_request_defaults_and_excludes_prompt_lookup() -> None:
    drafting = parse_settings(["--draft-model", "draft.gguf", "--num-assistant-tokens", "4"])
    assert (drafting.uses_assistant, drafting.uses_prompt_lookup, drafting.request_lookup) == (True, False, (4, 0))
    by_confidence = parse_settings(["--draft-model", "d.gguf", "--assistant-confidence-threshold", "0.3"])
    assert by_confidence.request_lookup == (0, 0)  # the threshold decides how many tokens are drafted
    assert "choose one" in refusal(parse_settings, ["--prompt-lookup", "--draft-model", "draft.gguf"])
    assert "--assistant-confidence-threshold" in refusal(parse_settings, ["--assistant-confidence-threshold", "1.5"])


@pytest.mark.parametrize("temperature", [None, 0.7])  # None: OpenAI's default, 1
@pytest.mark.parametrize("cache", [[], ["--no-enable-prefix-caching"]])
def test_a_drafting_engine_refuses_sampled_requests_whatever_its_prefix_cache(
    temperature: float | None, cache: list[str]
) -> None:
    """OpenVINO GenAI's sampled speculative decoding changes the model's distribution (docs/qwen.md)."""
    drafting = parse_settings(["--draft-model", "draft.gguf", *cache])
    with pytest.raises(OpenAIError) as refused:
        check_prompt_lookup(CompletionRequest(prompt="Hi", temperature=temperature), drafting)
    assert (refused.value.status, refused.value.param) == (400, "temperature")
    assert "distribution" in refused.value.message
    check_prompt_lookup(CompletionRequest(prompt="Hi", temperature=0), drafting)  # greedy: served
