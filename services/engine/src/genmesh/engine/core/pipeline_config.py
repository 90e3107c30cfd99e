"""The OpenVINO GenAI configs the engine core builds: the pipeline's scheduler config and each
request's generation config (one builder each, used by the core and by the in-process benchmark)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from . import ipc as m

# SchedulerConfig fields the engine's settings set, under the same names.
SCHEDULER_FIELDS = (
    "cache_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "dynamic_split_fuse",
    "enable_prefix_caching",
)
# SamplingParams fields that GenerationConfig takes as they are, whatever the decoding.
_PLAIN_GENERATION_FIELDS = (
    "max_new_tokens",
    "ignore_eos",
    "min_new_tokens",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
)


def _copied(target: Any, source: Any, names: Iterable[str]) -> Any:
    for name in names:
        setattr(target, name, getattr(source, name))
    return target


def scheduler_config(ov_genai: Any, source: Any, num_kv_blocks: int | None = None) -> Any:
    """An ``openvino_genai.SchedulerConfig`` with ``source``'s ``SCHEDULER_FIELDS`` (and a fixed
    number of KV cache blocks when given, instead of ``cache_size``'s)."""
    sc = _copied(ov_genai.SchedulerConfig(), source, SCHEDULER_FIELDS)
    if num_kv_blocks is not None:
        sc.num_kv_blocks = num_kv_blocks
    return sc


def pipeline_properties(
    plugin_config: dict[str, Any], prompt_lookup: bool, extension: str | None = None
) -> dict[str, Any]:
    """What ``ContinuousBatchingPipeline`` takes besides the scheduler config: the device's plugin
    config, ``prompt_lookup`` (which makes it a prompt-lookup pipeline: every request then
    sets ``num_assistant_tokens`` and ``max_ngram_size``), and ``extensions`` (OpenVINO GenAI adds
    them to its ``ov::Core`` before it reads the model: the int8 extension's ``genmesh::Q41MatMul``)."""
    properties = {**plugin_config, "prompt_lookup": True} if prompt_lookup else dict(plugin_config)
    if extension is not None:
        properties["extensions"] = [extension]
    return properties


def _structured_output(ov_genai: Any, c: m.Constraint) -> Any:
    config = ov_genai.StructuredOutputConfig
    if c.grammar is not None:
        return config(grammar=c.grammar)
    tags = [config.Tag(t.begin, config.EBNF(t.grammar), t.end) for t in c.tags]
    out = config()
    out.structural_tags_config = config.TriggeredTags(triggers=list(c.triggers), tags=tags)
    return out


def generation_config(ov_genai: Any, params: m.SamplingParams, assistant_confidence: float | None = None) -> Any:
    """One request's ``openvino_genai.GenerationConfig``: greedy, sampling or beam search (and, on a
    pipeline with a draft model, ``assistant_confidence`` when the request names no draft length)."""
    gc = _copied(ov_genai.GenerationConfig(), params, _PLAIN_GENERATION_FIELDS)
    if params.stop_token_ids:
        gc.stop_token_ids = set(params.stop_token_ids)
    if params.logprobs:
        gc.logprobs = 1
    if params.beam_search:
        gc.do_sample = False
        _copied(gc, params, ("num_beams", "num_return_sequences", "length_penalty"))
    elif params.temperature > 0.0:
        gc.do_sample = True
        _copied(gc, params, ("temperature", "top_p"))
        if params.top_k > 0:
            gc.top_k = params.top_k
        if params.min_p > 0.0:
            gc.min_p = params.min_p
        gc.rng_seed = params.seed if params.seed is not None else random.getrandbits(31)
    else:
        gc.do_sample = False
    if params.num_assistant_tokens:
        _copied(gc, params, ("num_assistant_tokens", "max_ngram_size"))
    elif assistant_confidence:
        gc.assistant_confidence_threshold = assistant_confidence
    if params.constraint is not None:
        gc.structured_output_config = _structured_output(ov_genai, params.constraint)
    return gc
