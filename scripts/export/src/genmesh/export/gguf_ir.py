"""A GGUF file as an OpenVINO IR folder (fp16 weights), built by OpenVINO GenAI, torch-free.

OpenVINO GenAI builds an OpenVINO model from a GGUF when it loads one, and writes it (and the
tokenizer and detokenizer it builds from the GGUF's vocabulary, with the chat template in their
``rt_info``) beside the file when asked to (``enable_save_ov_model``). It misreads Q4_1 and
K-quants, so the model is built from the engine's faithful F16 re-encoding of the file
(``genmesh.engine.core.gguf_reencode``), the very IR the engine serves for that GGUF. Everything is
kept in the engine's GGUF cache folder, so a second export (or an engine that already served
the GGUF) does not build it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genmesh.engine.core.gguf_reencode import exact_ir, prepare
from genmesh.engine.models.source import IR_MODEL_FILE, IR_TOKENIZER_FILES, resolve

from .steps import ExportError, Steps

SAVE_IR = {"enable_save_ov_model": True}


def _complete(folder: Path, names: tuple[str, ...]) -> bool:
    return all((folder / n).is_file() and (folder / n).with_suffix(".bin").is_file() for n in names)


def ir_from_gguf(src: Path, cache_dir: Path, steps: Steps, exact: bool = False) -> Path:
    """The cache folder holding ``src``'s fp16 IR (``exact``: its exact compressed IR, the one the
    engine serves) and its tokenizer IRs (built once)."""
    import openvino_genai as ov_genai

    steps.say(f"preparing the {'exact compressed form' if exact else 'faithful copy'} of {src} (once per file)")
    served = prepare(src, cache_dir, True, "exact" if exact else "F16")
    if exact and exact_ir(served) is None:
        raise ExportError(
            f"{src}: --weight-format exact covers GGUFs whose misread weights are Q4_1, Q4_K, Q6_K or Q5_0 "
            "(see the log above); use fp16, int8 or int4"
        )
    folder = served.parent
    if not _complete(folder, (IR_MODEL_FILE,)):
        steps.say(f"building the OpenVINO model from {served} (OpenVINO GenAI)")
        scheduler = ov_genai.SchedulerConfig()
        scheduler.num_kv_blocks = 16  # the pipeline is only built to write its model
        pipe = ov_genai.ContinuousBatchingPipeline(str(served), scheduler, "CPU", SAVE_IR)
        del pipe
    if not _complete(folder, IR_TOKENIZER_FILES):
        steps.say("building the tokenizer and detokenizer IRs from the GGUF's vocabulary")
        ov_genai.Tokenizer(str(served), SAVE_IR)
    if not _complete(folder, (IR_MODEL_FILE, *IR_TOKENIZER_FILES)):
        raise RuntimeError(f"OpenVINO GenAI did not write the IR files into {folder}")
    steps.say(f"{'exact compressed' if exact else 'fp16'} IR ready in {folder}")
    return folder


def write_metadata(src: Path, tokenizer_folder: Path, target: Path) -> None:
    """What the IR folder needs beside the IRs: ``config.json`` (the context length the engine
    reads) and ``tokenizer_config.json`` (chat template and special tokens, where OVMS and
    transformers look for them)."""
    import openvino_genai as ov_genai

    tok = ov_genai.Tokenizer(str(tokenizer_folder))
    special: dict[str, Any] = {}
    for name, token_id in (("bos", tok.get_bos_token_id()), ("eos", tok.get_eos_token_id())):
        if int(token_id) >= 0:
            special[f"{name}_token_id"] = int(token_id)
            special[f"{name}_token"] = str(tok.decode([int(token_id)], skip_special_tokens=False))
    source = resolve(str(src))
    config = {"max_position_embeddings": source.context_length, "source_gguf": src.name}
    config.update({k: v for k, v in special.items() if k.endswith("_id")})
    tokenizer_config = {k: v for k, v in special.items() if not k.endswith("_id")}
    tokenizer_config["chat_template"] = str(tok.chat_template)
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
