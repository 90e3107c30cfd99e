"""Weight compression of an OpenVINO model with NNCF (data-free), as ``optimum-cli`` does it.

int8: every weight matrix INT8_ASYM per output channel. int4: INT4_ASYM in groups of 128
(halved where a row is not a multiple of 128: 64 for SmolLM2's 576-wide rows), the embedding
and the last layer kept INT8_ASYM (NNCF's backup mode). fp16: the weights as they are. exact (a
Q4_1/Q4_K/Q6_K/Q5_0 GGUF): the engine's exact compressed form (genmesh.engine.core.gguf_exact), no NNCF.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from genmesh.engine.models.source import IR_MODEL_FILE

from .steps import Steps

WeightFormat = Literal["fp16", "int8", "int4", "exact"]
WEIGHT_FORMATS: tuple[WeightFormat, ...] = ("fp16", "int8", "int4", "exact")
INT4_GROUP_SIZE = 128
# Bump when the compression changes: cached compressed models of an older version are not reused.
COMPRESSION_VERSION = 1


def compressed(src_folder: Path, weight_format: WeightFormat, steps: Steps) -> Path:
    """``src_folder``'s model compressed to ``weight_format``, cached in a sub-folder of it."""
    if weight_format in ("fp16", "exact"):  # exact: the GGUF's own weights, written by the engine's converter
        return src_folder
    import openvino as ov

    # One folder per format, compression version and OpenVINO release (whose GenAI built the fp16 IR).
    out = src_folder / f"{weight_format}-v{COMPRESSION_VERSION}-ov{ov.__version__.split('-')[0]}"
    if (out / IR_MODEL_FILE).is_file():
        steps.say(f"{weight_format} weights already compressed in {out}")
        return out
    import nncf

    model = ov.Core().read_model(str(src_folder / IR_MODEL_FILE))
    steps.say(f"compressing the weights to {weight_format} (NNCF, data-free)")
    if weight_format == "int8":
        model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    else:
        adjust = nncf.AdvancedCompressionParameters(group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST)
        model = nncf.compress_weights(
            model,
            mode=nncf.CompressWeightsMode.INT4_ASYM,
            group_size=INT4_GROUP_SIZE,
            ratio=1.0,
            advanced_parameters=adjust,
        )
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ov.save_model(model, str(tmp / IR_MODEL_FILE), compress_to_fp16=False)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    steps.say(f"{weight_format} model written to {out}")
    return out
