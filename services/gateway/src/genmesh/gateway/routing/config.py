"""The routing config (YAML): models -> pools of upstreams, queue limits and timeouts.

```yaml
models:
  SmolLM2-135M-Instruct:
    upstreams:
      - url: http://127.0.0.1:9000
        health_path: /v1/health_check
        max_concurrency: 8
    max_queue_length: 256
    max_queue_wait_s: 60
    first_token_timeout_s: 60
    request_timeout_s: 600
    routing: least-loaded        # or prefix-affinity
    mid_stream_failover: false
  all-MiniLM-L6-v2:
    kind: embeddings             # served at /v1/embeddings, and rerank/score by cosine (chat: the default kind;
                                 # rerank: a cross-encoder, at /v1/rerank and /v1/score only)
    upstreams:
      - url: http://127.0.0.1:9000
        health_path: /v1/health_check
        max_concurrency: 4       # slots of its own, apart from the chat model's
```
Every gateway replica sharing one Redis must load the same file: the upstream order is the
slot-key order in the Lua scripts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class UpstreamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    name: str = ""
    max_concurrency: int = Field(default=8, ge=1)
    health_path: str = "/health"
    # the engine's Prometheus metrics behind this upstream (KV cache, running/waiting) for the console;
    # empty: the upstream's own /metrics (a microservice in front of an engine has none of them)
    metrics_url: str = ""

    @field_validator("url")
    @classmethod
    def _strip(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream url must be http(s)://host:port, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _default_name(self) -> UpstreamConfig:
        if not self.name:
            self.name = urlsplit(self.url).netloc
        return self


Routing = Literal["least-loaded", "prefix-affinity"]
# chat: /v1/chat/completions, /v1/completions, /v1/responses; embeddings: /v1/embeddings, and rerank/score
# as a cosine scorer; rerank: a cross-encoder's /v1/rerank and /v1/score; transcription:
# /v1/audio/transcriptions; speech: /v1/audio/speech
ModelKind = Literal["chat", "embeddings", "rerank", "transcription", "speech"]


class ModelRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    kind: ModelKind = Field(
        default="chat", description="which endpoints serve it: chat, embeddings, rerank, transcription or speech"
    )
    upstreams: list[UpstreamConfig] = Field(min_length=1)
    max_queue_length: int = Field(default=256, ge=0)
    max_queue_wait_s: float = Field(default=60.0, gt=0)
    first_token_timeout_s: float = Field(default=60.0, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    retry_after_s: int = Field(default=1, ge=1, description="Retry-After on 429/503")
    routing: Routing = Field(
        default="least-loaded",
        description="least-loaded: fewest leases; prefix-affinity: the upstream that served the prompt's prefix",
    )
    affinity_block_bytes: int = Field(default=64, ge=8, le=65536, description="prefix block size (~16 tokens)")
    affinity_max_blocks: int = Field(default=16, ge=1, le=256, description="leading blocks hashed")
    affinity_max_imbalance: int = Field(
        default=8, ge=0, description="leases the preferred upstream may hold beyond the least-loaded one's"
    )
    affinity_ttl_s: float = Field(default=600.0, gt=0, description="how long a prefix remembers its upstream")
    mid_stream_failover: bool = Field(
        default=False, description="a stream whose upstream dies continues on another upstream"
    )
    max_failovers: int = Field(default=2, ge=1, le=16, description="failovers allowed per stream")

    @model_validator(mode="after")
    def _unique_names(self) -> ModelRoute:
        names = [u.name for u in self.upstreams]
        if len(set(names)) != len(names):
            raise ValueError(f"upstream names must be unique within a model: {names}")
        return self


class RoutingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelRoute] = Field(min_length=1)

    @model_validator(mode="after")
    def _name_routes(self) -> RoutingConfig:
        for name, route in self.models.items():
            route.name = name
        return self

    def route(self, model: str) -> ModelRoute | None:
        return self.models.get(model)


def load_config(path: str | Path) -> RoutingConfig:
    data = yaml.safe_load(Path(path).read_text())
    return RoutingConfig.model_validate(data)
