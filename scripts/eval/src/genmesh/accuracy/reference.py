"""The fp32 reference: a GGUF Llama model run in numpy, from the GGUF's own weights.

Every tensor is dequantised by the ``gguf`` package (bit-exact with llama.cpp's dequantisation)
and the forward pass is the Llama architecture as llama.cpp runs it: RMSNorm, rotary position
embeddings on adjacent pairs (llama.cpp's "normal" rope: the converter permuted the Q and K rows
for it), grouped-query attention, a SwiGLU MLP, the output projection tied to the token
embeddings when the file has no ``output.weight``. Matrix products are float32; softmax and
log-softmax run in float64. No torch: this is what ``make eval``'s fixture and the fidelity
checks compare the served model with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_base: float
    rms_eps: float
    context: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _field(reader: Any, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        raise KeyError(f"GGUF metadata has no {key!r}")
    return f.contents()


def read_config(reader: Any) -> LlamaConfig:
    arch = str(_field(reader, "general.architecture"))
    if arch != "llama":
        raise ValueError(f"the reference implements the llama architecture, not {arch!r}")

    def get(key: str) -> Any:
        return _field(reader, f"llama.{key}")

    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    return LlamaConfig(
        layers=int(get("block_count")),
        hidden=int(get("embedding_length")),
        heads=int(get("attention.head_count")),
        kv_heads=int(get("attention.head_count_kv")),
        ffn=int(get("feed_forward_length")),
        vocab=int(embed.shape[1]),
        rope_base=float(get("rope.freq_base")),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        context=int(get("context_length")),
    )


def dequantised(reader: Any) -> dict[str, F32]:
    """Every tensor of the file in float32, dequantised by the ``gguf`` package."""
    from gguf import quants

    out: dict[str, F32] = {}
    for t in reader.tensors:
        out[t.name] = np.ascontiguousarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    return out


@dataclass
class KVCache:
    keys: list[F32] = field(default_factory=list)
    values: list[F32] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.keys else int(self.keys[0].shape[1])


class NumpyLlama:
    """``logits(ids)``: float32 logits at every position; ``cache`` continues a sequence."""

    def __init__(self, config: LlamaConfig, weights: dict[str, F32]) -> None:
        self.config = config
        self.w = weights
        self.embed = weights["token_embd.weight"]
        self.output = weights.get("output.weight", self.embed)
        half = config.head_dim // 2
        self.inv_freq = (1.0 / config.rope_base ** (np.arange(half, dtype=np.float64) * 2.0 / config.head_dim)).astype(
            np.float64
        )

    @classmethod
    def from_gguf(cls, path: str | Path) -> NumpyLlama:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        return cls(read_config(reader), dequantised(reader))

    def _norm(self, x: F32, weight: F32) -> F32:
        var = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        out: F32 = (x / np.sqrt(var + self.config.rms_eps)).astype(np.float32) * weight
        return out

    def _rope(self, x: F32, positions: npt.NDArray[np.int64]) -> F32:
        """Rotate adjacent pairs (x[2i], x[2i+1]) by position * inv_freq[i] (llama.cpp's normal rope)."""
        angles = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # (T, half)
        cos = np.cos(angles).astype(np.float32)[None]  # (1, T, half)
        sin = np.sin(angles).astype(np.float32)[None]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def logits(self, ids: list[int], cache: KVCache | None = None) -> F32:
        c = self.config
        start = cache.length if cache is not None else 0
        n = len(ids)
        positions = np.arange(start, start + n, dtype=np.int64)
        x: npt.NDArray[Any] = self.embed[np.asarray(ids, dtype=np.int64)]  # (T, hidden)
        hd, group = c.head_dim, c.heads // c.kv_heads
        for layer in range(c.layers):
            p = f"blk.{layer}."
            h = self._norm(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(n, c.heads, hd).transpose(1, 0, 2)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(n, c.kv_heads, hd).transpose(1, 0, 2)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(n, c.kv_heads, hd).transpose(1, 0, 2)
            q, k = self._rope(q, positions), self._rope(k, positions)
            if cache is not None:
                if layer < len(cache.keys):
                    k = np.concatenate([cache.keys[layer], k], axis=1)
                    v = np.concatenate([cache.values[layer], v], axis=1)
                    cache.keys[layer], cache.values[layer] = k, v
                else:
                    cache.keys.append(k)
                    cache.values.append(v)
            total = k.shape[1]
            k = np.repeat(k, group, axis=0)
            v = np.repeat(v, group, axis=0)
            scores = (q @ k.transpose(0, 2, 1)).astype(np.float64) / np.sqrt(hd)  # (heads, T, total)
            mask = np.arange(total)[None, :] > positions[:, None]
            scores = np.where(mask[None], -np.inf, scores)
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = (probs.astype(np.float32) @ v).transpose(1, 0, 2).reshape(n, c.hidden)
            x = x + attn @ self.w[p + "attn_output.weight"].T
            h = self._norm(x, self.w[p + "ffn_norm.weight"])
            gate = h @ self.w[p + "ffn_gate.weight"].T
            up = h @ self.w[p + "ffn_up.weight"].T
            act = (gate / (1.0 + np.exp(-gate.astype(np.float64)))).astype(np.float32) * up
            x = x + act @ self.w[p + "ffn_down.weight"].T
        x = self._norm(x, self.w["output_norm.weight"])
        out: F32 = (x @ self.output.T).astype(np.float32)
        return out


def log_softmax(logits: F32) -> npt.NDArray[np.float64]:
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    out: npt.NDArray[np.float64] = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return out


def greedy(model: NumpyLlama, prompt: list[int], max_new: int, stop: set[int]) -> tuple[list[int], list[float]]:
    """Greedy continuation with the log-probability of each chosen token."""
    cache = KVCache()
    logits = model.logits(prompt, cache)[-1]
    out: list[int] = []
    lps: list[float] = []
    for _ in range(max_new):
        lp = log_softmax(logits)
        token = int(np.argmax(lp))
        out.append(token)
        lps.append(float(lp[token]))
        if token in stop:
            break
        logits = model.logits([token], cache)[-1]
    return out, lps
