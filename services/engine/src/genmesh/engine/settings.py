"""The engine's settings: one typed object, read once at start-up from CLI flags and environment.

Each field is declared once (genmesh.protocol.server.settings): flag, variable, default and help.
Precedence: command-line flag > ``GENMESH_ENGINE_*`` environment variable > default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, UploadLimits
from genmesh.protocol.server.settings import ServiceSettings

from .core.gguf_reencode import DEFAULT_CACHE_DIR, DEFAULT_TARGET, Target
from .native.build import DEFAULT_TIMEOUT_S as INT8_BUILD_TIMEOUT_S
from .native.selection import DEFAULT_MODE as INT8_DEFAULT_MODE
from .native.selection import Mode as Int8Mode

DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
DQ_GROUP_SIZE = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
PROMPT_LOOKUP = "prompt_lookup"
CHUNK_PHONEMES = 200  # a speech inference's phonemes at speed 1 (speech_chunk_phonemes)
MIN_CHUNK_PHONEMES = 16
FREE = "schema-free JSON (json_object mode, values a schema leaves open)"


class EngineSettings(ServiceSettings):
    """OpenAI-compatible LLM server on OpenVINO GenAI continuous batching."""

    model_config = SettingsConfigDict(env_prefix="GENMESH_ENGINE_", cli_prog_name="genmesh-engine")

    model: str = Field(
        default=DEFAULT_MODEL, description="GGUF file or OpenVINO IR folder (optimum-cli export openvino)"
    )
    config_path: str | None = Field(
        default=None,
        description="OVMS config.json (model_config_list / mediapipe_config_list): serve every model it lists",
    )
    served_model_name: str | None = Field(
        default=None,
        description="name clients use in 'model' (unset: from the path); several, comma-separated, as vLLM's "
        "flag takes several: the first is the model's name, the others aliases (e.g. 'SmolLM2-135M-Instruct,tgi')",
    )
    port: int = Field(default=8008, ge=1, le=65535, description="HTTP port")
    device: str = Field(default="CPU", description="OpenVINO device: CPU, GPU, GPU.1, ...")
    cache_size: int = Field(default=2, ge=0, description="KV cache size in GB (0: grow on demand)")
    max_num_seqs: int = Field(default=256, ge=1, description="max sequences processed at once")
    max_num_batched_tokens: int = Field(default=512, ge=1, description="max tokens per step")
    dynamic_split_fuse: bool = Field(default=True, description="split long prompts into step-sized chunks")
    enable_prefix_caching: bool = Field(default=True, description="reuse KV blocks of repeated prompt prefixes")
    plugin_config: dict[str, Any] = Field(
        default_factory=dict, description='OpenVINO plugin config as JSON, e.g. {"KV_CACHE_PRECISION":"u8"}'
    )
    dynamic_quantization_group_size: int = Field(
        default=0,
        ge=0,
        description="the CPU plugin's DYNAMIC_QUANTIZATION_GROUP_SIZE for 4/8-bit weights (the exact Q4_1 form's): "
        "activations quantised to int8 per this many inputs (0: off, f32 activations; docs/accuracy.md); "
        "a DYNAMIC_QUANTIZATION_GROUP_SIZE in --plugin-config wins",
    )
    max_cpu_isa: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_]+$",
        description="the most capable instruction set oneDNN may use in the engine core (ONEDNN_MAX_CPU_ISA, "
        "e.g. AVX512_CORE_BF16: no AMX; unset: OpenVINO's choice, or an inherited ONEDNN_MAX_CPU_ISA)",
    )
    one_thread_amx_guard: bool = Field(
        default=True,
        description="on one inference thread in bf16 on a CPU with AMX, turn AMX off in the core "
        "(--max-cpu-isa AVX512_CORE_BF16; OpenVINO 2026.4 dies with SIGFPE there, openvinotoolkit/openvino#33300) "
        "and refuse a --max-cpu-isa or ONEDNN_MAX_CPU_ISA that allows AMX; off: as configured",
    )
    # Prompt-lookup decoding (OpenVINO GenAI's; OVMS turns it on with plugin_config {"prompt_lookup": true}).
    prompt_lookup: bool = Field(
        default=False,
        description="prompt-lookup decoding: draft tokens copied from where the prompt's last n-gram recurs, "
        "checked in one step (faster on replies that repeat their input; the same tokens); no beam search ('best_of')",
    )
    # Speculative decoding with a draft model (OVMS: draft_models_path in graph.pbtxt; docs/qwen.md).
    draft_model: str | None = Field(
        default=None,
        description="speculative decoding: the draft model (a GGUF, made an IR folder once in --gguf-cache-dir, "
        "or an OpenVINO IR folder with its tokenizer) that proposes tokens the served model checks in one step "
        "(the same tokens when greedy); it must share the model's tokenizer; no beam search ('best_of')",
    )
    draft_quantization: Literal["none", "Q4_1"] = Field(
        default="none",
        description="with a GGUF --draft-model: serve the draft from a copy (made once in --gguf-cache-dir) whose "
        "weight matrices are re-quantised to this ('none': as the file has them); the served model checks every "
        "draft token, so greedy replies stay its own: a cheaper draft, perhaps fewer tokens accepted",
    )
    assistant_confidence_threshold: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="with --draft-model: the draft proposes tokens while its confidence stays above this "
        "(instead of --num-assistant-tokens a step)",
    )
    num_assistant_tokens: int = Field(
        default=5,
        ge=1,
        description="with --prompt-lookup or --draft-model: draft tokens per step when a request does not say",
    )
    max_ngram_size: int = Field(
        default=3, ge=1, description="with --prompt-lookup: longest n-gram looked up when a request does not say"
    )
    prompt_lookup_limit: int = Field(
        default=16, ge=1, description="largest num_assistant_tokens or max_ngram_size a request may ask for"
    )
    # Tool calls (openai/tools.py): vLLM's flags; OVMS sets the parser with graph.pbtxt's tool_parser.
    tool_call_parser: Literal["hermes", "hermes3", "llama3_json", "llama3", "qwen3_coder", "qwen3coder"] | None = Field(
        default=None,
        description="how tool calls are written and parsed: hermes (Qwen, Hermes: <tool_call>{...}</tool_call>; "
        "OVMS's hermes3), llama3_json (OVMS's llama3) or qwen3_coder (Qwen3-Coder's "
        "<tool_call><function=NAME><parameter=KEY>...; OVMS's qwen3coder); unset: from the chat template",
    )
    enable_auto_tool_choice: bool = Field(
        default=True,
        description="allow tool_choice 'auto' (the model decides whether to call); off: only 'required', "
        "a named function or 'none' (vLLM without --enable-auto-tool-choice)",
    )
    max_tokens_limit: int | None = Field(default=None, ge=1, description="largest max_tokens a request may ask for")
    max_prompt_tokens: int | None = Field(
        default=None, ge=1, description="longest prompt accepted, in tokens (unset: the context)"
    )
    best_of_limit: int = Field(
        default=20, ge=1, description="largest 'best_of' (beam width) or 'n' a request may ask for"
    )
    tgi_default_max_new_tokens: int = Field(
        default=100, ge=1, description="TGI's /generate without 'max_new_tokens': at most this many (TGI 1.x's default)"
    )
    tgi_max_stop_sequences: int = Field(
        default=4, ge=0, description="most 'stop' sequences a TGI /generate request may give (TGI's default)"
    )
    num_kv_blocks: int | None = Field(
        default=None, ge=1, description="KV cache size in blocks instead of GB (fine-grained; overrides --cache-size)"
    )
    max_model_len: int | None = Field(default=None, ge=1, description="context length (unset: from the model)")
    stats_log_interval_s: float = Field(default=10.0, ge=0, description="seconds between scheduler log lines (0: off)")
    startup_timeout_s: float = Field(default=600.0, gt=0, description="seconds allowed for the model to load")
    stall_timeout_s: float = Field(default=60.0, gt=0, description="engine loop silent this long counts as unhealthy")
    stream_interval: int = Field(
        default=1,
        ge=1,
        le=64,
        description="a stream's SSE events written this many at a time after its first text (1: each alone)",
    )
    # Structured output (grammar/): what a request's schema, regex or EBNF may cost.
    structured_max_depth: int = Field(
        default=32, ge=1, le=256, description="deepest JSON schema accepted for structured output"
    )
    structured_max_grammar_bytes: int = Field(
        default=131072, ge=1024, description="largest grammar a structured-output request may compile to, in bytes"
    )
    structured_max_repeat: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="largest string length (minLength/maxLength) or regex/EBNF repetition count a grammar may hold "
        "(each count costs compile time inside the engine's step)",
    )
    structured_max_items: int = Field(
        default=4096, ge=1, le=1_000_000, description="largest minItems/maxItems a schema may ask for"
    )
    structured_free_json_max_string: int = Field(default=256, ge=1, le=100_000, description=f"{FREE}: longest string")
    structured_free_json_max_key: int = Field(default=64, ge=1, le=10_000, description=f"{FREE}: longest key")
    structured_free_json_max_items: int = Field(
        default=16, ge=1, le=10_000, description=f"{FREE}: most members or items per container"
    )
    structured_free_json_max_depth: int = Field(default=4, ge=1, le=32, description=f"{FREE}: deepest nesting")
    # Supervision of each model's engine core (client/supervisor.py): a core that dies, or hangs, is replaced.
    watchdog_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="a core with work but no progress (or silent) this long is hung: killed and replaced (0: off)",
    )
    core_restart_backoff_s: float = Field(
        default=1.0, gt=0, description="wait before replacing a dead core (doubles each time)"
    )
    core_restart_backoff_max_s: float = Field(default=30.0, gt=0, description="longest wait between restarts")
    core_restart_limit: int = Field(
        default=5, ge=0, description="core restarts allowed per window; one more and the server exits with status 75"
    )
    core_restart_window_s: float = Field(default=600.0, gt=0, description="the window of --core-restart-limit")
    core_restart_stable_s: float = Field(
        default=60.0,
        gt=0,
        description="a core that served this long before it died is replaced after --core-restart-backoff-s again "
        "(the back-off restarts; --core-restart-limit still counts every restart in its window)",
    )
    # The served model is the GGUF's (core/gguf_reencode.py), and scoring runs it too (core/scorer.py).
    gguf_reencode: bool = Field(
        default=True, description="re-encode GGUFs holding tensors OpenVINO GenAI misreads (Q4_1, Q4_K, ...), once"
    )
    gguf_reencode_type: Target = Field(
        default=DEFAULT_TARGET,
        description="what misread GGUFs become: exact (Q4_1, Q4_K, Q6_K, Q5_0: the file's own values, scales and "
        "minimums as a compressed OpenVINO model; other types: F16), F16 (the GGUF's values) or Q8_0 (half the "
        "size, requantised)",
    )
    gguf_cache_dir: str = Field(
        default=DEFAULT_CACHE_DIR, description="where re-encoded GGUFs and their OpenVINO IRs are kept"
    )
    # The exact form's Q4_1/Q4_K/Q6_K/Q8_0 matmuls: genmesh::Q41MatMul / Q4KX8MatMul / Q6KX8MatMul / Q80MatMul
    # (native/, int8 dot products with AVX2 maddubs) or OpenVINO's own (native/selection.py; docs/engine.md,
    # "Integer matmuls on AVX2 CPUs").
    int8_matmul: Int8Mode = Field(
        default=INT8_DEFAULT_MODE,
        description="who multiplies the exact form's Q4_1, Q4_K, Q6_K and Q8_0 matrices: auto (the default: genmesh's "
        "int8 ops where the CPU, or oneDNN's cap, has AVX2 without VNNI or AMX, OpenVINO's CPU plugin elsewhere), "
        "openvino (the CPU plugin) or genmesh (the ops: the file's Q4_1/Q4_K/Q6_K/Q8_0 blocks times int8 activations, "
        "built with cmake and g++ once)",
    )
    int8_build_timeout_s: float = Field(
        default=INT8_BUILD_TIMEOUT_S,
        gt=0,
        description="each step (configure, compile) of building the int8 extension when it is not built yet "
        "(make native builds it ahead); past it the engine serves with OpenVINO's path",
    )
    max_num_scoring_seqs: int = Field(
        default=8, ge=0, description="prompt-logprob / top-logprob scoring sessions at once (0: scoring off)"
    )
    scoring_chunk_tokens: int = Field(default=256, ge=1, le=8192, description="tokens per scoring forward pass")
    scoring_queue_timeout_s: float = Field(
        default=30.0, gt=0, description="wait for a scoring slot this long, then 503"
    )
    scoring_output_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="wait this long for a scoring session's next positions (the scorer's next chunk), then 503",
    )
    max_logprobs: int = Field(
        default=20, ge=0, le=1000, description="largest top_logprobs, logprobs or prompt_logprobs"
    )

    # Embedding models (embeddings/): --embedding-model serves one beside --model; a config.json lists them.
    embedding_model: str | None = Field(
        default=None,
        description="sentence-transformers checkpoint folder (model.safetensors, tokenizer.json) to serve "
        "at /v1/embeddings beside --model (make model fetches models/all-MiniLM-L6-v2)",
    )
    embedding_model_name: str | None = Field(
        default=None,
        description="name clients use for --embedding-model (unset: the folder's name); several, comma-separated: "
        "the first is its name, the others aliases (e.g. 'all-MiniLM-L6-v2,tei')",
    )
    embedding_max_batch_size: int = Field(
        default=32, ge=1, le=4096, description="most inputs (of all requests together) in one embeddings batch"
    )
    embedding_max_batch_tokens: int = Field(
        default=8192, ge=1, description="most padded tokens (inputs x longest) in one embeddings batch"
    )
    embedding_max_wait_ms: float = Field(
        default=5.0, ge=0, le=1000, description="longest wait for an embeddings batch to fill, in milliseconds"
    )
    embedding_max_inputs: int = Field(
        default=2048, ge=1, description="most inputs in one /v1/embeddings request (OpenAI's limit: 2048)"
    )
    embedding_max_queued_inputs: int = Field(
        default=8192, ge=1, description="most inputs waiting for a batch; past it requests get 503 and Retry-After"
    )
    # Rerank and score (embeddings/cross_encoder.py; an embedding model scores too, by cosine).
    rerank_model: str | None = Field(
        default=None,
        description="sentence-transformers cross-encoder folder (BertForSequenceClassification, one label) "
        "to serve at /v1/rerank and /score beside --model",
    )
    rerank_model_name: str | None = Field(
        default=None,
        description="name clients use for --rerank-model (unset: the folder's name); several, comma-separated: "
        "the first is its name, the others aliases",
    )
    rerank_max_documents: int = Field(
        default=1000, ge=1, description="most documents in one rerank request (most pairs in one /score request)"
    )
    rerank_max_allowed_chunks: int = Field(
        default=10000, ge=1, description="most query+chunk pairs a cross-encoder runs for one request (OVMS's option)"
    )

    # Audio models (audio/, issue 43): Whisper at /v1/audio/transcriptions, a Piper voice at /v1/audio/speech.
    whisper_model: str | None = Field(
        default=None,
        description="OpenVINO IR folder of a Whisper model (WhisperPipeline) to serve at /v1/audio/transcriptions "
        "(make model makes models/whisper-tiny.en)",
    )
    whisper_model_name: str | None = Field(
        default=None, description="name clients use for --whisper-model (unset: the folder's name)"
    )
    speech_voice: str | None = Field(
        default=None,
        description="Piper voice (.onnx beside its .onnx.json) to serve at /v1/audio/speech "
        "(make model fetches models/piper-joe/en_US-joe-medium.onnx); needs espeak-ng",
    )
    speech_model_name: str | None = Field(
        default=None, description="name clients use for --speech-voice (unset: the voice's folder name)"
    )
    audio_max_bytes: int = Field(
        default=25 * 1000 * 1000, ge=1024, description="largest audio file a transcription may upload (OpenAI: 25 MB)"
    )
    audio_max_duration_s: float = Field(
        default=1800.0,
        gt=0,
        description="longest audio a transcription (or all the input_audio parts of one chat request) may hold, "
        "in seconds",
    )
    audio_max_sample_rate: int = Field(
        default=192_000,
        ge=16_000,
        description="highest sample rate an uploaded audio file may have, in Hz (past it: 400 naming the file)",
    )
    audio_max_channels: int = Field(
        default=8,
        ge=1,
        le=255,
        description="most channels an uploaded audio file may have (past it: 400 naming the file)",
    )
    audio_upload_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description=(
            "time for a transcription's upload to arrive once the headers are in (the gateway's "
            "--files-upload-timeout-s: it relays an upload at its client's pace)"
        ),
    )
    speech_max_input_chars: int = Field(
        default=4096, ge=1, description="longest 'input' of /v1/audio/speech, in characters (OpenAI: 4096)"
    )
    speech_chunk_phonemes: int = Field(
        default=CHUNK_PHONEMES,
        ge=MIN_CHUNK_PHONEMES,
        le=600,
        description="most IPA phonemes (about 1.2 per letter of English) one speech inference takes at speed 1 "
        "or faster, proportionally fewer when slower: a speech request runs as chunks this size, whatever its "
        "punctuation, and a stopped one frees the voice within one chunk",
    )
    audio_max_queued: int = Field(
        default=32, ge=1, description="audio requests waiting or running per audio model; past it 503 + Retry-After"
    )
    audio_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="a transcription, or one chunk of a speech request, not done this long (waiting included) "
        "is stopped: 503",
    )

    def http_limits(self) -> HttpLimits:
        """The HTTP limits, with the larger body and time a transcription's upload is allowed."""
        envelope = 64 * 1024  # the multipart form around the file
        paths = [f"{prefix}/audio/transcriptions" for prefix in ("/v1", "/v3", "/v3/v1")]
        return UploadLimits(
            **super().http_limits().model_dump(),
            uploads=dict.fromkeys(paths, self.audio_max_bytes + envelope),
            upload_timeout_s=self.audio_upload_timeout_s,
        )

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json_plugin_config(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("prompt_lookup_limit")
    @classmethod
    def _lookup_defaults_within_limit(cls, limit: int, info: ValidationInfo) -> int:
        """The request defaults are bound by the limit too (fields checked in order: both are known here)."""
        for name in ("num_assistant_tokens", "max_ngram_size"):
            if (default := info.data.get(name, 0)) > limit:
                raise ValueError(f"below --{name.replace('_', '-')} ({default}): requests that send none get that")
        return limit

    @field_validator("draft_model")
    @classmethod
    def _one_kind_of_draft(cls, draft: str | None, info: ValidationInfo) -> str | None:
        if draft is not None and info.data.get("prompt_lookup"):
            raise ValueError("--draft-model and --prompt-lookup are two kinds of drafts: choose one")
        return draft

    @property
    def uses_assistant(self) -> bool:
        """Tokens drafted and checked in one step: prompt lookup or a draft model."""
        return self.uses_prompt_lookup or self.draft_model is not None

    @property
    def uses_prompt_lookup(self) -> bool:
        """``--prompt-lookup``, or OVMS's way of saying it: ``prompt_lookup`` true in the plugin config."""
        return self.prompt_lookup or str(self.plugin_config.get(PROMPT_LOOKUP, "")).lower() == "true"

    @property
    def request_lookup(self) -> tuple[int, int]:
        """``num_assistant_tokens`` and ``max_ngram_size`` for a request that names neither (0: no prompt lookup)."""
        if self.draft_model is not None:  # a draft model: the draft's token count, no n-grams
            return (0 if self.assistant_confidence_threshold else self.num_assistant_tokens), 0
        return (self.num_assistant_tokens, self.max_ngram_size) if self.uses_prompt_lookup else (0, 0)

    @property
    def device_config(self) -> dict[str, Any]:
        """The plugin config for OpenVINO's device (OVMS's ``prompt_lookup`` is the pipeline's, not the device's)."""
        config = {k: v for k, v in self.plugin_config.items() if k != PROMPT_LOOKUP}
        if self.device.upper().startswith("CPU"):
            config.setdefault(DQ_GROUP_SIZE, self.dynamic_quantization_group_size)
        return config


def parse_settings(argv: Sequence[str] | None = None) -> EngineSettings:
    return EngineSettings.from_cli(argv)


def model_names(value: str | None) -> tuple[str | None, tuple[str, ...]]:
    """A ``--*-model-name`` value: its name (None: unset) and its aliases (the other comma-separated names)."""
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    return (names[0] if names else None), tuple(names[1:])
