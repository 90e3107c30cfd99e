"""The microservice's settings: one typed object, read once at start-up from CLI flags and environment.

Precedence: command-line flag > environment variable > default. The OPEA variable names are
kept (``LLM_ENDPOINT``, legacy ``vLLM_ENDPOINT``; ``LLM_MODEL_ID``, legacy ``LLM_MODEL``;
``OPENAI_API_KEY``); the microservice's own knobs read ``GENMESH_MICROSERVICE_*``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from genmesh.protocol.server.limits import HttpLimits, add_limit_flags

DEFAULT_ENDPOINT = "http://127.0.0.1:8008"


class MicroserviceSettings(BaseSettings, HttpLimits):
    model_config = SettingsConfigDict(env_prefix="GENMESH_MICROSERVICE_", extra="ignore", populate_by_name=True)

    llm_endpoint: str = Field(
        default=DEFAULT_ENDPOINT,
        validation_alias=AliasChoices("llm_endpoint", "LLM_ENDPOINT", "vLLM_ENDPOINT"),
        description="base URL of the OpenAI-compatible engine",
    )
    llm_model_id: str | None = Field(
        default=None,
        validation_alias=AliasChoices("llm_model_id", "LLM_MODEL_ID", "LLM_MODEL"),
        description="model name sent to the engine when a request names none",
    )
    openai_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("openai_api_key", "OPENAI_API_KEY"),
        description="sent to the engine as 'Authorization: Bearer ...' when set",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=9000, ge=1, le=65535)
    connect_timeout_s: float = Field(default=1.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0, description="longest silence allowed from the engine")
    first_token_timeout_s: float = Field(
        default=60.0, gt=0, description="a stream's first event with generated text must come within this"
    )
    request_timeout_s: float = Field(default=600.0, gt=0, description="a whole request must be answered within this")
    ready_cache_ttl_s: float = Field(default=1.5, ge=0)
    max_connections: int = Field(default=1024, ge=1, description="connections to the engine at once")
    log_level: str = "info"

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="genmesh-microservice",
        description="OPEA LLM microservice: normalises OPEA-style requests and relays them to an OpenAI engine.",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("--llm-endpoint", help=f"engine base URL (env LLM_ENDPOINT / vLLM_ENDPOINT; {DEFAULT_ENDPOINT})")
    p.add_argument("--model-id", dest="llm_model_id", help="default model name (env LLM_MODEL_ID / LLM_MODEL)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 9000)")
    p.add_argument("--connect-timeout-s", type=float, help="seconds to connect to the engine (default 1)")
    p.add_argument("--read-timeout-s", type=float, help="seconds of engine silence before giving up (default 600)")
    p.add_argument("--ready-cache-ttl-s", type=float, help="seconds a readiness answer is reused (default 1.5)")
    p.add_argument("--max-connections", type=int, help="connections to the engine at once (default 1024)")
    p.add_argument("--first-token-timeout-s", type=float, help="deadline for a stream's first text (default 60)")
    p.add_argument("--request-timeout-s", type=float, help="deadline for a whole request (default 600)")
    p.add_argument("--log-level", help="debug, info, warning, error (default info)")
    add_limit_flags(p)
    return p


def parse_settings(argv: Sequence[str] | None = None) -> MicroserviceSettings:
    ns = build_parser().parse_args(argv)
    return MicroserviceSettings(**vars(ns))
