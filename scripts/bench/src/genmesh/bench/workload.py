"""What both sides of a comparison run: the prompts, the generation limits and the scheduler settings.

The HTTP server and the in-process pipeline must do identical work, so both take their
settings from one :class:`Workload` and one :class:`Scheduler`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from genmesh.engine.settings import EngineSettings

TOPICS = (
    "a lighthouse keeper",
    "a lost robot",
    "the first snow of winter",
    "a dragon who hates fire",
    "a city under the sea",
    "a clockmaker's apprentice",
    "a talking cat",
    "a journey to the moon",
    "an old oak tree",
    "a forgotten library",
    "a desert caravan",
    "a haunted train station",
    "a chess champion",
    "a mountain village",
    "a pirate's map",
    "a garden on Mars",
)


def default_prompts(n: int) -> list[str]:
    """``n`` fixed, distinct user messages of similar length."""
    return [f"Request {i + 1}: write a short story about {TOPICS[i % len(TOPICS)]}." for i in range(n)]


def _engine_default(name: str) -> Any:
    return EngineSettings.model_fields[name].default


@dataclass(frozen=True)
class Scheduler:
    """``SchedulerConfig`` fields (defaults: the engine's own defaults) and the plugin config."""

    cache_size: int = _engine_default("cache_size")
    max_num_seqs: int = _engine_default("max_num_seqs")
    max_num_batched_tokens: int = _engine_default("max_num_batched_tokens")
    dynamic_split_fuse: bool = _engine_default("dynamic_split_fuse")
    enable_prefix_caching: bool = _engine_default("enable_prefix_caching")
    plugin_config: dict[str, Any] = field(default_factory=dict)

    def engine_flags(self) -> list[str]:
        """The same settings as ``genmesh-engine`` flags (all of them, so environment defaults cannot differ)."""
        return [
            "--cache-size",
            str(self.cache_size),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--dynamic-split-fuse" if self.dynamic_split_fuse else "--no-dynamic-split-fuse",
            "--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching",
            "--plugin-config",
            json.dumps(self.plugin_config),
        ]

    def to_openvino(self, ov_genai: Any) -> Any:
        """An ``openvino_genai.SchedulerConfig`` built as the engine core builds it."""
        sc = ov_genai.SchedulerConfig()
        sc.cache_size = self.cache_size
        sc.max_num_seqs = self.max_num_seqs
        sc.max_num_batched_tokens = self.max_num_batched_tokens
        sc.dynamic_split_fuse = self.dynamic_split_fuse
        sc.enable_prefix_caching = self.enable_prefix_caching
        return sc


@dataclass(frozen=True)
class Workload:
    """N chat requests, greedy, ``ignore_eos``, ``max_tokens`` new tokens each."""

    prompts: tuple[str, ...]
    max_tokens: int
    warmup_requests: int = 4
    warmup_max_tokens: int = 16

    @property
    def concurrency(self) -> int:
        return len(self.prompts)

    @property
    def warmup_prompts(self) -> tuple[str, ...]:
        return self.prompts[: self.warmup_requests]

    def chat_body(self, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        """The streaming request the HTTP side sends (greedy: ``temperature`` 0)."""
        return {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }

    def generation_config(self, ov_genai: Any, max_tokens: int) -> Any:
        """The ``GenerationConfig`` the engine core makes of :meth:`chat_body` (greedy branch)."""
        gc = ov_genai.GenerationConfig()
        gc.max_new_tokens = max_tokens
        gc.ignore_eos = True
        gc.do_sample = False
        return gc
