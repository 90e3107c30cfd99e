"""The int8 path a chat model gets on this machine (``--int8-matmul``; native/selection.py): this CPU's
/proc/cpuinfo flags, oneDNN's instruction-set cap (``--max-cpu-isa`` or an inherited ``ONEDNN_MAX_CPU_ISA``:
capped to AVX2, a VNNI CPU multiplies as one without it), and the extension built into the GGUF cache where
the op is chosen and not built yet (blocking: ~10 s once, milliseconds once cached). The engine's loader and
the in-process benchmark ask here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import ISA_ENV
from ..native import build as native_build
from ..native.selection import Int8Choice, choose
from .cpu_threads import LINUX, CpuFiles, cpu_flags

if TYPE_CHECKING:
    from ..settings import EngineSettings


def int8_choice(settings: EngineSettings, files: CpuFiles = LINUX) -> Int8Choice:
    def build() -> Path:
        return native_build.build(settings.gguf_cache_dir, settings.int8_build_timeout_s)

    max_isa = settings.max_cpu_isa or os.environ.get(ISA_ENV) or None  # what the core's oneDNN may use
    return choose(settings.int8_matmul, cpu_flags(files), build, settings.device, max_isa)
