"""The one builder of the pipeline's scheduler config and of each request's generation config."""

from __future__ import annotations

from types import SimpleNamespace

from genmesh.engine.core import ipc as m
from genmesh.engine.core.config import CoreConfig
from genmesh.engine.core.pipeline_config import (
    SCHEDULER_FIELDS,
    generation_config,
    pipeline_properties,
    scheduler_config,
)


class _Config:
    """Stands in for an OpenVINO GenAI config: takes any attribute."""


FAKE_OV_GENAI = SimpleNamespace(SchedulerConfig=_Config, GenerationConfig=_Config)


def test_the_scheduler_config_takes_every_scheduler_setting() -> None:
    config = CoreConfig("model", "CPU", 3, 7, 64, dynamic_split_fuse=False, enable_prefix_caching=True)
    sc = scheduler_config(FAKE_OV_GENAI, config)
    assert {name: getattr(sc, name) for name in SCHEDULER_FIELDS} == {
        "cache_size": 3,
        "max_num_seqs": 7,
        "max_num_batched_tokens": 64,
        "dynamic_split_fuse": False,
        "enable_prefix_caching": True,
    }
    assert not hasattr(sc, "num_kv_blocks")
    assert scheduler_config(FAKE_OV_GENAI, config, num_kv_blocks=16).num_kv_blocks == 16


def test_greedy_sampling_and_beam_search_configs() -> None:
    greedy = generation_config(FAKE_OV_GENAI, m.SamplingParams(max_new_tokens=5, temperature=0.0, ignore_eos=True))
    assert (greedy.max_new_tokens, greedy.ignore_eos, greedy.do_sample) == (5, True, False)
    assert not hasattr(greedy, "temperature")
    sampled = generation_config(FAKE_OV_GENAI, m.SamplingParams(max_new_tokens=5, temperature=0.5, top_p=0.9, seed=3))
    assert (sampled.do_sample, sampled.temperature, sampled.top_p, sampled.rng_seed) == (True, 0.5, 0.9, 3)
    beams = generation_config(FAKE_OV_GENAI, m.SamplingParams(max_new_tokens=5, num_beams=3, num_return_sequences=2))
    assert (beams.do_sample, beams.num_beams, beams.num_return_sequences) == (False, 3, 2)


def test_prompt_lookup_reaches_the_pipeline_and_each_request() -> None:
    assert pipeline_properties({"KV_CACHE_PRECISION": "u8"}, False) == {"KV_CACHE_PRECISION": "u8"}
    assert pipeline_properties({}, True) == {"prompt_lookup": True}
    plain = generation_config(FAKE_OV_GENAI, m.SamplingParams(max_new_tokens=5, temperature=0.0))
    assert not hasattr(plain, "num_assistant_tokens")
    params = m.SamplingParams(max_new_tokens=5, temperature=0.0, num_assistant_tokens=4, max_ngram_size=2)
    looked = generation_config(FAKE_OV_GENAI, params)
    assert (looked.num_assistant_tokens, looked.max_ngram_size, looked.do_sample) == (4, 2, False)
