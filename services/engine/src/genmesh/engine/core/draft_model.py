"""The draft model of speculative decoding, as the pipeline's ``draft_model(...)`` property.

OpenVINO GenAI's ``draft_model()`` wants an IR folder (the model and its tokenizer IRs), not a GGUF.
A GGUF draft is therefore served from its folder under the GGUF cache, like the main model
(``gguf_reencode.prepare``: its faithful re-encoding, or a link to it), where OpenVINO GenAI writes
the model it builds (``enable_save_ov_model``, one throwaway pipeline) and the tokenizer and
detokenizer it builds from the GGUF's vocabulary, once; later loads use that folder as it is. An IR
folder is used as it is.

Where the main model runs the int8 ops (``--int8-matmul``, native/selection.py), a GGUF draft runs them too:
its exact IR with the ops (``prepare(..., q41_op=True)``). ``draft_model()`` reads that IR into OpenVINO
GenAI's own ``ov::Core`` when the property is made, before the pipeline adds its ``extensions``, and ignores
an ``extensions`` key of its own; so ``register_extension`` adds the library to that core first, and a draft
whose IR still cannot be read with it falls back to OpenVINO's path (``draft_property``).

``--draft-quantization Q4_1`` serves a GGUF draft from a copy whose weight matrices are re-quantised to Q4_1
(``requantised``; made once in the cache). A draft only proposes tokens: the served model checks each one, so
greedy replies stay the served model's; what the copy changes is how many drafts are accepted, and what a draft
token costs. With the int8 ops a token is bound by the bytes it reads, and the 0.5B's own Q5_0/Q8_0 form reads half
as many as the 1.5B's Q4_K_M: the draft then costs more than it saves (docs/int8-avx2.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import CoreConfig
from .gguf_copy import requantised_copy
from .gguf_exact import MARKER
from .gguf_reencode import DEFAULT_TARGET, Target, cache_folder, prepare
from .gguf_tokenizer import tokenizer_gguf

log = logging.getLogger("genmesh.engine.core.draft_model")

IR_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
SAVE_IR = {"enable_save_ov_model": True}


def _complete(folder: Path, names: tuple[str, ...]) -> bool:
    return all((folder / n).is_file() and (folder / n).with_suffix(".bin").is_file() for n in names)


def requantised(src: Path, cache_dir: str, quantization: str) -> Path:
    """``src`` with its weight matrices re-quantised to ``quantization`` (gguf_copy.requantised_copy), written
    once, atomically, into its own folder under ``cache_dir``."""
    folder = cache_folder(src.resolve(), Path(cache_dir).expanduser(), f"draft-{quantization}")
    copy = folder / f"{src.stem}.{quantization}.gguf"
    if not copy.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        log.info("re-quantising the draft model %s to %s into %s (once)", src, quantization, copy)
        tmp = folder / f".{copy.name}.{os.getpid()}.tmp"
        n = requantised_copy(src, tmp, quantization)
        os.replace(tmp, copy)
        log.info("the draft's copy has %d matrices re-quantised to %s", n, quantization)
    return copy


def draft_folder(
    ov_genai: Any,
    path: str,
    cache_dir: str,
    reencode: bool = True,
    target: Target = DEFAULT_TARGET,
    q41_op: bool = False,
    quantization: str | None = None,
) -> Path:
    """The IR folder of the draft at ``path`` (built once from a GGUF into its cache folder; ``q41_op``: the
    exact IR with the int8 ops, as the main model's; ``quantization``: from a GGUF's copy re-quantised to it)."""
    src = Path(path).expanduser()
    if src.is_dir():
        if not _complete(src, IR_FILES):
            raise ValueError(f"draft model folder {str(src)!r} lacks one of {', '.join(IR_FILES)}")
        return src
    if quantization is not None:
        src = requantised(src, cache_dir, quantization)
    served = prepare(src, cache_dir, reencode, target, q41_op)
    folder = served.parent
    if not _complete(folder, IR_FILES[:1]):
        log.info("building the draft model's IR from %s (once)", served)
        scheduler = ov_genai.SchedulerConfig()
        scheduler.num_kv_blocks = 16  # built only to write its model
        pipe = ov_genai.ContinuousBatchingPipeline(str(served), scheduler, "CPU", SAVE_IR)
        del pipe
    if not _complete(folder, IR_FILES[1:]):
        log.info("building the draft model's tokenizer IRs from %s (once)", served)
        ov_genai.Tokenizer(str(tokenizer_gguf(served.resolve(), folder)), SAVE_IR)  # beside it: folder
    if not _complete(folder, IR_FILES):
        raise RuntimeError(f"OpenVINO GenAI did not write the draft model's IR files into {folder}")
    return folder


def int8_ops(folder: Path) -> int:
    """How many int8 ops (genmesh::Q41MatMul, ...) the exact IR in ``folder`` has (0: none, or not an exact IR)."""
    marker = folder / MARKER
    if not marker.is_file():
        return 0
    written = json.loads(marker.read_text())
    return sum(int(v) for k, v in written.items() if k.endswith("_matmul_ops"))


def register_extension(ov_genai: Any, library: str) -> None:
    """Adds ``library`` to OpenVINO GenAI's own ``ov::Core``, so that ``draft_model()`` can read an IR with its
    ops. OpenVINO GenAI 2026.4 exposes that core only through the pipelines' ``extensions`` property, which
    it applies before it looks for the model: a pipeline asked for a folder with no model adds the library,
    then raises. (Checked by tests/engine/server/test_int8_matmul.py; ``draft_property`` falls back should it
    stop working.)"""
    with tempfile.TemporaryDirectory(prefix="genmesh-ext-") as empty, contextlib.suppress(RuntimeError):
        ov_genai.ContinuousBatchingPipeline(empty, ov_genai.SchedulerConfig(), "CPU", {"extensions": [library]})


def draft_property(
    ov_genai: Any,
    folder: Path,
    device: str,
    plugin_config: dict[str, Any],
    fallback: Callable[[], Path] | None = None,
) -> tuple[Any, Path]:
    """The pipeline property that adds the draft (on the main model's device, with its plugin config), and
    the folder it came from: ``fallback`` (the draft on OpenVINO's path) where ``folder``'s IR has ops that
    OpenVINO GenAI's core cannot create."""
    try:
        return ov_genai.draft_model(str(folder), device, **plugin_config), folder
    except RuntimeError as exc:
        if fallback is None or "unsupported opset" not in str(exc):
            raise
        log.warning("the draft's int8 ops could not be read (%s); the draft runs OpenVINO's path", str(exc)[-200:])
        folder = fallback()
        return ov_genai.draft_model(str(folder), device, **plugin_config), folder


def pipeline_draft(ov_genai: Any, config: CoreConfig) -> Any:
    """The ``draft_model`` property for ``config.draft_model``: with the int8 ops where the main model has them."""
    assert config.draft_model is not None
    args = (ov_genai, config.draft_model, config.gguf_cache_dir, config.gguf_reencode, config.gguf_reencode_type)
    quantization = config.draft_quantization
    # the ops where the main model has them and the draft is a GGUF (an IR folder is used as it is)
    library = None if Path(config.draft_model).expanduser().is_dir() else config.int8_extension
    ops = library is not None
    if library is not None:
        register_extension(ov_genai, library)
    folder = draft_folder(*args, q41_op=ops, quantization=quantization)
    draft, used = draft_property(
        ov_genai,
        folder,
        config.device,
        config.plugin_config,
        (lambda: draft_folder(*args, quantization=quantization)) if ops else None,
    )
    n = int8_ops(used)
    log.info(
        "speculative decoding with the draft model %s (%s%s)",
        used,
        f"{n} int8 ops" if n else "OpenVINO's path",
        f"; weights re-quantised to {quantization}" if quantization else "",
    )
    return draft
