"""The engine's settings: one typed object, read once at start-up from CLI flags and environment.

Precedence: command-line flag > ``GENMESH_ENGINE_*`` environment variable > default.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, add_limit_flags

from .gguf_fidelity import DEFAULT_CACHE_DIR, DEFAULT_TARGET, Target

DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"


class EngineSettings(BaseSettings, HttpLimits):
    model_config = SettingsConfigDict(env_prefix="GENMESH_ENGINE_", extra="ignore")

    model: str = DEFAULT_MODEL
    config_path: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8008, ge=1, le=65535)
    device: str = "CPU"
    cache_size: int = Field(default=2, ge=0, description="KV cache size in GB (0: grow on demand)")
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=256, ge=1)
    dynamic_split_fuse: bool = True
    enable_prefix_caching: bool = False
    plugin_config: dict[str, Any] = Field(default_factory=dict)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1, description="longest prompt (default: the context)")
    best_of_limit: int = Field(default=20, ge=1)
    num_kv_blocks: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    log_level: str = "info"
    stats_log_interval_s: float = Field(default=10.0, ge=0)
    startup_timeout_s: float = Field(default=600.0, gt=0)
    stall_timeout_s: float = Field(default=60.0, gt=0)
    structured_max_depth: int = Field(default=32, ge=1, le=256)
    structured_max_grammar_bytes: int = Field(default=131072, ge=1024)
    structured_max_repeat: int = Field(default=256, ge=1, le=100_000)
    structured_max_items: int = Field(default=4096, ge=1, le=1_000_000)
    structured_free_json_max_string: int = Field(default=256, ge=1, le=100_000)
    structured_free_json_max_key: int = Field(default=64, ge=1, le=10_000)
    structured_free_json_max_items: int = Field(default=16, ge=1, le=10_000)
    structured_free_json_max_depth: int = Field(default=4, ge=1, le=32)
    # Supervision of each model's engine core (supervisor.py): a core that dies, or hangs, is replaced.
    watchdog_timeout_s: float = Field(
        default=30.0, ge=0, description="work in flight but no progress (or no word at all) this long: hung (0: off)"
    )
    core_restart_backoff_s: float = Field(default=1.0, gt=0, description="wait before the first restart; doubles")
    core_restart_backoff_max_s: float = Field(default=30.0, gt=0)
    core_restart_limit: int = Field(default=5, ge=0, description="restarts allowed per window; past it, exit")
    core_restart_window_s: float = Field(default=600.0, gt=0)
    # The served model is the GGUF's (gguf_fidelity.py), and scoring runs it too (scorer.py).
    gguf_reencode: bool = Field(default=True, description="re-encode GGUF tensors OpenVINO misreads (Q4_1, K-quants)")
    gguf_reencode_type: Target = Field(default=DEFAULT_TARGET, description="F16 (faithful) or Q8_0 (smaller)")
    gguf_cache_dir: str = Field(default=DEFAULT_CACHE_DIR, description="re-encoded GGUFs and their OpenVINO IRs")
    max_num_scoring_seqs: int = Field(default=8, ge=0, description="scoring sessions at once (0: scoring off)")
    scoring_chunk_tokens: int = Field(default=256, ge=1, le=8192, description="tokens per scoring forward pass")
    scoring_queue_timeout_s: float = Field(default=30.0, gt=0, description="wait for a scoring slot before a 503")
    max_logprobs: int = Field(default=20, ge=0, le=1000, description="largest top_logprobs/logprobs/prompt_logprobs")

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json_plugin_config(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="genmesh-engine",
        description="OpenAI-compatible LLM server on OpenVINO GenAI continuous batching.",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--model", help="GGUF file or OpenVINO IR folder (optimum-cli export openvino)")
    p.add_argument(
        "--config-path",
        help="OVMS config.json (model_config_list / mediapipe_config_list): serve every model it lists",
    )
    p.add_argument("--served-model-name", help="name clients use in 'model' (default: from the path)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8008)")
    p.add_argument("--device", help="OpenVINO device: CPU, GPU, GPU.1, ... (default CPU)")
    p.add_argument("--cache-size", type=int, help="KV cache size in GB (default 2)")
    p.add_argument("--max-num-seqs", type=int, help="max sequences processed at once (default 256)")
    p.add_argument("--max-num-batched-tokens", type=int, help="max tokens per step (default 256)")
    p.add_argument(
        "--dynamic-split-fuse",
        action=argparse.BooleanOptionalAction,
        help="split long prompts into step-sized chunks (default on)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        help="reuse KV blocks of repeated prompt prefixes (default off)",
    )
    p.add_argument("--plugin-config", help='OpenVINO plugin config as JSON, e.g. {"KV_CACHE_PRECISION":"u8"}')
    p.add_argument("--max-tokens-limit", type=int, help="largest max_tokens a request may ask for")
    p.add_argument(
        "--best-of-limit", type=int, help="largest 'best_of' (beam width) or 'n' a request may ask for (default 20)"
    )
    p.add_argument(
        "--num-kv-blocks", type=int, help="KV cache size in blocks instead of GB (fine-grained; overrides --cache-size)"
    )
    p.add_argument("--max-model-len", type=int, help="context length (default: from the model)")
    p.add_argument("--log-level", help="debug, info, warning, error (default info)")
    p.add_argument("--stats-log-interval-s", type=float, help="seconds between scheduler log lines (0: off)")
    p.add_argument("--startup-timeout-s", type=float, help="seconds allowed for the model to load")
    p.add_argument("--stall-timeout-s", type=float, help="engine loop silent this long counts as unhealthy")
    p.add_argument(
        "--structured-max-depth", type=int, help="deepest JSON schema accepted for structured output (default 32)"
    )
    p.add_argument(
        "--structured-max-grammar-bytes",
        type=int,
        help="largest grammar a structured-output request may compile to, in bytes (default 131072)",
    )
    p.add_argument(
        "--structured-max-repeat",
        type=int,
        help="largest string length (minLength/maxLength) or regex/EBNF repetition count a grammar may hold "
        "(default 256; each count costs compile time inside the engine's step)",
    )
    p.add_argument(
        "--structured-max-items", type=int, help="largest minItems/maxItems a schema may ask for (default 4096)"
    )
    free = "schema-free JSON (json_object mode, values a schema leaves open)"
    p.add_argument("--structured-free-json-max-string", type=int, help=f"{free}: longest string (default 256)")
    p.add_argument("--structured-free-json-max-key", type=int, help=f"{free}: longest key (default 64)")
    p.add_argument(
        "--structured-free-json-max-items", type=int, help=f"{free}: most members or items per container (default 16)"
    )
    p.add_argument("--structured-free-json-max-depth", type=int, help=f"{free}: deepest nesting (default 4)")
    p.add_argument(
        "--watchdog-timeout-s",
        type=float,
        help="a core with work but no progress (or silent) this long is hung: killed and replaced (default 30; 0: off)",
    )
    p.add_argument("--core-restart-backoff-s", type=float, help="wait before replacing a dead core (default 1, x2)")
    p.add_argument("--core-restart-backoff-max-s", type=float, help="longest wait between restarts (default 30)")
    p.add_argument(
        "--core-restart-limit",
        type=int,
        help="core restarts allowed per window; one more and the server exits with status 75 (default 5)",
    )
    p.add_argument("--core-restart-window-s", type=float, help="the window of --core-restart-limit (default 600)")
    p.add_argument("--max-prompt-tokens", type=int, help="longest prompt accepted, in tokens (default: the context)")
    add_limit_flags(p)
    p.add_argument(
        "--gguf-reencode",
        action=argparse.BooleanOptionalAction,
        help="re-encode GGUFs holding tensors OpenVINO GenAI misreads (Q4_1, Q4_K, ...), once (default on)",
    )
    p.add_argument(
        "--gguf-reencode-type",
        choices=["F16", "Q8_0"],
        help="what misread GGUFs become: F16 (default; the GGUF's values) or Q8_0 (half the size, requantised)",
    )
    p.add_argument("--gguf-cache-dir", help="where re-encoded GGUFs and their OpenVINO IRs are kept (~/.cache/genmesh)")
    p.add_argument(
        "--max-num-scoring-seqs",
        type=int,
        help="prompt-logprob / top-logprob scoring sessions at once (default 8; 0: scoring off)",
    )
    p.add_argument("--scoring-chunk-tokens", type=int, help="tokens per scoring forward pass (default 256)")
    p.add_argument("--scoring-queue-timeout-s", type=float, help="wait for a scoring slot this long, then 503 (30)")
    p.add_argument("--max-logprobs", type=int, help="largest top_logprobs, logprobs or prompt_logprobs (default 20)")
    return p


def parse_settings(argv: Sequence[str] | None = None) -> EngineSettings:
    ns = build_parser().parse_args(argv)
    return EngineSettings(**vars(ns))
