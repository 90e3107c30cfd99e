"""The draft model of speculative decoding, as the pipeline's ``draft_model(...)`` property.

OpenVINO GenAI's ``draft_model()`` wants an IR folder (the model and its tokenizer IRs), not a GGUF.
A GGUF draft is therefore served from its folder under the GGUF cache, like the main model
(``gguf_reencode.prepare``: its faithful re-encoding, or a link to it), where OpenVINO GenAI writes
the model it builds (``enable_save_ov_model``, one throwaway pipeline) and the tokenizer and
detokenizer it builds from the GGUF's vocabulary, once; later loads use that folder as it is. An IR
folder is used as it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .gguf_reencode import DEFAULT_TARGET, Target, prepare
from .gguf_tokenizer import tokenizer_gguf

log = logging.getLogger("genmesh.engine.core.draft_model")

IR_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
SAVE_IR = {"enable_save_ov_model": True}


def _complete(folder: Path, names: tuple[str, ...]) -> bool:
    return all((folder / n).is_file() and (folder / n).with_suffix(".bin").is_file() for n in names)


def draft_folder(
    ov_genai: Any, path: str, cache_dir: str, reencode: bool = True, target: Target = DEFAULT_TARGET
) -> Path:
    """The IR folder of the draft at ``path`` (built once from a GGUF into its cache folder)."""
    src = Path(path).expanduser()
    if src.is_dir():
        if not _complete(src, IR_FILES):
            raise ValueError(f"draft model folder {str(src)!r} lacks one of {', '.join(IR_FILES)}")
        return src
    served = prepare(src, cache_dir, reencode, target)
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


def draft_property(ov_genai: Any, folder: Path, device: str, plugin_config: dict[str, Any]) -> Any:
    """The pipeline property that adds the draft (on the main model's device, with its plugin config)."""
    return ov_genai.draft_model(str(folder), device, **plugin_config)
