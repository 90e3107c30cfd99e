"""Everything one engine server holds, built at start-up and torn down at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from genmesh.protocol import model_not_found

from ..client.core_client import CoreClient
from ..client.generation import Generator
from ..client.scoring_client import Scoring
from ..client.supervisor import CoreSupervisor
from ..core.config import CoreConfig
from ..core.gguf_tokenizer import tokenizer_source
from ..grammar import FreeJsonCaps, GrammarLimits, any_object_grammar
from ..metrics import EngineMetrics
from ..models.int8_path import int8_choice
from ..models.source import ModelSource
from ..native.selection import Int8Choice
from ..settings import EngineSettings, model_names
from .prompts import PromptTokenizer

log = logging.getLogger("genmesh.engine")


def grammar_limits(s: EngineSettings) -> GrammarLimits:
    """The structured-output limits in the engine's settings."""
    free = FreeJsonCaps(
        max_string=s.structured_free_json_max_string,
        max_key=s.structured_free_json_max_key,
        max_items=s.structured_free_json_max_items,
        max_depth=s.structured_free_json_max_depth,
    )
    return GrammarLimits(
        max_depth=s.structured_max_depth,
        max_grammar_bytes=s.structured_max_grammar_bytes,
        max_repeat=s.structured_max_repeat,
        max_items=s.structured_max_items,
        free=free,
    )


@dataclass
class EngineState:
    settings: EngineSettings
    source: ModelSource
    tokenizer: PromptTokenizer
    core: CoreSupervisor
    metrics: EngineMetrics
    generator: Generator
    scoring: Scoring
    int8: Int8Choice  # which path multiplies the exact form's Q4_1 matrices, and why (/v1/config)

    @property
    def model_name(self) -> str:
        return self.source.served_name

    @property
    def grammar_limits(self) -> GrammarLimits:
        return grammar_limits(self.settings)

    def check_model(self, model: str | None) -> str:
        if model is None or model in (self.source.served_name, str(self.source.path), self.settings.model):
            return self.source.served_name
        if model in model_names(self.settings.served_model_name)[1]:  # an alias (--served-model-name a,b)
            return self.source.served_name
        raise model_not_found(model)

    @classmethod
    async def start(
        cls,
        settings: EngineSettings,
        source: ModelSource,
        metrics: EngineMetrics | None = None,
        on_fatal: Callable[[int], None] | None = None,
    ) -> EngineState:
        """Load one model: its core process and, alongside, its tokenizer. ``settings`` are the
        model's own (server-wide flags with its graph.pbtxt options applied). The core is then
        supervised (replaced when it dies or hangs); ``on_fatal(exit status)`` is called if that
        keeps failing."""
        metrics = metrics if metrics is not None else EngineMetrics(source.served_name)
        int8 = await asyncio.to_thread(int8_choice, settings)
        log.log(
            logging.WARNING if int8.fell_back else logging.INFO, "model %s: %s", source.served_name, int8.log_line()
        )
        config = CoreConfig(
            model_path=str(source.path),
            device=settings.device,
            cache_size=settings.cache_size,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            dynamic_split_fuse=settings.dynamic_split_fuse,
            enable_prefix_caching=settings.enable_prefix_caching,
            num_kv_blocks=settings.num_kv_blocks,
            plugin_config=settings.device_config,
            prompt_lookup=settings.uses_prompt_lookup,
            draft_model=settings.draft_model,
            draft_quantization=None if settings.draft_quantization == "none" else settings.draft_quantization,
            assistant_confidence_threshold=settings.assistant_confidence_threshold,
            max_cpu_isa=settings.max_cpu_isa,
            warmup_grammars=(any_object_grammar(grammar_limits(settings)).render(),),
            gguf_reencode=settings.gguf_reencode,
            gguf_reencode_type=settings.gguf_reencode_type,
            gguf_cache_dir=settings.gguf_cache_dir,
            max_num_scoring_seqs=settings.max_num_scoring_seqs,
            scoring_chunk_tokens=settings.scoring_chunk_tokens,
            int8_extension=str(int8.library) if int8.library is not None else None,
        )
        engine_metrics = metrics

        def make_core() -> CoreClient:
            return CoreClient(
                config,
                log_level=settings.log_level,
                on_stats=engine_metrics.set_stats,
                stats_log_interval_s=settings.stats_log_interval_s,
                stall_timeout_s=settings.stall_timeout_s,
            )

        core = CoreSupervisor(source.served_name, make_core, settings, metrics, on_fatal)
        log.info("starting engine core for %s (%s, %s)", source.served_name, source.kind, source.path)

        # The tokenizer loads in a thread while the core process loads the pipeline (a GGUF's from
        # its metadata alone: core/gguf_tokenizer.py).
        def load_tokenizer() -> PromptTokenizer:
            return PromptTokenizer(tokenizer_source(source.path, settings.gguf_cache_dir), source.template_dir)

        tokenizer_task = asyncio.create_task(asyncio.to_thread(load_tokenizer))
        try:
            await core.start()
            tokenizer = await tokenizer_task
            core.attach_decoder(tokenizer.step_decoder)
            how = "byte table" if tokenizer.table is not None else "batched tokenizer calls"
            log.info("detokenising with %s", how)
        except BaseException:
            tokenizer_task.cancel()
            await core.close()
            raise
        log.info("model %s loaded (context %d tokens)", source.served_name, source.context_length)
        scoring = Scoring(
            core, settings.max_num_scoring_seqs, settings.scoring_queue_timeout_s, settings.scoring_output_timeout_s
        )
        return cls(settings, source, tokenizer, core, metrics, Generator(core, metrics), scoring, int8)

    async def close(self) -> None:
        await self.core.close()
