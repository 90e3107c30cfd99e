"""The int8 path a chat model gets on this machine (``--int8-matmul``; native/selection.py): this CPU's
/proc/cpuinfo flags, and the extension built into the GGUF cache where the op is chosen and not built yet
(blocking: ~10 s once, milliseconds once cached). The engine's loader and the in-process benchmark ask here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..native import build as native_build
from ..native.selection import Int8Choice, choose
from .cpu_threads import LINUX, CpuFiles, cpu_flags

if TYPE_CHECKING:
    from ..settings import EngineSettings


def int8_choice(settings: EngineSettings, files: CpuFiles = LINUX) -> Int8Choice:
    def build() -> Path:
        return native_build.build(settings.gguf_cache_dir, settings.int8_build_timeout_s)

    return choose(settings.int8_matmul, cpu_flags(files), build, settings.device)
