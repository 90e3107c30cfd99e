"""Token log-probabilities in OpenAI's two shapes (chat ``content`` list, completions arrays)."""

from __future__ import annotations

from collections.abc import Sequence

from genmesh.protocol import ChoiceLogprobs, CompletionLogprobs, TokenLogprob

from .tokenizer import PromptTokenizer


def chat_logprobs(tok: PromptTokenizer, ids: Sequence[int], lps: Sequence[float]) -> ChoiceLogprobs:
    content = []
    for token_id, lp in zip(ids, lps, strict=True):
        text, raw = tok.token_text(token_id)
        content.append(TokenLogprob(token=text, logprob=lp, bytes=raw))
    return ChoiceLogprobs(content=content)


def completion_logprobs(
    tok: PromptTokenizer, ids: Sequence[int], lps: Sequence[float], top: int, offset: int
) -> CompletionLogprobs:
    """``top`` 0: the chosen tokens only; 1: also each chosen token as its own top entry."""
    out = CompletionLogprobs()
    for token_id, lp in zip(ids, lps, strict=True):
        text, _ = tok.token_text(token_id)
        out.tokens.append(text)
        out.token_logprobs.append(lp)
        out.top_logprobs.append({text: lp} if top >= 1 else None)
        out.text_offset.append(offset)
        offset += len(text)
    return out
