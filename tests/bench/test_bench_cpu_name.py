"""The report's machine table names the CPU well enough to tell two CPUs apart (issue 56: "with the CPU named")."""

from __future__ import annotations

from pathlib import Path

import pytest

from genmesh.bench.results import ENGINE_CPU_KNOBS, cpu_name, describe
from genmesh.engine.settings import EngineSettings

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse sse2 avx avx2 fma f16c bmi2

processor\t: 1
model name\t: another CPU
flags\t\t: avx512f amx_int8
"""
ZEN4 = ZEN3.replace("model\t\t: 1\n", "model\t\t: 17\n").replace("bmi2", "bmi2 avx512f avx512_vnni avx512_bf16")
SPR = "model name\t: Intel(R) Xeon(R) Processor\ncpu family\t: 6\nmodel\t\t: 143\n"
SPR += "flags\t\t: avx2 avx512f avx_vnni amx_int8\n"


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        (ZEN3, "AMD EPYC (family 25, model 1, stepping 1; AVX2)"),
        (ZEN4, "AMD EPYC (family 25, model 17, stepping 1; AVX2, AVX-512, VNNI, BF16)"),
        (SPR, "Intel(R) Xeon(R) Processor (family 6, model 143; AVX2, AVX-512, VNNI, AMX)"),
    ],
)
def test_the_cpu_is_named_by_family_model_and_instruction_sets(cpuinfo: str, expected: str) -> None:
    # only the first processor's block counts: the second one's flags (AVX-512, AMX) must not leak into Zen 3's name
    assert cpu_name(cpuinfo) == expected


def test_two_generations_under_one_model_name_are_told_apart() -> None:
    assert cpu_name(ZEN3) != cpu_name(ZEN4)


def test_the_report_names_this_machines_cpu() -> None:
    cpu = describe()["cpu"]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and "flags" in cpuinfo.read_text():
        assert "family" in cpu, cpu
        assert ";" in cpu, cpu  # and the instruction-set classes after the identifiers
    assert cpu not in ("", "unknown")


def test_an_isa_cap_is_named_beside_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # a report taken with oneDNN capped to AVX2 stands in for another CPU: its machine table must say so
    monkeypatch.setenv("GENMESH_ENGINE_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("GENMESH_ENGINE_PLUGIN_CONFIG", '{"INFERENCE_PRECISION_HINT":"f32"}')
    monkeypatch.delenv("GENMESH_ENGINE_INT8_MATMUL", raising=False)
    env = describe()["engine environment"]
    assert env == '`GENMESH_ENGINE_MAX_CPU_ISA=AVX2`, `GENMESH_ENGINE_PLUGIN_CONFIG={"INFERENCE_PRECISION_HINT":"f32"}`'


def test_without_the_knobs_there_is_no_environment_row(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENGINE_CPU_KNOBS:
        monkeypatch.delenv(name, raising=False)
    assert "engine environment" not in describe()


def test_the_knobs_are_the_engines_settings() -> None:
    # a renamed setting would leave the report reading a variable that nothing sets
    prefix = EngineSettings.model_config["env_prefix"]
    for name in ENGINE_CPU_KNOBS:
        assert name.startswith(prefix), name
        assert name.removeprefix(prefix).lower() in EngineSettings.model_fields, name
