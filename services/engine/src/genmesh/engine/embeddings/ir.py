"""The OpenVINO model of a BERT sentence encoder, built from its safetensors with OpenVINO's opset
API (no torch, no conversion tool): embeddings, the encoder layers, pooling over the attention
mask and, if the checkpoint says so, L2 normalisation. Inputs ``input_ids`` and
``attention_mask`` ([batch, length], i64, right-padded); output ``embeddings`` [batch, hidden].

The IR is written once to the cache (``<cache>/<name>-<fingerprint>/``) uncompressed (fp32, as
the checkpoint) and read from there on later starts."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from . import safetensors
from .checkpoint import WEIGHTS, Checkpoint

log = logging.getLogger("genmesh.engine.embeddings.ir")

IR_XML = "openvino_model.xml"
MASKED = -1e9  # added to attention scores of padding (softmax weight 0 within fp32)


def _const(array: np.ndarray) -> Any:
    return ops.constant(np.ascontiguousarray(array, dtype=np.float32))


def _linear(x: Any, w: dict[str, np.ndarray], name: str) -> Any:
    y = ops.matmul(x, _const(w[f"{name}.weight"]), transpose_a=False, transpose_b=True)
    return ops.add(y, _const(w[f"{name}.bias"]))


def _layer_norm(x: Any, w: dict[str, np.ndarray], name: str, eps: float) -> Any:
    axes = ops.constant(np.array([-1], dtype=np.int64))
    y = ops.mvn(x, axes, normalize_variance=True, eps=eps, eps_mode="inside_sqrt")
    return ops.add(ops.multiply(y, _const(w[f"{name}.weight"])), _const(w[f"{name}.bias"]))


def _heads(x: Any, heads: int, head_size: int) -> Any:
    shaped = ops.reshape(x, ops.constant(np.array([0, 0, heads, head_size], dtype=np.int64)), special_zero=True)
    return ops.transpose(shaped, ops.constant(np.array([0, 2, 1, 3], dtype=np.int64)))


def _layer(x: Any, bias: Any, w: dict[str, np.ndarray], i: int, ck: Checkpoint) -> Any:
    p = f"encoder.layer.{i}"
    head_size = ck.hidden_size // ck.num_heads
    q = _heads(_linear(x, w, f"{p}.attention.self.query"), ck.num_heads, head_size)
    k = _heads(_linear(x, w, f"{p}.attention.self.key"), ck.num_heads, head_size)
    v = _heads(_linear(x, w, f"{p}.attention.self.value"), ck.num_heads, head_size)
    scale = ops.constant(np.array(1.0 / math.sqrt(head_size), dtype=np.float32))
    scores = ops.add(ops.multiply(ops.matmul(q, k, transpose_a=False, transpose_b=True), scale), bias)
    context = ops.matmul(ops.softmax(scores, -1), v, transpose_a=False, transpose_b=False)
    context = ops.transpose(context, ops.constant(np.array([0, 2, 1, 3], dtype=np.int64)))
    context = ops.reshape(context, ops.constant(np.array([0, 0, ck.hidden_size], dtype=np.int64)), special_zero=True)
    attended = ops.add(_linear(context, w, f"{p}.attention.output.dense"), x)
    x = _layer_norm(attended, w, f"{p}.attention.output.LayerNorm", ck.layer_norm_eps)
    inner = ops.gelu(_linear(x, w, f"{p}.intermediate.dense"), approximation_mode="erf")
    out = ops.add(_linear(inner, w, f"{p}.output.dense"), x)
    return _layer_norm(out, w, f"{p}.output.LayerNorm", ck.layer_norm_eps)


def _prefixed(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """BertModel's names (``embeddings.…``); a BertFor… checkpoint prefixes them with ``bert.``."""
    if "embeddings.word_embeddings.weight" in weights:
        return weights
    return {k.removeprefix("bert."): v for k, v in weights.items()}


def inputs(*names: str) -> list[Any]:
    """[batch, length] i64 parameters, named for the infer request."""
    params = []
    for name in names:
        param = ops.parameter([-1, -1], ov.Type.i64, name=name)
        param.output(0).get_tensor().set_names({name})
        params.append(param)
    return params


def encoder(w: dict[str, np.ndarray], ck: Checkpoint, ids: Any, mask: Any, token_types: Any = None) -> Any:
    """BERT's hidden states [batch, length, hidden] of right-padded ``ids`` (``token_types``: the
    segment of each token, a pair's 0 and 1; None: one segment, type 0)."""
    zero = ops.constant(np.array(0, dtype=np.int64))
    one = ops.constant(np.array(1, dtype=np.int64))
    length = ops.gather(ops.shape_of(ids), one, zero)
    positions = ops.range(zero, length, one, output_type="i64")
    x = ops.gather(_const(w["embeddings.word_embeddings.weight"]), ids, zero)
    x = ops.add(x, ops.gather(_const(w["embeddings.position_embeddings.weight"]), positions, zero))
    types = w["embeddings.token_type_embeddings.weight"]
    if token_types is None:
        x = ops.add(x, _const(types[0]))  # one segment: type 0
    else:
        x = ops.add(x, ops.gather(_const(types), token_types, zero))
    x = _layer_norm(x, w, "embeddings.LayerNorm", ck.layer_norm_eps)
    mask_f = ops.convert(mask, "f32")
    # [batch, 1, 1, length]: 0 where attended, MASKED on padding
    bias = ops.multiply(ops.subtract(ops.constant(np.float32(1.0)), mask_f), ops.constant(np.float32(MASKED)))
    bias = ops.unsqueeze(bias, ops.constant(np.array([1, 2], dtype=np.int64)))
    for i in range(ck.num_layers):
        x = _layer(x, bias, w, i, ck)
    return x


def weights(ck: Checkpoint) -> dict[str, np.ndarray]:
    return _prefixed(safetensors.read(ck.path / WEIGHTS))


def build(ck: Checkpoint) -> ov.Model:
    w = weights(ck)
    ids, mask = inputs("input_ids", "attention_mask")
    x = encoder(w, ck, ids, mask)
    pooled = _pool(x, mask, ops.convert(mask, "f32"), ck)
    if ck.normalize:
        pooled = ops.normalize_l2(pooled, ops.constant(np.array([1], dtype=np.int64)), 1e-12, "max")
    pooled.output(0).get_tensor().set_names({"embeddings"})
    return ov.Model([pooled], [ids, mask], "sentence_encoder")


def _pool(x: Any, mask: Any, mask_f: Any, ck: Checkpoint) -> Any:
    one = ops.constant(np.array(1, dtype=np.int64))
    if ck.pooling == "cls":
        return ops.gather(x, ops.constant(np.array(0, dtype=np.int64)), one)
    if ck.pooling == "last":  # right-padded: the last attended position
        last = ops.subtract(ops.reduce_sum(mask, one, keep_dims=False), one)
        return ops.gather(x, last, one, batch_dims=1)
    weights = ops.unsqueeze(mask_f, ops.constant(np.array([2], dtype=np.int64)))
    summed = ops.reduce_sum(ops.multiply(x, weights), one, keep_dims=False)
    count = ops.maximum(ops.reduce_sum(weights, one, keep_dims=False), ops.constant(np.float32(1e-9)))
    return ops.divide(summed, count)


def cached_ir(ck: Checkpoint, cache_dir: Path, name: str, builder: Callable[[Checkpoint], ov.Model] = build) -> Path:
    """The IR of ``ck`` (as ``builder`` makes it) in the cache, built and written on the first call."""
    folder = Path(cache_dir).expanduser() / f"{name}-{ck.fingerprint()}"
    xml = folder / IR_XML
    if xml.is_file() and xml.with_suffix(".bin").is_file():
        return xml
    log.info("building the OpenVINO model of %s into %s (once)", ck.path, folder)
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f".part-{IR_XML}"
    ov.save_model(builder(ck), part, compress_to_fp16=False)
    part.with_suffix(".bin").replace(xml.with_suffix(".bin"))  # .bin first: a found .xml has its weights
    part.replace(xml)
    return xml
