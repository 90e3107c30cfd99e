"""Build the int8 extension (``int8/``: ``genmesh::Q41(X8)MatMul``, ``Q4K(X8)MatMul``, ``Q6K(X8)MatMul``,
``Q80MatMul``) with cmake and the system's C++ compiler, against the ``openvino`` wheel's ``include/`` and
``cmake/``, once per source.

The shared library lands in ``<cache>/native/int8-<key>/libgenmesh_int8.so``, where ``key`` hashes the
sources, the OpenVINO version and the machine type: a changed kernel or a new OpenVINO builds anew, an
unchanged one is found in milliseconds. The folder appears complete or not at all (built in a temporary
folder beside it, then renamed), so replicas starting together never load half a file.

``python -m genmesh.engine.native.build`` (``make native``) builds it and prints its path, or why not.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "int8"
# Every file of the folder (CMakeLists.txt and the C++ sources): a new or changed one changes the key
SOURCES = tuple(sorted(p.name for p in SOURCE_DIR.iterdir() if p.suffix in (".txt", ".hpp", ".cpp")))
LIBRARY = "libgenmesh_int8.so"
DEFAULT_CACHE_DIR = "~/.cache/genmesh"
DEFAULT_TIMEOUT_S = 600.0  # one cmake step (configure or compile); ~10 s on 2 idle cores
# Where an image ships the library prebuilt (services/Dockerfile builds it there, then removes the compilers):
# looked up after the cache, so an engine without cmake or g++ still finds it. Read-only; never built into.
SHIPPED_DIR = Path(sys.prefix) / "share" / "genmesh"


class BuildError(RuntimeError):
    """The extension could not be built here (no cmake or compiler, or the build failed)."""


def _openvino_version() -> str:
    import openvino as ov

    return str(ov.get_version())


def source_key() -> str:
    """What the built library depends on: its sources, OpenVINO's version, the machine type."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    h.update(f"{_openvino_version()}|{platform.machine()}".encode())
    return h.hexdigest()[:16]


def library_path(cache_dir: str | Path = DEFAULT_CACHE_DIR) -> Path:
    """Where the library for the present sources lives (whether built or not)."""
    return Path(cache_dir).expanduser() / "native" / f"int8-{source_key()}" / LIBRARY


def _run(cmd: list[str], timeout_s: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{' '.join(cmd[:2])} took longer than {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise BuildError(f"{' '.join(cmd[:2])} failed (exit {done.returncode}): {' / '.join(tail)}")


def build(
    cache_dir: str | Path = DEFAULT_CACHE_DIR, timeout_s: float = DEFAULT_TIMEOUT_S, shipped_dir: Path = SHIPPED_DIR
) -> Path:
    """The extension's shared library for the present sources: found in the cache or where an image ships it
    (``shipped_dir``), or built into the cache. Raises ``BuildError`` saying why it cannot be built here."""
    target = library_path(cache_dir)
    if target.is_file():
        return target
    shipped = library_path(shipped_dir)
    if shipped.is_file():
        return shipped
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake is not installed (make native installs it with g++ from Debian)")
    if shutil.which(os.environ.get("CXX", "c++")) is None and shutil.which("g++") is None:
        raise BuildError("no C++ compiler (c++ or g++) is installed (make native installs g++ from Debian)")
    import openvino as ov

    cmake_dir = Path(ov.__file__).resolve().parent / "cmake"
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.parent.name}.", suffix=".part", dir=target.parent.parent))
    try:
        tree = work / "build"
        configure = [cmake, "-S", str(SOURCE_DIR), "-B", str(tree), f"-DOpenVINO_DIR={cmake_dir}"]
        _run([*configure, "-DCMAKE_BUILD_TYPE=Release"], timeout_s)
        _run([cmake, "--build", str(tree), f"-j{os.cpu_count() or 1}"], timeout_s)
        out = work / "out"
        out.mkdir()
        shutil.copy2(tree / LIBRARY, out / LIBRARY)
        try:
            os.replace(out, target.parent)  # refused where the folder exists and holds something
        except OSError:
            if not target.is_file():  # an incomplete leftover, not another process's (a replica's) library
                shutil.rmtree(target.parent, ignore_errors=True)
                os.replace(out, target.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="build the engine's int8 extension (genmesh::Q41(X8)MatMul, Q4K(X8)MatMul, Q6K(X8)MatMul, "
        "Q80MatMul)"
    )
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="the GGUF cache (--gguf-cache-dir)")
    args = parser.parse_args(argv)
    try:
        path = build(args.cache_dir)
    except BuildError as exc:
        print(f"==> the int8 extension was not built: {exc}; the engine serves with OpenVINO's path", file=sys.stderr)
        return 1
    print(f"==> int8 extension: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
