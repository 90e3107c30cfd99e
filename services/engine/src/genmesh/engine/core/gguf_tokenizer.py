"""A GGUF's tokenizer without its weights: the file's header and metadata, and no tensors.

``openvino_genai.Tokenizer(<a .gguf>)`` reads the whole file and dequantises every tensor on the
way, although the tokenizer lives in the metadata alone (``tokenizer.ggml.*``, the chat template):
2.5 GB of memory and 11 s for Qwen2.5-Coder 1.5B (Q4_K_M), and an outright failure for a file with a
type it cannot read (Qwen2.5-Coder 0.5B's Q5_0 tensors: ``gguf_tensor_to_f16 failed``). The same
metadata with zero tensors gives the same tokenizer from 180 MB. The copy is made once per GGUF
into its own folder of the GGUF cache (``tokenizer_source``: the API process and the core share it;
a draft's goes into the draft's folder, where its tokenizer IRs are written), atomically, by copying
the metadata's bytes as they are.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from pathlib import Path

TOKENIZER_GGUF = "tokenizer.gguf"
_HEADER = 24  # magic, version, tensor count, metadata count
_ALIGNMENT = 32  # GGUF's default; the file has no tensor data to align, this only pads the end


# GGUF value types (gguf's GGUFValueType): fixed sizes in bytes; 8 is a string, 9 an array.
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def _skip_value(buf: bytes | memoryview, pos: int, kind: int) -> int:
    if kind == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + int(n)
    if kind == _ARRAY:
        item, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in _SIZES:
            return pos + _SIZES[item] * int(count)
        for _ in range(count):
            pos = _skip_value(buf, pos, item)
        return pos
    return pos + _SIZES[kind]


def _metadata_span(src: Path) -> tuple[int, int, int]:
    """(version, metadata entries, end of metadata) of the GGUF ``src``; the metadata starts right
    after the 24-byte header. Walked by the format's own sizes: ``gguf.GGUFReader`` builds an array
    per token (seconds for a 150k-token vocabulary), where skipping them takes milliseconds."""
    with src.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            magic, version, _, count = struct.unpack_from("<4sIQQ", buf, 0)
            if magic != b"GGUF" or version < 2:
                raise ValueError(f"{src}: not a GGUF (v2 or later) file")
            pos = _HEADER
            for _ in range(count):
                (n,) = struct.unpack_from("<Q", buf, pos)
                (kind,) = struct.unpack_from("<I", buf, pos + 8 + n)
                pos = _skip_value(buf, pos + 12 + n, kind)
        except struct.error as exc:
            raise ValueError(f"{src}: truncated GGUF metadata") from exc
        finally:
            buf.release()
    return int(version), int(count), pos


def write_metadata_only(src: str | Path, dst: str | Path) -> None:
    """Write ``src``'s header and metadata, with no tensors, to ``dst`` (atomically)."""
    src, dst = Path(src), Path(dst)
    version, count, end = _metadata_span(src)
    with src.open("rb") as f:
        f.seek(_HEADER)
        metadata = f.read(end - _HEADER)
    header = b"GGUF" + struct.pack("<IQQ", version, 0, count)
    pad = -(len(header) + len(metadata)) % _ALIGNMENT
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".part", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(header + metadata + b"\0" * pad)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    finally:
        Path(tmp).unlink(missing_ok=True)


def tokenizer_gguf(src: str | Path, folder: str | Path) -> Path:
    """``folder``/tokenizer.gguf: ``src``'s metadata-only copy, made once."""
    dst = Path(folder) / TOKENIZER_GGUF
    if not dst.is_file():
        write_metadata_only(src, dst)
    return dst


def tokenizer_source(model_path: str | Path, cache_dir: str | Path) -> Path:
    """What to build a model's tokenizer from: a GGUF's metadata-only copy in its own folder of the
    GGUF cache (made once), an IR folder as it is."""
    from .gguf_reencode import cache_folder

    path = Path(model_path)
    if path.is_dir() or path.suffix.lower() != ".gguf":
        return path
    src = path.resolve()
    return tokenizer_gguf(src, cache_folder(src, Path(cache_dir).expanduser(), "tokenizer"))
