"""Token id → bytes, for vocabularies whose tokens are plain byte strings (byte-level BPE).

With such a vocabulary, detokenising is concatenating bytes and decoding UTF-8 incrementally:
no tokenizer call per step, exact across multi-byte characters, and per-token text for
logprobs comes for free. The table is only used after it has been checked against the
tokenizer's own decoder at start-up (every token, plus sample texts); a vocabulary that does
not round-trip (SentencePiece's leading-space rules, normalisers) gets ``None`` and the
engine keeps decoding through the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Added tokens that stay text when special tokens are skipped: Hermes tool-call markers. Qwen2.5's
# own tokenizer marks them not special (Hugging Face's decode keeps them), but OpenVINO's decoder
# drops every added token, and without them a tool call reads as bare JSON the parser cannot find.
KEPT_AS_TEXT = frozenset({b"<tool_call>", b"</tool_call>"})

_SAMPLES = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading spaces, trailing spaces  \n\ttabs and newlines\n\n",
    "Grüße, ça va? 日本語のテキスト, emoji 🙂🚀 and math ∑∞≠.",
    'JSON: {"a": [1, 2.5, null], "b": "x\\ny"} <tags> & entities;',
)


@dataclass(frozen=True)
class TokenTable:
    pieces: list[bytes]
    special: frozenset[int]

    def bytes_of(self, ids: Sequence[int], skip_special_tokens: bool = True) -> bytes:
        pieces, special = self.pieces, self.special
        if skip_special_tokens:
            return b"".join(pieces[i] for i in ids if i not in special)
        return b"".join(pieces[i] for i in ids)

    def piece(self, token_id: int) -> bytes:
        return self.pieces[token_id] if 0 <= token_id < len(self.pieces) else b""


def _utf8(data: bytes) -> str | None:
    """``data`` decoded, or None when it is not whole UTF-8 (part of a character)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def build_token_table(tok: Any) -> TokenTable | None:
    """The table for an ``openvino_genai.Tokenizer``, or None when its vocabulary does not round-trip."""
    vocab: dict[bytes, int] = tok.get_vocab()
    if not vocab:
        return None
    size = max(vocab.values()) + 1
    pieces = [b""] * size
    for piece, token_id in vocab.items():
        pieces[token_id] = bytes(piece)
    singles = [[i] for i in range(size)]
    skipped = tok.decode(singles, skip_special_tokens=True)
    kept = tok.decode(singles, skip_special_tokens=False)
    dropped = frozenset(i for i in range(size) if skipped[i] == "" and kept[i] != "")
    markers = frozenset(i for i in dropped if pieces[i] in KEPT_AS_TEXT and kept[i].encode() == pieces[i])
    special = dropped - markers
    for i in range(size):
        text = None if i in special else _utf8(pieces[i])
        if text is not None and text != skipped[i] and i not in markers:
            return None
    table = TokenTable(pieces, special)
    for text in _SAMPLES:
        ids = [int(t) for t in tok.encode(text, add_special_tokens=False).input_ids.data[0]]
        if table.bytes_of(ids).decode("utf-8", errors="replace") != str(tok.decode(ids, skip_special_tokens=True)):
            return None
    return table
