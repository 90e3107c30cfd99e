"""GGUF tensor types OpenVINO GenAI reads as the file means them, and a re-encoding of the others.

OpenVINO GenAI 2026.4 builds its model from a GGUF with weights of the form
``(q - zero_point) * scale``, the zero point an integer (``gguf_utils/building_blocks.cpp``,
``make_int4_weights``: ``round(-bias / scale)`` packed into 4 bits). A type whose blocks carry a
float minimum (Q4_1, Q4_K: ``scale * q + min``) loses the fractional part of ``-min / scale``:
every block is shifted by up to half a quantisation step, and blocks whose ``-min / scale`` falls
outside 0..15 wrap around. Measured on SmolLM2-135M-Instruct Q4_1 (docs/accuracy.md): 0.27 nats
median error per generated token against the GGUF's own weights with f32 arithmetic, 74 %
top-token agreement; a copy of the file whose every block minimum was moved to that integer zero
point gives bit-identical output.

Q8_0 (zero point 128), Q4_0 (8) and F16 are read exactly (measured: 1e-4 nats against their own
fp32 reference); F32, BF16, Q5_0 and Q5_1 weight matrices are refused ("Unsupported quantization
type"). ``reencode`` rewrites a file that holds any other type, from the ``gguf``
package's bit-exact dequantisation, in numpy: as F16 (the default: every weight the GGUF's value
rounded to half precision; OpenVINO then also keeps the KV cache in f16), or as Q8_0 for the
misread tensors only (half the size, but a requantisation: 0.015 nats median with f32
arithmetic). ``prepare`` does that once per source file and keeps the result in a cache folder.

The default target, ``exact``, serves a file whose misread matrices are all Q4_1, Q4_K, Q6_K or
Q5_0 as the exact compressed OpenVINO model of gguf_exact.py instead (the file's own values,
scales and minimums: nothing re-encoded); any other file falls back to ``F16``, with one log line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from .gguf_copy import TensorPlan, write_copy

log = logging.getLogger("genmesh.engine.core.gguf_reencode")

# Bump when the re-encoding changes: cached files of an older version are not reused.
ENCODER_VERSION = 2
DEFAULT_CACHE_DIR = "~/.cache/genmesh"
Target = Literal["exact", "F16", "Q8_0"]
DEFAULT_TARGET: Target = "exact"
# Weight matrices OpenVINO GenAI reads exactly; every other type is misread (Q4_1, Q4_K) or refused
# ("Unsupported quantization type": F32, BF16, Q5_0, Q5_1, ...), and served from a re-encoding.
FAITHFUL_TYPES = frozenset({"F16", "Q8_0", "Q4_0"})


def _types() -> Any:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType


def misread(reader: Any) -> list[tuple[str, str]]:
    """(name, type) of every weight matrix OpenVINO GenAI would not read as written."""
    t = _types()
    out = []
    for tensor in reader.tensors:
        kind = t(tensor.tensor_type).name
        if len(tensor.shape) >= 2 and kind not in FAITHFUL_TYPES:
            out.append((tensor.name, kind))
    return out


def plan(reader: Any, target: Target = "F16") -> list[TensorPlan]:
    """What ``reencode`` does to each tensor of a file (nothing when none is misread)."""
    t = _types()
    bad = {name for name, _ in misread(reader)}
    out: list[TensorPlan] = []
    for tensor in reader.tensors:
        src = t(tensor.tensor_type).name
        if not bad or len(tensor.shape) < 2 or src == "F16":
            dst = src
        elif target != "Q8_0":
            dst = "F16"  # every quantised matrix: one uniform half-precision file
        elif tensor.name in bad:
            dst = "Q8_0" if int(tensor.shape[0]) % 32 == 0 else "F16"  # GGUF shapes list the row length first
        else:
            dst = src
        out.append(TensorPlan(tensor.name, src, dst))
    return out


def unfaithful(path: str | Path) -> list[tuple[str, str]]:
    """The weight matrices of ``path`` that OpenVINO would misread (empty: serve it as it is)."""
    from gguf import GGUFReader

    return misread(GGUFReader(str(path)))


def reencode(src: str | Path, dst: str | Path, target: Target = "F16") -> list[TensorPlan]:
    """Write ``dst``: ``src`` with its tensors re-encoded as ``plan`` says (metadata kept)."""
    import numpy as np
    from gguf import GGUFReader, quants

    t = _types()
    reader = GGUFReader(str(src))
    plans = plan(reader, target)

    def encode(tensor: Any, p: TensorPlan) -> Any:
        values = quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        return quants.quantize(values, t[p.target_type])

    write_copy(reader, dst, plans, encode)
    return plans


def cache_folder(src: Path, cache_dir: Path, target: str) -> Path:
    """Where the served copy of ``src`` lives: one folder per source file (its path, size and
    modification time), target type (or "as-is") and encoder version, so a changed file is
    prepared anew."""
    st = src.stat()
    key = f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}|{target}|v{ENCODER_VERSION}"
    return cache_dir / f"{src.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


SERVED_NAME = "model.gguf"
EXACT_KEY = "exact-v4"  # the exact form's cache key: bumped with gguf_exact.VERSION
# the exact form with genmesh::Q41MatMul (Q41X8MatMul), Q41SwiGLU, Q4KX8MatMul, Q6KX8MatMul and Q80MatMul (needs the
# int8 extension to load; -q41op: Q4_1 only; -q41kop: without Q8_0; -q41kq80op: one Q41MatMul per matrix, before q/k/v
# and gate/up were grouped into one op each: gguf_op_groups.py; -grouped: Q4_K as Q4KMatMul over the file's layout,
# before Q4KX8MatMul over the blocks interleaved eight rows at a time; -q4kx8: Q6_K as Q6KMatMul over the file's
# layout, before Q6KX8MatMul; gguf_exact.SWIGLU, off, would add -swiglu: a gated MLP's Q4_1 gate/up, SiLU and product
# as one Q41SwiGLU, gguf_op_swiglu.py; -q6kx8: Q4_1 as Q41MatMul over the file's layout, before Q41X8MatMul over the
# blocks interleaved eight rows at a time, gguf_op_x8.py; -q41x8: the output head over every prompt token, before the
# gather of the sampled rows in front of it, gguf_op_head.py)
EXACT_OP_KEY = f"{EXACT_KEY}-q41kq80op-grouped-q4kx8-q6kx8-q41x8-sampled"


def exact_ir(served: Path) -> Path | None:
    """The exact compressed IR ``prepare`` made beside ``served`` (None: serve ``served`` itself)."""
    from .gguf_exact import IR_XML, MARKER

    folder = served.parent
    if (folder / MARKER).is_file() and (folder / IR_XML).is_file() and (folder / IR_XML).with_suffix(".bin").is_file():
        return folder / IR_XML
    return None


def _prepare_exact(src: Path, cache_dir: Path, todo: list[tuple[str, str]], q41_op: bool = False) -> Path | None:
    """``src``'s exact folder (made once), or None when its types are not covered (then: F16)."""
    from .gguf_exact import COPIED_TYPES, EXACT_TYPES, GGUF_LINK, NotExact, build

    served = cache_folder(src, cache_dir, EXACT_OP_KEY if q41_op else EXACT_KEY) / GGUF_LINK
    if exact_ir(served) is not None:
        return served
    other = sorted({kind for _, kind in todo} - EXACT_TYPES - COPIED_TYPES)
    if other:
        log.warning(
            "%s: tensors of type %s are not covered by the exact compressed form; serving the F16 re-encoding",
            src,
            "/".join(other),
        )
        return None
    log.warning(
        "%s: %d tensors of type %s would be misread or refused by OpenVINO GenAI; writing the exact "
        "compressed model (the file's own values, scales and minimums) into %s (once)",
        src,
        len(todo),
        "/".join(sorted({kind for _, kind in todo})),
        served.parent,
    )
    try:
        build(src, served.parent, q41_op)
    except NotExact as exc:
        log.warning("%s: the exact compressed form failed (%s); serving the F16 re-encoding", src, exc)
        return None
    return served


def prepare(
    src: str | Path,
    cache_dir: str | Path,
    reencode_unfaithful: bool = True,
    target: Target = DEFAULT_TARGET,
    q41_op: bool = False,
) -> Path:
    """The GGUF to serve for ``src``, in a folder of its own under ``cache_dir`` (OpenVINO GenAI
    writes the IR it builds beside it): ``src``'s faithful re-encoding, made once and written
    atomically, or a link to ``src`` when OpenVINO reads it as it is (or re-encoding is off).
    With ``target`` "exact" and a file of covered types: a link to ``src`` in the folder of its
    exact compressed IR (``exact_ir`` finds it); ``q41_op``: the exact IR whose Q4_1 MatMuls are
    ``genmesh::Q41MatMul`` (gguf_exact.py; its own folder)."""
    src = Path(src).resolve()
    cache = Path(cache_dir).expanduser()
    todo: list[tuple[str, str]] | None = None
    if target == "exact" and reencode_unfaithful:
        exact_served = cache_folder(src, cache, EXACT_OP_KEY if q41_op else EXACT_KEY) / SERVED_NAME
        if exact_ir(exact_served) is not None:
            return exact_served
        as_read = cache_folder(src, cache, "F16") / SERVED_NAME
        if as_read.is_symlink():  # a file OpenVINO GenAI reads as it is (found so at an earlier load)
            return as_read
        todo = unfaithful(src)
        exact = _prepare_exact(src, cache, todo, q41_op) if todo else None
        if exact is not None:
            return exact
    if target == "exact":
        target = "F16"
    folder = cache_folder(src, cache, target if reencode_unfaithful else "as-is")
    served = folder / SERVED_NAME
    if served.exists():
        return served
    folder.mkdir(parents=True, exist_ok=True)
    if todo is None:
        todo = unfaithful(src)
    if todo and not reencode_unfaithful:
        kinds = "/".join(sorted({kind for _, kind in todo}))
        log.warning(
            "%s: %d tensors of type %s are misread (an integer zero point) or refused by OpenVINO GenAI "
            "(re-encoding is off: the served model is not the GGUF's, or does not load)",
            src,
            len(todo),
            kinds,
        )
    if not todo or not reencode_unfaithful:
        tmp = folder / f".{SERVED_NAME}.{os.getpid()}.link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(src)
        os.replace(tmp, served)
        return served
    kinds = "/".join(sorted({kind for _, kind in todo}))
    log.warning(
        "%s: %d tensors of type %s would be misread (an integer zero point) or refused by OpenVINO GenAI; "
        "re-encoding the file as %s into %s (once)",
        src,
        len(todo),
        kinds,
        target,
        served,
    )
    fd, tmp_name = tempfile.mkstemp(prefix=f".{SERVED_NAME}.", suffix=".part", dir=folder)
    os.close(fd)
    try:
        reencode(src, tmp_name, target)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, served)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return served
