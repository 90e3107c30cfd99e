"""The engine never starts into OpenVINO's one-thread AMX crash.

OpenVINO 2026.4's CPU plugin dies with SIGFPE while it compiles an LLM on ONE thread in bf16 when
oneDNN may use AMX (Intel Xeon Sapphire and Emerald Rapids; openvinotoolkit/openvino#33300). Two
threads work; bf16 on one thread with AMX off (oneDNN's ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``)
works and keeps the precision the engine serves at elsewhere; f32 and f16 on one thread work; AMD
Zen 4 (AVX-512 bf16, no AMX) works. ``crash_prone`` is that rule, in one place.

Before any core is spawned (``ovms_config.load``), each model's settings are checked against this
machine: where the rule holds and nothing chose the instruction set, the model's ``max_cpu_isa``
becomes ``AVX512_CORE_BF16`` (the core sets ``ONEDNN_MAX_CPU_ISA`` before it imports OpenVINO),
with one log line saying so; where ``--max-cpu-isa`` or an inherited ``ONEDNN_MAX_CPU_ISA`` allows
AMX explicitly, the engine refuses to start, naming the setting. An explicit f32 or f16 precision
is left alone (it does not crash). ``--no-one-thread-amx-guard`` turns the guard off (for an
OpenVINO that no longer crashes).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.config import ISA_ENV
from .cpu_threads import LINUX, CpuFiles, affinity_cpus, cpu_flags, inference_threads

if TYPE_CHECKING:
    from ..settings import EngineSettings

log = logging.getLogger("genmesh.engine.models.amx_guard")

PRECISION = "INFERENCE_PRECISION_HINT"
SAFE_ISA = "AVX512_CORE_BF16"  # oneDNN's most capable ISA without AMX; keeps bf16
UPSTREAM = "openvinotoolkit/openvino#33300"
AMX_FLAGS = frozenset({"amx_bf16", "amx_tile"})  # /proc/cpuinfo flags of Intel AMX
GUARD_FLAG = "--no-one-thread-amx-guard"
ISA_FLAG = "--max-cpu-isa"


class UnsafeConfigError(ValueError):
    """The settings ask for the crash explicitly (AMX allowed on one bf16 thread)."""


def is_bf16(precision: str) -> bool:
    return precision.strip().lower() in ("bf16", "bfloat16")


def isa_allows_amx(isa: str | None) -> bool:
    """Whether oneDNN may use AMX under this ``ONEDNN_MAX_CPU_ISA`` (unset or empty: every ISA the
    CPU has; ``ALL``/``DEFAULT`` likewise; ``AVX512_CORE_AMX``, ``AVX10_1_512_AMX``, ...: yes)."""
    value = (isa or "").strip().upper()
    return value in ("", "ALL", "DEFAULT") or "AMX" in value


def crash_prone(threads: int, amx: bool, precision: str, isa: str | None = None) -> bool:
    """OpenVINO's CPU plugin dies (SIGFPE) compiling a model with this: one inference thread, a CPU
    with AMX, bf16 inference precision, and oneDNN allowed to use AMX."""
    return threads == 1 and amx and is_bf16(precision) and isa_allows_amx(isa)


@functools.cache
def openvino_default_precision(device: str = "CPU") -> str:
    """What the CPU plugin infers in when the config does not say (bf16 where the CPU has it)."""
    import openvino as ov

    value = ov.Core().get_property(device, PRECISION)
    name = getattr(value, "get_type_name", None)
    return str(name() if callable(name) else value)


@dataclass(frozen=True)
class HostCpu:
    """What the rule needs to know of this machine (tests make their own)."""

    cpus: int | None  # the affinity mask's size
    amx: bool
    default_precision: Callable[[], str]  # asked only when the rest already points at the crash
    inherited_isa: str | None = None  # ONEDNN_MAX_CPU_ISA in the environment the core inherits


def this_host(files: CpuFiles = LINUX) -> HostCpu:
    amx = bool(AMX_FLAGS & cpu_flags(files))
    return HostCpu(affinity_cpus(), amx, openvino_default_precision, os.environ.get(ISA_ENV) or None)


def guard(model: str, settings: EngineSettings, host: HostCpu) -> EngineSettings:
    """``settings`` that do not crash on ``host`` (the same object when no change is needed or the
    guard is off); logs one line when it changes anything. ``UnsafeConfigError`` when the settings
    allow AMX explicitly where it crashes."""
    if not settings.one_thread_amx_guard or settings.device.strip().upper() != "CPU" or not host.amx:
        return settings
    limit = inference_threads(settings.device_config, host.cpus)
    if limit.threads != 1:
        return settings
    explicit = settings.device_config.get(PRECISION)
    precision = str(explicit) if explicit is not None else host.default_precision()
    if not is_bf16(precision):
        return settings  # f32, f16: no crash
    where = f"{PRECISION}={explicit}" if explicit is not None else "bf16 (the CPU plugin's default here)"
    if settings.max_cpu_isa is not None or host.inherited_isa is not None:
        chosen = (
            f"{ISA_FLAG} {settings.max_cpu_isa}"
            if settings.max_cpu_isa is not None
            else f"{ISA_ENV}={host.inherited_isa} (inherited from the environment)"
        )
        isa = settings.max_cpu_isa if settings.max_cpu_isa is not None else host.inherited_isa
        if not isa_allows_amx(isa):
            return settings  # AMX is off already, by the user's choice
        raise UnsafeConfigError(
            f"{chosen} lets oneDNN use AMX, and the model infers in {where} on one inference thread "
            f"({limit.source}) on a CPU with AMX: OpenVINO's CPU plugin dies with SIGFPE compiling the model "
            f"there ({UPSTREAM}); use {ISA_FLAG} {SAFE_ISA} (or leave it unset: the engine then turns AMX off "
            f"itself), {PRECISION} f32, give the engine two CPUs, or pass {GUARD_FLAG} on an OpenVINO that is fixed"
        )
    log.warning(
        "model %s: one inference thread (%s) in %s on a CPU with AMX: AMX turned off in the engine core "
        "(%s=%s, bf16 kept; OpenVINO dies with SIGFPE compiling the model on one thread with AMX, %s; %s keeps AMX)",
        model,
        limit.source,
        where,
        ISA_ENV,
        SAFE_ISA,
        UPSTREAM,
        GUARD_FLAG,
    )
    return settings.model_copy(update={"max_cpu_isa": SAFE_ISA})
