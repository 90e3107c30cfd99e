"""The fp32 reference: a GGUF decoder (``llama`` or ``qwen2``) run in numpy, from the GGUF's own weights.

Every tensor is dequantised by the ``gguf`` package (bit-exact with llama.cpp's dequantisation)
and the forward pass is the architecture as llama.cpp runs it: RMSNorm, rotary position
embeddings, grouped-query attention, a SwiGLU MLP, the output projection tied to the token
embeddings when the file has no ``output.weight``. The architectures differ only where
:data:`ARCHS` says: ``llama`` rotates adjacent pairs (llama.cpp's "normal" rope: its converter
permuted the Q and K rows for it); ``qwen2`` rotates the two halves of each head (llama.cpp's
``LLAMA_ROPE_TYPE_NEOX``, rows as the checkpoint has them). The ``attn_q/k/v.bias`` of a file
that has them (qwen2's) are added before the rope, as llama.cpp does for either architecture.
Matrix products are float32; softmax and log-softmax run in float64. No torch: this is what
``make eval``'s fixture and the fidelity checks compare the served model with.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Arch:
    """What an architecture changes in the forward pass (the rest is llama's)."""

    neox_rope: bool  # rotate (x[i], x[i + d/2]) rather than (x[2i], x[2i+1])


# llama.cpp's llama_model_rope_type(): LLM_ARCH_LLAMA -> NORM, LLM_ARCH_QWEN2 -> NEOX; its
# convert_hf_to_gguf.py permutes Q/K rows for llama only (LlamaModel.permute; Qwen2Model does not).
ARCHS: dict[str, Arch] = {
    "llama": Arch(neox_rope=False),
    "qwen2": Arch(neox_rope=True),
}


@dataclass(frozen=True)
class DecoderConfig:
    arch: str
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


def read_config(reader: Any) -> DecoderConfig:
    arch = str(_field(reader, "general.architecture"))
    if arch not in ARCHS:
        raise ValueError(f"the reference implements the {' and '.join(ARCHS)} architectures, not {arch!r}")

    def get(key: str) -> Any:
        return _field(reader, f"{arch}.{key}")

    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    return DecoderConfig(
        arch=arch,
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


def _dequantise(tensor: Any) -> F32:
    from gguf import quants

    return np.ascontiguousarray(quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def dequantised(reader: Any) -> dict[str, F32]:
    """Every tensor of the file in float32, dequantised by the ``gguf`` package."""
    return {t.name: _dequantise(t) for t in reader.tensors}


class LazyWeights(Mapping[str, F32]):
    """The file's tensors dequantised at each use, from the memory-mapped file: a 1.5B model in
    well under its 6 GiB of float32, for a few forward passes (each dequantises every tensor again)."""

    def __init__(self, reader: Any) -> None:
        self._tensors = {t.name: t for t in reader.tensors}

    def __getitem__(self, name: str) -> F32:
        return _dequantise(self._tensors[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors


@dataclass
class KVCache:
    keys: list[F32] = field(default_factory=list)
    values: list[F32] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.keys else int(self.keys[0].shape[1])


class NumpyDecoder:
    """``logits(ids)``: float32 logits at every position; ``cache`` continues a sequence."""

    def __init__(self, config: DecoderConfig, weights: Mapping[str, F32]) -> None:
        self.config = config
        self.arch = ARCHS[config.arch]
        self.w = weights
        self.output_name = "output.weight" if "output.weight" in weights else "token_embd.weight"
        half = config.head_dim // 2
        self.inv_freq = (1.0 / config.rope_base ** (np.arange(half, dtype=np.float64) * 2.0 / config.head_dim)).astype(
            np.float64
        )

    @classmethod
    def from_gguf(cls, path: str | Path, lazy: bool = False) -> NumpyDecoder:
        """``lazy``: dequantise each tensor when used (:class:`LazyWeights`) instead of once."""
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        return cls(read_config(reader), LazyWeights(reader) if lazy else dequantised(reader))

    def _norm(self, x: F32, weight: F32) -> F32:
        var = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        out: F32 = (x / np.sqrt(var + self.config.rms_eps)).astype(np.float32) * weight
        return out

    def _rope(self, x: F32, positions: npt.NDArray[np.int64]) -> F32:
        """Rotate each pair (a, b) by position * inv_freq[i]: the pairs are (x[2i], x[2i+1]) for
        llama.cpp's normal rope, (x[i], x[i + d/2]) for its NEOX rope."""
        angles = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # (T, half)
        cos = np.cos(angles).astype(np.float32)[None]  # (1, T, half)
        sin = np.sin(angles).astype(np.float32)[None]
        half = x.shape[-1] // 2
        pair: tuple[slice, slice] = (
            (slice(0, half), slice(half, None)) if self.arch.neox_rope else (slice(0, None, 2), slice(1, None, 2))
        )
        a, b = x[..., pair[0]], x[..., pair[1]]
        out = np.empty_like(x)
        out[..., pair[0]] = a * cos - b * sin
        out[..., pair[1]] = a * sin + b * cos
        return out

    def _project(self, h: F32, name: str, heads: int) -> F32:
        """(T, hidden) -> (heads, T, head_dim), with the file's bias where the architecture has one."""
        y = h @ self.w[name + ".weight"].T
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        out: F32 = y.reshape(h.shape[0], heads, self.config.head_dim).transpose(1, 0, 2)
        return out

    def logits(self, ids: list[int], cache: KVCache | None = None) -> F32:
        c = self.config
        start = cache.length if cache is not None else 0
        n = len(ids)
        positions = np.arange(start, start + n, dtype=np.int64)
        x: npt.NDArray[Any] = self.w["token_embd.weight"][np.asarray(ids, dtype=np.int64)]  # (T, hidden)
        hd, group = c.head_dim, c.heads // c.kv_heads
        for layer in range(c.layers):
            p = f"blk.{layer}."
            h = self._norm(x, self.w[p + "attn_norm.weight"])
            q = self._project(h, p + "attn_q", c.heads)
            k = self._project(h, p + "attn_k", c.kv_heads)
            v = self._project(h, p + "attn_v", c.kv_heads)
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
        out: F32 = (x @ self.w[self.output_name].T).astype(np.float32)
        return out


def log_softmax(logits: F32) -> npt.NDArray[np.float64]:
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    out: npt.NDArray[np.float64] = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return out


def greedy(model: NumpyDecoder, prompt: list[int], max_new: int, stop: set[int]) -> tuple[list[int], list[float]]:
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
