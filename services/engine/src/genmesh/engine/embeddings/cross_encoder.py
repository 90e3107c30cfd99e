"""A cross-encoder served for rerank: a sentence-transformers ``CrossEncoder`` folder, BERT with a
classification head (``BertForSequenceClassification``, one label), as OVMS's ``rerank_ov`` serves it.

The graph is ``ir.encoder`` on the pair (token types 0 for the query, 1 for the document), BERT's
pooler (``tanh(dense(h[CLS]))``) and the classifier; the score is the sigmoid of its logit, as
sentence-transformers and OVMS give it. Long documents are chunked as OVMS's rerank calculator
does: each document's tokens in windows of what the model takes beside the query and the special
tokens, each window scored as ``[CLS] query [SEP] window [SEP]``, the document's score its best
window's; at most ``max_allowed_chunks`` pairs per request (and no more than the batcher's queue
holds: past either, a 400 naming ``documents``). Pairs of concurrent requests are
batched together (``batcher``)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from tokenizers import Tokenizer

from genmesh.protocol import invalid_request

from . import checkpoint, ir
from .batcher import Batcher
from .checkpoint import TOKENIZER, Checkpoint, CheckpointError
from .model import PRECISION, Scored
from .options import EmbeddingOptions

log = logging.getLogger("genmesh.engine.embeddings.cross_encoder")

BUILD_VERSION = 1  # bump when build() makes a different graph
Pair = tuple[list[int], list[int]]  # token ids, token types


def num_labels(ck: Checkpoint) -> int:
    cfg = json.loads((ck.path / "config.json").read_text(encoding="utf-8"))
    archs = cfg.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in archs):
        raise CheckpointError(f"{ck.path}: not a cross-encoder (config.json architectures: {archs})")
    return int(cfg.get("num_labels") or len(cfg.get("id2label") or {0: ""}))


def build(ck: Checkpoint) -> ov.Model:
    """Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` [batch, length]; output ``logits`` [batch, 1]."""
    w = ir.weights(ck)
    ids, mask, types = ir.inputs("input_ids", "attention_mask", "token_type_ids")
    x = ir.encoder(w, ck, ids, mask, types)
    first = ops.gather(x, ops.constant(np.array(0, dtype=np.int64)), ops.constant(np.array(1, dtype=np.int64)))
    pooled = ops.tanh(ir._linear(first, w, "pooler.dense"))
    logits = ir._linear(pooled, w, "classifier")
    logits.output(0).get_tensor().set_names({"logits"})
    return ov.Model([logits], [ids, mask, types], "cross_encoder")


def _pair_template(tok: Tokenizer, path: Path) -> tuple[int, int]:
    """BERT's pair form, ``[CLS] a [SEP] b [SEP]`` with types 0 then 1: its CLS and SEP ids."""
    empty = tok.encode("", "", add_special_tokens=True)
    if len(empty.ids) != 3 or empty.type_ids != [0, 0, 1] or empty.ids[1] != empty.ids[2]:
        raise CheckpointError(f"{path}: the tokenizer's pair template is not BERT's [CLS] a [SEP] b [SEP]")
    return empty.ids[0], empty.ids[1]


class CrossEncoderModel:
    def __init__(self, name: str, ck: Checkpoint, opts: EmbeddingOptions, compiled: ov.CompiledModel) -> None:
        self.name = name
        self.checkpoint = ck
        self.options = opts
        self.tokenizer = Tokenizer.from_file(str(ck.path / TOKENIZER))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.cls, self.sep = _pair_template(self.tokenizer, ck.path)
        self.max_length = min(ck.max_position, opts.max_length or ck.max_position, _tokenizer_max(ck.path))
        self._request = compiled.create_infer_request()
        self.batcher: Batcher[Pair] = Batcher(
            self._infer,
            opts.max_batch_size,
            opts.max_batch_tokens,
            opts.max_wait_s,
            opts.max_queued,
            size=lambda pair: len(pair[0]),
        )

    @classmethod
    def load(cls, name: str, opts: EmbeddingOptions) -> CrossEncoderModel:
        """Blocking: read the checkpoint, build (or reuse) its IR and compile it."""
        ck = checkpoint.read(opts.path)
        labels = num_labels(ck)
        if labels != 1:
            raise CheckpointError(f"{ck.path}: {labels} labels; a reranking cross-encoder has one")
        xml = ir.cached_ir(ck, Path(opts.cache_dir), f"{name}-cross{BUILD_VERSION}", build)
        core = ov.Core()
        compiled = core.compile_model(core.read_model(xml), opts.device, {**PRECISION, **dict(opts.plugin_config)})
        log.info("cross-encoder %s ready (%s)", name, xml)
        return cls(name, ck, opts, compiled)

    def _infer(self, batch: list[Pair]) -> np.ndarray:
        """Right-pad to the batch's longest pair, masked (worker thread)."""
        longest = max(len(ids) for ids, _ in batch)
        ids = np.zeros((len(batch), longest), dtype=np.int64)
        types = np.zeros((len(batch), longest), dtype=np.int64)
        mask = np.zeros((len(batch), longest), dtype=np.int64)
        for row, (seq, seg) in enumerate(batch):
            ids[row, : len(seq)] = seq
            types[row, : len(seg)] = seg
            mask[row, : len(seq)] = 1
        result = self._request.infer({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        return np.array(result[0], dtype=np.float32, copy=True)

    def windows(self, query: list[int], doc: list[int]) -> int:
        """How many pairs ``pairs`` makes of them."""
        return len(self._starts(query, doc))

    def _starts(self, query: list[int], doc: list[int]) -> range:
        return range(0, max(len(doc), 1), self.max_length - len(query) - 3)

    def pairs(self, query: list[int], doc: list[int]) -> list[Pair]:
        """The pairs one document runs as: the query beside each window of the document (OVMS's chunks)."""
        window = self.max_length - len(query) - 3
        starts = self._starts(query, doc)
        head = [self.cls, *query, self.sep]
        out = []
        for start in starts:
            chunk = doc[start : start + window]
            out.append(([*head, *chunk, self.sep], [0] * len(head) + [1] * (len(chunk) + 1)))
        return out

    async def score(
        self, queries: list[str], docs: list[str], max_doc_tokens: int | None, left: bool = False
    ) -> Scored:
        """The score of each ``(queries[i], docs[i])``; ``max_doc_tokens``: cut each document to
        that many tokens first, its first ones (``left``: its last ones) (-1: to one window; None:
        chunk it whole)."""
        texts = list(dict.fromkeys(queries))
        encoded = await asyncio.to_thread(self._encode, texts + docs)
        by_text = dict(zip(texts, encoded[: len(texts)], strict=True))
        doc_ids = encoded[len(texts) :]
        longest_query = max(len(ids) for ids in by_text.values())
        if max_doc_tokens is not None:  # -1: what one window takes (vLLM's "the model's maximum")
            cut = max_doc_tokens if max_doc_tokens >= 0 else self.max_length - longest_query - 3
            cut = max(cut, 0)
            doc_ids = [ids[len(ids) - cut :] if left and len(ids) > cut else ids[:cut] for ids in doc_ids]
        if self.max_length - longest_query - 3 < 1:
            raise invalid_request(
                f"the query is {longest_query} tokens; with the special tokens and a document it must fit "
                f"in the model's {self.max_length}",
                param="query",
                code="context_length_exceeded",
            )
        # counted before any pair is made; a request whose pairs the batcher's queue can never hold is the
        # client's error, not a busy server's
        most, bound = min(
            (self.options.max_allowed_chunks, "max_allowed_chunks"),
            (self.batcher.max_queued, "the batch queue's capacity, --embedding-max-queued-inputs"),
        )
        count = sum(self.windows(by_text[q], ids) for q, ids in zip(queries, doc_ids, strict=True))
        if count > most:
            raise invalid_request(
                f"the documents make {count} query+chunk pairs, more than {most} ({bound}); "
                "send fewer or shorter documents",
                param="documents",
            )
        pairs: list[Pair] = []
        owner: list[int] = []
        for i, (query, ids) in enumerate(zip(queries, doc_ids, strict=True)):
            mine = self.pairs(by_text[query], ids)
            pairs += mine
            owner += [i] * len(mine)
        logits = (await self.batcher.embed(pairs))[:, 0].astype(np.float64)
        chunk_scores = 1.0 / (1.0 + np.exp(-logits))
        best = np.full(len(docs), -np.inf)
        np.maximum.at(best, np.array(owner), chunk_scores)
        return Scored([float(s) for s in best], sum(len(ids) for ids, _ in pairs))

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


def _tokenizer_max(folder: Path) -> int:
    """``tokenizer_config.json``'s ``model_max_length`` (sentence-transformers' CrossEncoder default)."""
    path = folder / "tokenizer_config.json"
    try:
        value: Any = json.loads(path.read_text(encoding="utf-8")).get("model_max_length") if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        value = None
    return int(value) if isinstance(value, int) and 0 < value < 1 << 20 else 1 << 20
