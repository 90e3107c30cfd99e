"""Which path multiplies the exact form's Q4_1, Q4_K, Q6_K and Q8_0 matrices: ``genmesh::Q41MatMul``,
``Q4KX8MatMul``, ``Q6KX8MatMul`` and ``Q80MatMul`` (int8 dot products with AVX2 ``maddubs``) or OpenVINO's own CPU
plugin, chosen by the CPU (``--int8-matmul``).

OpenVINO's CPU plugin multiplies 4-bit weights with int8 activations only where the CPU has VNNI
(``avx512_vnni``, ``avx_vnni``) or AMX; on AVX2 CPUs without them it widens every weight to f32
(issue 56, docs/int8-avx2.md). ``auto`` picks the op exactly there and OpenVINO's path elsewhere;
``genmesh`` and ``openvino`` force either; ``auto`` is the default (``DEFAULT_MODE``). Where the op is chosen
but its extension cannot be built (no compiler), the engine serves with OpenVINO's path and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .build import BuildError
from .q41_op import OP_TYPES, OPSET

Mode = Literal["auto", "openvino", "genmesh"]
MODES: tuple[Mode, ...] = ("auto", "openvino", "genmesh")
# The op where the CPU (or oneDNN's cap) has AVX2 without VNNI or AMX: there, measured with the instruction set
# capped to AVX2 on Zen 4, the op path runs 1.13-1.62x OpenVINO's and passes every make eval figure at both hops
# (docs/int8-avx2.md, docs/accuracy.md). Where the CPU has VNNI or AMX, OpenVINO's own int8 path is faster.
DEFAULT_MODE: Mode = "auto"
# /proc/cpuinfo flags with which OpenVINO's CPU plugin quantises activations to int8 itself
INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8", "amx_tile"})
# oneDNN instruction-set caps (ONEDNN_MAX_CPU_ISA, --max-cpu-isa) under which the plugin has no VNNI or AMX to
# quantise with, whatever the CPU has: ``auto`` treats the CPU as one without them
NO_VNNI_ISAS = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})
AVX2_FLAGS = frozenset({"avx2", "fma", "f16c"})  # what the op's AVX2 kernel needs (else: its scalar kernel)
FLAG = "--int8-matmul"
# for Q4_1, Q4_K, Q6_K and Q8_0 matrices (core/gguf_exact.py: OP_KINDS)
OPS = ", ".join(f"{OPSET}::{name}" for name in OP_TYPES.values())
KINDS = "/".join(OP_TYPES)


@dataclass(frozen=True)
class Int8Choice:
    """The path chosen, why, and the extension's library when it is the op's."""

    path: Literal["genmesh", "openvino"]
    reason: str
    library: Path | None = None
    fell_back: bool = False  # the op was chosen but its extension could not be built

    @property
    def op(self) -> str | None:
        """The ops the exact form writes for Q4_1, Q4_K, Q6_K and Q8_0 matmuls (None: OpenVINO's MatMul)."""
        return OPS if self.path == "genmesh" else None

    def describe(self) -> dict[str, str | None]:
        """What ``/v1/config`` shows (``scorer``: the path of prompt log-probabilities and top-k, OpenVINO's
        either way: core/model_loading.py)."""
        return {
            "path": self.path,
            "op": self.op,
            "reason": self.reason,
            "library": str(self.library or "") or None,
            "scorer": "openvino",
        }

    def log_line(self) -> str:
        if self.path == "genmesh":
            return (
                f"int8 matmuls: {OPS} for the {KINDS} matrices ({self.reason}; {self.library}); "
                "prompt log-probabilities and top-k: OpenVINO's path"
            )
        return f"int8 matmuls: OpenVINO's CPU plugin ({self.reason})"


def choose(
    mode: Mode, flags: frozenset[str], build: Callable[[], Path], device: str = "CPU", max_isa: str | None = None
) -> Int8Choice:
    """The path for ``mode`` on a CPU with these /proc/cpuinfo ``flags`` and oneDNN capped to ``max_isa`` (None:
    not capped); ``build`` returns the extension's library (``build.build``) or raises ``BuildError``, and is
    called only where the op is chosen."""
    if mode == "openvino":
        return Int8Choice("openvino", f"{FLAG} openvino")
    if not device.strip().upper().startswith("CPU"):
        return Int8Choice("openvino", f"the device is {device}, not the CPU: the op is a CPU kernel")
    capped = (max_isa or "").strip().upper() in NO_VNNI_ISAS
    int8 = [] if capped else sorted(flags & INT8_FLAGS)
    missing = sorted(AVX2_FLAGS - flags)
    if mode == "auto":
        if int8:
            return Int8Choice(
                "openvino",
                f"{FLAG} auto: the CPU has {'/'.join(int8)}, so OpenVINO quantises activations to int8 itself",
            )
        if missing:
            lacks = "/".join(missing)
            return Int8Choice("openvino", f"{FLAG} auto: the CPU lacks {lacks} (the op's kernel needs AVX2)")
        why = f"{FLAG} auto: the CPU has AVX2 without VNNI or AMX (OpenVINO would widen 4-bit weights to f32)"
        if capped and flags & INT8_FLAGS:
            why = (
                f"{FLAG} auto: oneDNN is capped to {max_isa!s} (no VNNI or AMX; the CPU has "
                f"{'/'.join(sorted(flags & INT8_FLAGS))}), so OpenVINO would widen 4-bit weights to f32"
            )
    else:
        kernel = "its scalar kernel: the CPU lacks " + "/".join(missing) if missing else "its AVX2 kernel"
        has = f", though the CPU has {'/'.join(int8)}" if int8 else ""
        why = f"{FLAG} genmesh ({kernel}{has})"
    try:
        library = build()
    except BuildError as exc:
        return Int8Choice("openvino", f"{why}, but its extension could not be built: {exc}", fell_back=True)
    return Int8Choice("genmesh", why, library)
