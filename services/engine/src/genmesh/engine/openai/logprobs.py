"""Token log-probabilities in OpenAI's two shapes (chat ``content`` list, completions arrays) and
vLLM's ``prompt_logprobs``.

``scored`` entries (``client/scoring_client.py``) carry the most likely tokens at each position; without them
only the chosen token's log-probability is known (the pipeline's own).
"""

from __future__ import annotations

from collections.abc import Sequence

from genmesh.protocol import ChoiceLogprobs, CompletionLogprobs, PromptLogprob, PromptLogprobs, TokenLogprob, TopLogprob

from ..core.ipc import ScoredToken
from .prompts import PromptTokenizer


def chat_logprobs(
    tok: PromptTokenizer,
    ids: Sequence[int],
    lps: Sequence[float],
    scored: Sequence[ScoredToken] | None = None,
    top: int = 0,
) -> ChoiceLogprobs:
    content = []
    for i, (token_id, lp) in enumerate(zip(ids, lps, strict=True)):
        text, raw = tok.token_text(token_id)
        tops: list[TopLogprob] = []
        if scored:
            s = scored[i]
            lp = s.logprob
            for tid, tlp in zip(s.top_ids[:top], s.top_logprobs[:top], strict=True):
                ttext, traw = tok.token_text(tid)
                tops.append(TopLogprob(token=ttext, logprob=tlp, bytes=traw))
        content.append(TokenLogprob(token=text, logprob=lp, bytes=raw, top_logprobs=tops))
    return ChoiceLogprobs(content=content)


def _top_dict(tok: PromptTokenizer, chosen: int, lp: float, s: ScoredToken | None, top: int) -> dict[str, float]:
    """The ``top`` most likely tokens, and the chosen one always (OpenAI's and vLLM's up to N+1)."""
    out: dict[str, float] = {}
    if s is not None:
        for tid, tlp in zip(s.top_ids[:top], s.top_logprobs[:top], strict=True):
            out.setdefault(tok.token_text(tid)[0], tlp)
    out.setdefault(tok.token_text(chosen)[0], lp)
    return out


def completion_logprobs(
    tok: PromptTokenizer,
    ids: Sequence[int],
    lps: Sequence[float],
    top: int,
    offset: int,
    scored: Sequence[ScoredToken] | None = None,
) -> CompletionLogprobs:
    """``top`` 0: the chosen tokens only; N >= 1: the N most likely tokens and the chosen one."""
    out = CompletionLogprobs()
    for i, (token_id, lp) in enumerate(zip(ids, lps, strict=True)):
        s = scored[i] if scored else None
        if s is not None:
            lp = s.logprob
        text, _ = tok.token_text(token_id)
        out.tokens.append(text)
        out.token_logprobs.append(lp)
        out.top_logprobs.append(_top_dict(tok, token_id, lp, s, top) if top >= 1 else None)
        out.text_offset.append(offset)
        offset += len(text)
    return out


def echoed_prompt_logprobs(
    tok: PromptTokenizer, prompt: Sequence[int], scored: Sequence[ScoredToken], top: int
) -> CompletionLogprobs:
    """The prompt's part of ``echo`` with ``logprobs``: the first token has none (null)."""
    first, _ = tok.token_text(prompt[0])
    rest = completion_logprobs(tok, prompt[1:], [s.logprob for s in scored], top, len(first), scored)
    return CompletionLogprobs(
        tokens=[first, *rest.tokens],
        token_logprobs=[None, *rest.token_logprobs],
        top_logprobs=[None, *rest.top_logprobs],
        text_offset=[0, *rest.text_offset],
    )


def merge(a: CompletionLogprobs, b: CompletionLogprobs) -> CompletionLogprobs:
    return CompletionLogprobs(
        tokens=a.tokens + b.tokens,
        token_logprobs=a.token_logprobs + b.token_logprobs,
        top_logprobs=a.top_logprobs + b.top_logprobs,
        text_offset=a.text_offset + b.text_offset,
    )


def vllm_prompt_logprobs(tok: PromptTokenizer, scored: Sequence[ScoredToken], top: int) -> PromptLogprobs:
    """vLLM's ``prompt_logprobs``: null for the first token, then per position the prompt's token
    and the ``top`` most likely, keyed by token id."""
    out: PromptLogprobs = [None]
    for s in scored:
        entry: dict[str, PromptLogprob] = {}
        entry[str(s.token_id)] = PromptLogprob(
            logprob=s.logprob, rank=s.rank, decoded_token=tok.token_text(s.token_id)[0]
        )
        for rank, (tid, tlp) in enumerate(zip(s.top_ids[:top], s.top_logprobs[:top], strict=True), start=1):
            entry.setdefault(str(tid), PromptLogprob(logprob=tlp, rank=rank, decoded_token=tok.token_text(tid)[0]))
        out.append(entry)
    return out
