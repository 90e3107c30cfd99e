"""vLLM's structured-output request fields, which clients written for vLLM send.

``structured_outputs`` (vLLM's ``StructuredOutputsParams``) names one constraint: ``json`` (a
JSON schema), ``regex``, ``choice``, ``grammar`` (EBNF) or ``json_object``. The older top-level
``guided_json``, ``guided_regex``, ``guided_choice`` and ``guided_grammar`` say the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from .common import StrictRequest


class StructuredOutputs(StrictRequest):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    json_schema: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None
    whitespace_pattern: str | None = None
    # Switches vLLM offers; genmesh grammars already write no free whitespace and, for objects
    # that declare properties, no extra properties, so these change nothing here.
    disable_any_whitespace: bool | None = None
    disable_additional_properties: bool | None = None
    disable_fallback: bool | None = None


class GuidedFields(StrictRequest):
    """The request fields that constrain the output to a grammar (mixed into the request models)."""

    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    guided_whitespace_pattern: str | None = None
