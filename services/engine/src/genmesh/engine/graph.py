"""The LLM node of an OVMS ``graph.pbtxt``: its ``node_options`` as typed pipeline settings.

OVMS serves an LLM as a MediaPipe graph whose ``HttpLLMCalculator`` node carries
``[type.googleapis.com / mediapipe.LLMCalculatorOptions]`` options. The options genmesh
honours are the fields of ``LLMNodeOptions``; any other option is reported by
``ignored`` (the caller logs it) rather than dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import pbtxt

GRAPH_FILE = "graph.pbtxt"
OPTIONS_TYPE = "mediapipe.LLMCalculatorOptions"


class GraphError(ValueError):
    """A graph.pbtxt that cannot be served; the message names the file and the cause."""


class LLMNodeOptions(BaseModel):
    """``LLMCalculatorOptions`` as OVMS documents them; unset ones take the server-wide flags."""

    model_config = ConfigDict(extra="allow", strict=True)

    models_path: str
    cache_size: int | None = Field(default=None, ge=0)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    dynamic_split_fuse: bool | None = None
    enable_prefix_caching: bool | None = None
    device: str | None = None
    plugin_config: dict[str, Any] | None = None
    best_of_limit: int | None = Field(default=None, ge=1)
    max_tokens_limit: int | None = Field(default=None, ge=1)

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):  # a JSON object in a pbtxt string, as OVMS expects
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"plugin_config is not valid JSON: {exc}") from exc
        return value

    @property
    def ignored(self) -> list[str]:
        """Options present in the graph that genmesh does not act on."""
        return sorted(self.model_extra or {})

    def settings_overrides(self) -> dict[str, Any]:
        """The per-model settings these options set (everything but ``models_path``)."""
        known = self.model_dump(exclude={"models_path"}, exclude_none=True)
        return {k: v for k, v in known.items() if k in type(self).model_fields}


def _options_of(node: pbtxt.Message) -> pbtxt.Message | None:
    for node_options in node.messages("node_options"):
        for name, value in node_options.fields:
            if name.startswith("[") and name.rstrip("]").endswith(OPTIONS_TYPE) and isinstance(value, pbtxt.Message):
                return value
    return None


def llm_node_options(text: str, where: str = GRAPH_FILE) -> LLMNodeOptions:
    """Parse a graph and return the options of its one LLM node."""
    try:
        graph = pbtxt.parse(text)
    except pbtxt.PbtxtError as exc:
        raise GraphError(f"{where}: {exc}") from exc
    found = [opts for node in graph.messages("node") if (opts := _options_of(node)) is not None]
    if len(found) != 1:
        raise GraphError(f"{where}: expected exactly one node with {OPTIONS_TYPE} node_options, found {len(found)}")
    raw = found[0].to_dict()
    try:
        return LLMNodeOptions.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise GraphError(f"{where}: node_options {loc}: {first.get('msg')}") from exc
