"""What the API process tells a core process to load and how: the spawn argument of ``run_core``.

Its own module, below the step loop and model loading, which both read it (and the API side
builds it), so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .gguf_reencode import DEFAULT_CACHE_DIR, DEFAULT_TARGET, Target

ISA_ENV = "ONEDNN_MAX_CPU_ISA"  # oneDNN's cap on the instruction sets it uses (AMX among them)


@dataclass(frozen=True)
class CoreConfig:
    model_path: str
    device: str
    cache_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dynamic_split_fuse: bool
    enable_prefix_caching: bool
    num_kv_blocks: int | None = None
    plugin_config: dict[str, Any] = field(default_factory=dict)  # the device's (EngineSettings.device_config)
    prompt_lookup: bool = False
    # Speculative decoding (draft_model.py): the draft's path, and the confidence threshold of its drafts
    # (None: each request's num_assistant_tokens).
    draft_model: str | None = None
    draft_quantization: str | None = None  # a GGUF draft's weight matrices re-quantised to this (None: as written)
    assistant_confidence_threshold: float | None = None
    # ONEDNN_MAX_CPU_ISA for the core process, set before it imports OpenVINO (None: as inherited).
    max_cpu_isa: str | None = None
    # Grammars compiled before the core reports ready (JSON mode's: seconds to compile, and a
    # compile holds up the step of every request in the batch).
    warmup_grammars: tuple[str, ...] = ()
    # GGUF re-encoding (gguf_reencode.py) and the scorer (scorer.py): see EngineSettings.
    gguf_reencode: bool = True
    gguf_reencode_type: Target = DEFAULT_TARGET
    gguf_cache_dir: str = DEFAULT_CACHE_DIR
    max_num_scoring_seqs: int = 8
    scoring_chunk_tokens: int = 256
    # The int8 extension (genmesh.engine.native: genmesh::Q41MatMul, Q4KX8MatMul, Q6KX8MatMul, Q80MatMul) when the
    # engine chose that path for the exact form's Q4_1, Q4_K, Q6_K and Q8_0 matmuls (native/selection.py); None:
    # OpenVINO's own MatMul.
    int8_extension: str | None = None
