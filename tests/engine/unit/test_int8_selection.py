"""Which path multiplies the exact form's Q4_1 matrices (genmesh.engine.native.selection), by the CPU's
/proc/cpuinfo flags and ``--int8-matmul``; and the build's answer where no compiler can be found (a real
subprocess with an empty PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from genmesh.engine.core.pipeline_config import pipeline_properties
from genmesh.engine.native.build import BuildError, build, library_path
from genmesh.engine.native.selection import choose

ZEN3 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})  # AVX2 without VNNI: the op's target
ZEN4 = ZEN3 | {"avx512f", "avx512_vnni", "avx512_bf16"}
ALDER_LAKE = ZEN3 | {"avx_vnni"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_int8", "amx_bf16"}
OLD = frozenset({"sse4_2", "avx"})
LIB = Path("/cache/native/int8-0/libgenmesh_int8.so")


def built() -> Path:
    return LIB


def not_built() -> Path:
    raise BuildError("cmake is not installed")


def never() -> Path:
    raise AssertionError("built where the op was not chosen")


def test_auto_picks_the_op_only_on_avx2_without_vnni_or_amx() -> None:
    zen3 = choose("auto", ZEN3, built)
    ops = "genmesh::Q41X8MatMul, genmesh::Q4KX8MatMul, genmesh::Q6KX8MatMul, genmesh::Q80MatMul"
    assert (zen3.path, zen3.library, zen3.op) == ("genmesh", LIB, ops)
    assert "AVX2 without VNNI" in zen3.reason
    for flags, named in ((ZEN4, "avx512_vnni"), (ALDER_LAKE, "avx_vnni"), (SAPPHIRE_RAPIDS, "amx_int8")):
        other = choose("auto", flags, never)
        assert (other.path, other.library, other.op) == ("openvino", None, None)
        assert named in other.reason
    old = choose("auto", OLD, never)
    assert old.path == "openvino"
    assert "avx2" in old.reason


def test_the_flag_forces_either_path() -> None:
    forced = choose("genmesh", ZEN4, built)
    assert forced.path == "genmesh"
    assert "avx512_vnni" in forced.reason
    scalar = choose("genmesh", OLD, built)
    assert scalar.path == "genmesh"
    assert "scalar kernel" in scalar.reason
    assert choose("openvino", ZEN3, never).reason == "--int8-matmul openvino"
    assert choose("auto", ZEN3, never, device="GPU").path == "openvino"


def test_a_failed_build_serves_openvino_s_path_and_says_why() -> None:
    choice = choose("auto", ZEN3, not_built)
    assert (choice.path, choice.library, choice.fell_back) == ("openvino", None, True)
    assert "could not be built: cmake is not installed" in choice.reason
    assert "could not be built" in choice.log_line()


def test_the_extension_reaches_the_pipeline_as_its_extensions_property() -> None:
    assert pipeline_properties({"A": 1}, False, str(LIB)) == {"A": 1, "extensions": [str(LIB)]}
    assert "extensions" not in pipeline_properties({"A": 1}, True)


def test_the_build_says_why_without_cmake(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no cmake, no compiler
    done = subprocess.run(
        [sys.executable, "-m", "genmesh.engine.native.build", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert "cmake is not installed" in done.stderr
    assert not list(tmp_path.glob("native/int8-*/*.so"))


def test_a_library_an_image_ships_is_found_without_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """services/Dockerfile builds the library into the image's prefix and removes the compilers: the engine
    finds it there (after its own cache), and never tries to build."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no cmake, no compiler
    shipped = library_path(tmp_path / "prefix")
    with pytest.raises(BuildError, match="cmake is not installed"):
        build(tmp_path / "cache", shipped_dir=tmp_path / "prefix")
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(b"\x7fELF")
    assert build(tmp_path / "cache", shipped_dir=tmp_path / "prefix") == shipped
    cached = library_path(tmp_path / "cache")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"\x7fELF")
    assert build(tmp_path / "cache", shipped_dir=tmp_path / "prefix") == cached  # the cache first


@pytest.mark.parametrize("mode", ["auto", "openvino", "genmesh"])
def test_the_setting_takes_each_mode(mode: str) -> None:
    from genmesh.engine.settings import EngineSettings

    assert EngineSettings.from_cli(["--int8-matmul", mode]).int8_matmul == mode


def test_auto_picks_the_op_where_onednn_is_capped_below_vnni() -> None:
    """Capped to AVX2 (``--max-cpu-isa``, ``ONEDNN_MAX_CPU_ISA``), the plugin cannot quantise with VNNI or AMX even
    where the CPU has them: ``auto`` chooses as on a CPU without them, and says so."""
    for flags in (ZEN4, SAPPHIRE_RAPIDS, ALDER_LAKE):
        capped = choose("auto", flags, built, max_isa="avx2")
        assert capped.path == "genmesh", capped
        assert "capped to avx2" in capped.reason
    assert choose("auto", ZEN3, built, max_isa="AVX2").reason == choose("auto", ZEN3, built).reason
    for isa in ("AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX2_VNNI", None, "ALL"):
        assert choose("auto", ZEN4 | ALDER_LAKE, never, max_isa=isa).path == "openvino", isa
