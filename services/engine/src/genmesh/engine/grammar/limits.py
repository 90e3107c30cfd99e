"""How big a grammar a request may ask for: the engine's ``structured_*`` settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from .free_json import FreeJsonCaps


@dataclass(frozen=True)
class GrammarLimits:
    """How big a grammar a request may ask for (the engine's ``structured_*`` settings)."""

    max_depth: int = 32  # schema nesting
    max_grammar_bytes: int = 131072  # the EBNF written
    # Counted repetitions of characters (string lengths, regex and EBNF counts) cost the grammar
    # engine compile time per count, inside the engine's step; counted array items do not.
    max_repeat: int = 256
    max_items: int = 4096
    free: FreeJsonCaps = field(default_factory=FreeJsonCaps)
