"""Texts to token ids with the checkpoint's own ``tokenizer.json`` (Hugging Face ``tokenizers``,
Rust, no torch). Its padding and truncation are switched off: padding is added per batch, and
masked (a single input is never padded), and an input is cut only when the request asks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from genmesh.protocol import invalid_request


@dataclass(frozen=True)
class Token:
    """A token of an input: its id, its text, and its byte offsets in the input (None: a special
    token, whose text is the token itself)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


def byte_offsets(text: str) -> list[int]:
    """Where each character of ``text`` starts in its UTF-8 bytes (and the end, last)."""
    at = [0]
    for ch in text:
        at.append(at[-1] + len(ch.encode("utf-8")))
    return at


class EmbeddingTokenizer:
    def __init__(self, path: Path, vocab_size: int, max_length: int) -> None:
        self._tok = Tokenizer.from_file(str(path))
        self._tok.no_padding()
        self._tok.no_truncation()
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.pad_id = 0

    def encode(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        """Blocking (run it on a worker thread): the Rust encoder releases the GIL."""
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def tokens(self, texts: list[str], add_special_tokens: bool) -> list[list[Token]]:
        """Blocking: each text's tokens as TEI's ``/tokenize`` lists them, with byte offsets."""
        out = []
        for text, enc in zip(texts, self._tok.encode_batch(texts, add_special_tokens=add_special_tokens), strict=True):
            at = byte_offsets(text)
            out.append(
                [
                    Token(i, tok, True, None, None) if special else Token(i, text[a:b], False, at[a], at[b])
                    for i, tok, special, (a, b) in zip(
                        enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets, strict=True
                    )
                ]
            )
        return out

    def decode(self, batch: list[list[int]], skip_special_tokens: bool) -> list[str]:
        """Blocking: each id list's text."""
        return list(self._tok.decode_batch(batch, skip_special_tokens=skip_special_tokens))

    def check_ids(self, inputs: list[list[int]]) -> None:
        for i, ids in enumerate(inputs):
            bad = next((t for t in ids if t >= self.vocab_size), None)
            if bad is not None:
                raise invalid_request(
                    f"input[{i}] holds token id {bad}, outside the model's vocabulary (0..{self.vocab_size - 1}); "
                    "send text, or ids from this model's tokenizer (langchain: check_embedding_ctx_length=False)",
                    param="input",
                )

    def fit(self, inputs: list[list[int]], truncate: int | None, special: bool, left: bool = False) -> list[list[int]]:
        """Each input within the model's length. ``truncate``: keep that many tokens at most (-1:
        the model's maximum), its first ones (``left``: its last ones, TEI's ``truncation_direction``
        ``Left``), the first and final special tokens kept as sentence-transformers and TEI keep them;
        unset: an input past the maximum is a 400 naming its index."""
        for i, ids in enumerate(inputs):
            if not ids:
                raise invalid_request(f"input[{i}] has no tokens", param="input")
        if truncate is None:
            for i, ids in enumerate(inputs):
                if len(ids) > self.max_length:
                    raise invalid_request(
                        f"input[{i}] is {len(ids)} tokens, more than the model's maximum of {self.max_length} "
                        "(set truncate_prompt_tokens to truncate it)",
                        param="input",
                        code="context_length_exceeded",
                    )
            return inputs
        limit = self.max_length if truncate < 0 else min(truncate, self.max_length)
        if limit < 1 or (special and limit < 2):
            raise invalid_request(f"truncate_prompt_tokens {truncate} leaves no tokens", param="truncate_prompt_tokens")
        return [ids if len(ids) <= limit else truncated(ids, limit, special, left) for ids in inputs]


def truncated(ids: list[int], limit: int, special: bool, left: bool) -> list[int]:
    """``ids`` in ``limit`` tokens: its first (``left``: its last), its special ends kept (``special``)."""
    if not special:
        return ids[len(ids) - limit :] if left else ids[:limit]
    return ids[:1] + ids[len(ids) - limit + 1 :] if left else ids[: limit - 1] + ids[-1:]
