"""The microservice's settings: one typed object, read once at start-up from CLI flags and environment.

Each field is declared once (genmesh.protocol.server.settings): flag, variable, default and help.
Precedence: command-line flag > environment variable > default. The OPEA variable names are
kept (``LLM_ENDPOINT``, legacy ``vLLM_ENDPOINT``; ``LLM_MODEL_ID``, legacy ``LLM_MODEL``;
``OPENAI_API_KEY``); the microservice's own knobs read ``GENMESH_MICROSERVICE_*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, UploadLimits
from genmesh.protocol.server.settings import EnvOnly, Flag, ServiceSettings

DEFAULT_ENDPOINT = "http://127.0.0.1:8008"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
ASR_PATH = "/v1/asr"  # OPEA's Whisper service: the audio as base64 in JSON


class MicroserviceSettings(ServiceSettings):
    """OPEA LLM microservice: normalises OPEA-style requests and relays them to an OpenAI engine."""

    model_config = SettingsConfigDict(env_prefix="GENMESH_MICROSERVICE_", cli_prog_name="genmesh-microservice")

    llm_endpoint: str = Field(
        default=DEFAULT_ENDPOINT,
        validation_alias=AliasChoices("llm_endpoint", "LLM_ENDPOINT", "vLLM_ENDPOINT"),
        description="base URL of the OpenAI-compatible engine",
    )
    llm_model_id: Annotated[str | None, Flag("--model-id")] = Field(
        default=None,
        validation_alias=AliasChoices("llm_model_id", "LLM_MODEL_ID", "LLM_MODEL"),
        description="model name sent to the engine when a request names none",
    )
    openai_api_key: Annotated[SecretStr | None, EnvOnly()] = Field(
        default=None,
        validation_alias=AliasChoices("openai_api_key", "OPENAI_API_KEY"),
        description="sent to the engine as 'Authorization: Bearer ...' when set",
    )
    default_max_tokens: int = Field(
        default=1024,
        ge=0,
        le=2**31 - 1,
        description="token limit of a chat request that gives none (OPEA's request models: 1024; 0: none, "
        "generate to the end of the context)",
    )
    port: int = Field(default=9000, ge=1, le=65535, description="HTTP port")
    connect_timeout_s: float = Field(default=1.0, gt=0, description="seconds to connect to the engine")
    read_timeout_s: float = Field(default=600.0, gt=0, description="seconds of engine silence before giving up")
    first_token_timeout_s: float = Field(default=60.0, gt=0, description="deadline for a stream's first text")
    request_timeout_s: float = Field(default=600.0, gt=0, description="deadline for a whole request")
    ready_cache_ttl_s: float = Field(default=1.5, ge=0, description="seconds a readiness answer is reused")
    max_connections: int = Field(default=1024, ge=1, description="connections to the engine at once")
    audio_max_bytes: int = Field(
        default=25 * 1000 * 1000, ge=1024, description="largest audio file a transcription may upload (OpenAI: 25 MB)"
    )
    audio_upload_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description=(
            "time for a transcription's upload to arrive once the headers are in (the gateway's "
            "--files-upload-timeout-s: it relays an upload at its client's pace)"
        ),
    )

    def http_limits(self) -> HttpLimits:
        """The HTTP limits, with the larger body and time a transcription's upload is allowed."""
        return UploadLimits(
            **super().http_limits().model_dump(),
            # the multipart form around the file; base64 in JSON (4 bytes per 3)
            uploads={
                TRANSCRIPTIONS_PATH: self.audio_max_bytes + 64 * 1024,
                ASR_PATH: self.audio_max_bytes * 4 // 3 + 64 * 1024,
            },
            upload_timeout_s=self.audio_upload_timeout_s,
        )

    @field_validator("llm_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"LLM_ENDPOINT must be an http(s) URL, got {value!r}")
        # A base URL written for OpenAI clients ends in /v1; the routes add it themselves.
        return value.removesuffix("/v1")

    @field_validator("llm_model_id", "openai_api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value


def parse_settings(argv: Sequence[str] | None = None) -> MicroserviceSettings:
    return MicroserviceSettings.from_cli(argv)
