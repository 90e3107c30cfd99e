"""The one-thread AMX guard's parts: how many threads OpenVINO will infer on (plugin config and
affinity mask), the crash rule, and what the engine does with a model's settings. No AMX CPU runs
here: the AMX host is a ``HostCpu`` the tests make (the real-engine check on this CPU is
tests/engine/server/test_one_cpu.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from genmesh.engine.core.config import ISA_ENV
from genmesh.engine.models.amx_guard import (
    GUARD_FLAG,
    ISA_FLAG,
    PRECISION,
    SAFE_ISA,
    HostCpu,
    UnsafeConfigError,
    crash_prone,
    guard,
    isa_allows_amx,
    this_host,
)
from genmesh.engine.models.cpu_threads import CpuFiles, cpu_flags, inference_threads
from genmesh.engine.models.ovms_config import RepositoryError, load
from genmesh.engine.settings import EngineSettings, parse_settings
from support.servers import DEFAULT_MODEL


def test_inference_threads_is_the_fewer_the_config_and_the_affinity_mask_allow() -> None:
    assert inference_threads({}, 2).threads == 2
    one = inference_threads({"INFERENCE_NUM_THREADS": 1}, 2)
    assert (one.threads, one.source) == (1, "INFERENCE_NUM_THREADS=1")
    assert inference_threads({"INFERENCE_NUM_THREADS": "4"}, 1).source == "CPU affinity (1 CPU)"
    assert inference_threads({"INFERENCE_NUM_THREADS": 0}, None).threads == 0  # 0: OpenVINO decides
    assert inference_threads({"INFERENCE_NUM_THREADS": "many"}, 3).threads == 3


def test_cpu_flags_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert {"amx_bf16", "amx_tile"} <= cpu_flags(CpuFiles(cpuinfo))
    assert cpu_flags(CpuFiles(tmp_path / "absent")) == frozenset()


@pytest.mark.parametrize(
    ("isa", "allows"),
    [
        (None, True),  # oneDNN's default: every ISA the CPU has
        ("", True),
        ("ALL", True),
        ("default", True),
        ("AVX512_CORE_AMX", True),
        ("AVX10_1_512_AMX_FP16", True),
        ("AVX512_CORE_BF16", False),  # the device findings' fix
        ("AVX2", False),
    ],
)
def test_which_onednn_isa_settings_allow_amx(isa: str | None, allows: bool) -> None:
    assert isa_allows_amx(isa) is allows


@pytest.mark.parametrize(
    ("threads", "amx", "precision", "isa", "crashes"),
    [
        (1, True, "bf16", None, True),  # Sapphire/Emerald Rapids, one thread: SIGFPE
        (1, True, "bfloat16", None, True),
        (1, True, "bf16", "AVX512_CORE_AMX", True),
        (1, True, "bf16", SAFE_ISA, False),  # AMX off, bf16 kept: works
        (2, True, "bf16", None, False),  # two threads work
        (1, True, "f32", None, False),  # f32 works
        (1, True, "f16", None, False),  # f16 works
        (1, False, "bf16", None, False),  # Zen 4: bf16 without AMX works
        (0, True, "bf16", None, False),  # no limit: OpenVINO uses every core
    ],
)
def test_the_crash_rule(threads: int, amx: bool, precision: str, isa: str | None, crashes: bool) -> None:
    assert crash_prone(threads, amx, precision, isa) is crashes


class Precision:
    """The CPU plugin's default precision, as a host reports it; counts the times it was asked."""

    def __init__(self, value: str) -> None:
        self.value, self.asked = value, 0

    def __call__(self) -> str:
        self.asked += 1
        return self.value


def host(cpus: int | None = 2, amx: bool = True, default: str = "bf16", inherited: str | None = None) -> HostCpu:
    return HostCpu(cpus, amx, Precision(default), inherited)


def settings(plugin_config: str = "{}", *flags: str) -> EngineSettings:
    return parse_settings(["--plugin-config", plugin_config, *flags])


ONE = '{"INFERENCE_NUM_THREADS": 1}'


def test_one_bf16_thread_on_amx_turns_amx_off_in_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    s = settings('{"INFERENCE_NUM_THREADS": 1, "KV_CACHE_PRECISION": "u8"}')
    with caplog.at_level(logging.WARNING, logger="genmesh.engine.models.amx_guard"):
        guarded = guard("m", s, host())
    assert guarded.max_cpu_isa == SAFE_ISA
    assert guarded.device_config == s.device_config  # the precision, bf16, is kept
    (note,) = [r.getMessage() for r in caplog.records]
    for part in ("model m", "INFERENCE_NUM_THREADS=1", "AMX turned off", f"{ISA_ENV}={SAFE_ISA}", "bf16 kept"):
        assert part in note
    assert "SIGFPE" in note
    assert "openvinotoolkit/openvino#33300" in note
    assert GUARD_FLAG in note
    # a one-CPU affinity mask counts the same; an explicit bf16 too
    assert guard("m", settings(), host(cpus=1)).max_cpu_isa == SAFE_ISA
    explicit = guard("m", settings('{"INFERENCE_PRECISION_HINT": "bf16"}'), host(cpus=1))
    assert explicit.max_cpu_isa == SAFE_ISA
    assert explicit.device_config[PRECISION] == "bf16"


@pytest.mark.parametrize(
    ("s", "h"),
    [
        (settings('{"INFERENCE_NUM_THREADS": 2}'), host(cpus=2)),  # two threads
        (settings(), host(cpus=2)),
        (settings(ONE), host(amx=False)),  # Zen 4
        (settings(ONE), host(default="f32")),  # a CPU without bf16
        (settings('{"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}'), host()),  # explicit f32
        (settings('{"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f16"}'), host()),  # explicit f16
        (settings(ONE, "--device", "GPU"), host()),  # not the CPU plugin
        (settings(ONE, ISA_FLAG, "AVX2"), host()),  # AMX off by the user's choice
        (settings(ONE), host(inherited=SAFE_ISA)),
        (settings(ONE, GUARD_FLAG), host()),  # the guard turned off
    ],
)
def test_nothing_changes_off_the_crash(s: EngineSettings, h: HostCpu) -> None:
    assert guard("m", s, h) is s


def test_the_default_precision_is_asked_only_on_the_crash_path() -> None:
    for h, s in ((host(amx=False), settings(ONE)), (host(), settings('{"INFERENCE_NUM_THREADS": 2}'))):
        guard("m", s, h)
        assert isinstance(h.default_precision, Precision)
        assert h.default_precision.asked == 0
    h = host()
    guard("m", settings(ONE), h)
    assert isinstance(h.default_precision, Precision)
    assert h.default_precision.asked == 1


def test_amx_allowed_explicitly_on_one_bf16_thread_is_refused_naming_the_setting() -> None:
    with pytest.raises(UnsafeConfigError) as err:
        guard("m", settings(ONE, ISA_FLAG, "AVX512_CORE_AMX"), host())
    assert f"{ISA_FLAG} AVX512_CORE_AMX" in str(err.value)
    assert "INFERENCE_NUM_THREADS=1" in str(err.value)
    assert f"{ISA_FLAG} {SAFE_ISA}" in str(err.value)  # the way out
    assert GUARD_FLAG in str(err.value)
    with pytest.raises(UnsafeConfigError, match=f"{ISA_ENV}=ALL \\(inherited from the environment\\)"):
        guard("m", settings(ONE), host(inherited="ALL"))
    # the flag wins over the environment, as in the core process
    assert guard("m", settings(ONE, ISA_FLAG, SAFE_ISA), host(inherited="ALL")).max_cpu_isa == SAFE_ISA
    # the same setting where it does not crash: honoured
    fine = settings(ONE, ISA_FLAG, "AVX512_CORE_AMX")
    assert guard("m", fine, host(amx=False)) is fine
    f32 = settings('{"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}', ISA_FLAG, "ALL")
    assert guard("m", f32, host()) is f32


def test_the_settings_are_typed() -> None:
    s = parse_settings([])
    assert (s.max_cpu_isa, s.one_thread_amx_guard) == (None, True)
    assert parse_settings([ISA_FLAG, SAFE_ISA]).max_cpu_isa == SAFE_ISA
    assert parse_settings([GUARD_FLAG]).one_thread_amx_guard is False
    with pytest.raises(SystemExit):
        parse_settings([ISA_FLAG, "AVX2; rm -rf"])


def test_loading_the_repository_applies_the_guard_and_refuses_amx_allowed() -> None:
    s = parse_settings(["--model", str(DEFAULT_MODEL), "--plugin-config", ONE])
    (spec,) = load(s, host()).models
    assert spec.settings.max_cpu_isa == SAFE_ISA
    amx = parse_settings(["--model", str(DEFAULT_MODEL), ISA_FLAG, "AVX512_CORE_AMX"])
    with pytest.raises(RepositoryError, match=f"{ISA_FLAG} AVX512_CORE_AMX"):
        load(amx, host(cpus=1))


def test_this_host_reads_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISA_ENV, "AVX2")
    h = this_host()
    assert h.cpus is not None
    assert h.cpus >= 1
    assert h.amx == bool({"amx_bf16", "amx_tile"} & cpu_flags())
    assert h.inherited_isa == "AVX2"
    assert h.default_precision() in ("bf16", "f32", "f16")
