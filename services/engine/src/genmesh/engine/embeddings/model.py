"""One served embedding model: its checkpoint, tokenizer, compiled OpenVINO model and batcher."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from genmesh.protocol import invalid_request

from . import checkpoint, ir
from .batcher import Batcher
from .checkpoint import TOKENIZER, Checkpoint
from .options import EmbeddingOptions
from .tokenizer import EmbeddingTokenizer

log = logging.getLogger("genmesh.engine.embeddings.model")

# fp32 inference: a CPU with bf16 units (AMX, AVX512-BF16) would otherwise run bf16 and move the vectors
PRECISION = {"INFERENCE_PRECISION_HINT": "f32"}


@dataclass
class Embedded:
    vectors: np.ndarray  # [n, dimensions] float32
    prompt_tokens: int


@dataclass
class Scored:
    scores: list[float]  # one per (query, document) pair, in order
    prompt_tokens: int  # tokens run


class EmbeddingModel:
    def __init__(self, name: str, ck: Checkpoint, opts: EmbeddingOptions, compiled: ov.CompiledModel) -> None:
        self.name = name
        self.checkpoint = ck
        self.options = opts
        self.tokenizer = EmbeddingTokenizer(ck.path / TOKENIZER, ck.vocab_size, ck.max_length)
        self._request = compiled.create_infer_request()
        self.batcher: Batcher[list[int]] = Batcher(
            self._infer, opts.max_batch_size, opts.max_batch_tokens, opts.max_wait_s, opts.max_queued
        )

    @classmethod
    def load(cls, name: str, opts: EmbeddingOptions) -> EmbeddingModel:
        """Blocking: read the checkpoint, build (or reuse) its IR and compile it."""
        ck = checkpoint.read(opts.path, opts.pooling, opts.normalize)
        xml = ir.cached_ir(ck, Path(opts.cache_dir), name)
        core = ov.Core()
        config = {**PRECISION, **dict(opts.plugin_config)}
        compiled = core.compile_model(core.read_model(xml), opts.device, config)
        log.info("embedding model %s ready (%s, %s pooling, normalize=%s)", name, xml, ck.pooling, ck.normalize)
        return cls(name, ck, opts, compiled)

    def _infer(self, batch: list[list[int]]) -> np.ndarray:
        """Right-pad to the batch's longest input, masked (worker thread)."""
        longest = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), longest), dtype=np.int64)
        mask = np.zeros((len(batch), longest), dtype=np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        result = self._request.infer({"input_ids": ids, "attention_mask": mask})
        return np.array(result[0], dtype=np.float32, copy=True)

    async def embed(
        self, inputs: list[str] | list[list[int]], truncate: int | None, add_special_tokens: bool
    ) -> Embedded:
        if len(inputs) > self.options.max_inputs:
            raise invalid_request(
                f"input holds {len(inputs)} items, more than the limit of {self.options.max_inputs}", param="input"
            )
        self.batcher.check_fits(len(inputs), "input")
        if isinstance(inputs[0], str):
            texts: list[str] = inputs
            ids = await asyncio.to_thread(self.tokenizer.encode, texts, add_special_tokens)
            special = add_special_tokens
        else:
            ids = inputs
            self.tokenizer.check_ids(ids)
            special = False
        if truncate is None and self.options.truncate:
            truncate = -1
        ids = self.tokenizer.fit(ids, truncate, special)
        vectors = await self.batcher.embed(ids)
        return Embedded(vectors, sum(len(seq) for seq in ids))

    async def score(
        self, queries: list[str], docs: list[str], max_doc_tokens: int | None, left: bool = False
    ) -> Scored:
        """``queries[i]`` against ``docs[i]``: the cosine of their normalised vectors (vLLM's score of an
        embedding model). ``max_doc_tokens``: cut documents to that many tokens (``left``: keeping
        their last ones); else the model's ``truncate`` option, else a document past the model's
        maximum is a 400 naming it."""
        texts = list(dict.fromkeys(queries))
        self.batcher.check_fits(len(texts) + len(docs), "documents")
        ids = await asyncio.to_thread(self.tokenizer.encode, texts + docs, True)
        query_ids, doc_ids = ids[: len(texts)], ids[len(texts) :]
        limit = self.tokenizer.max_length
        for seq in query_ids:
            if len(seq) > limit:
                raise invalid_request(
                    f"the query is {len(seq)} tokens, more than the model's maximum of {limit}",
                    param="query",
                    code="context_length_exceeded",
                )
        truncate = max_doc_tokens if max_doc_tokens is not None else (-1 if self.options.truncate else None)
        if truncate is None:
            for i, seq in enumerate(doc_ids):
                if len(seq) > limit:
                    raise invalid_request(
                        f"documents[{i}] is {len(seq)} tokens, more than the model's maximum of {limit} "
                        "(set max_tokens_per_doc or truncate_prompt_tokens to cut it)",
                        param="documents",
                        code="context_length_exceeded",
                    )
        else:
            doc_ids = self.tokenizer.fit(doc_ids, truncate, True, left)
        vectors = (await self.batcher.embed(query_ids + doc_ids)).astype(np.float64)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        by_text = dict(zip(texts, vectors[: len(texts)], strict=True))
        docs_v = vectors[len(texts) :]
        scores = [float(by_text[q] @ d) for q, d in zip(queries, docs_v, strict=True)]
        return Scored(scores, sum(len(seq) for seq in query_ids + doc_ids))
