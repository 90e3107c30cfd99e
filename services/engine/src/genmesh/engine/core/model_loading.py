"""What the engine core loads for a model path, and the scorer that runs the same model.

A GGUF is served from its folder under the GGUF cache (``gguf_reencode.prepare``): its exact
compressed IR (gguf_exact.py, loaded as an IR folder with the GGUF's tokenizer), its faithful
re-encoding, or a link to it. OpenVINO GenAI builds an OpenVINO model from it at every load;
the first load also writes that model (``openvino_model.xml``) into the folder, and the scorer
compiles it from there, so scoring and generation run one and the same graph. An OpenVINO IR
folder is served as it is and scored from its own ``openvino_model.xml``.

One exception: where the int8 ops (``--int8-matmul``, native/selection.py) multiply the exact form for
generation, the scorer compiles the exact form *without* them, OpenVINO's own MatMuls (made once, when
it first compiles). Prompt scoring is many rows at once, where the ops gain least, and a log-likelihood
sums its tokens' errors: with int8 activations each multiple-choice log-likelihood drifts 0.165 nats
from the model file's (make eval's floor is 0.15; docs/accuracy.md), with OpenVINO's path it does not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .gguf_reencode import exact_ir, prepare
from .gguf_tokenizer import tokenizer_source

if TYPE_CHECKING:
    from .config import CoreConfig
    from .scorer import Scorer

log = logging.getLogger("genmesh.engine.core.model_loading")

IR_XML = "openvino_model.xml"


@dataclass(frozen=True)
class ServedModel:
    path: Path  # what ContinuousBatchingPipeline loads
    ir: Path  # the OpenVINO model the pipeline runs (the scorer's too, unless ``int8_ops``)
    save_ir: bool  # the pipeline must write ``ir`` while it loads (first load of a GGUF)
    # The GGUF the tokenizer is built from, when ``path`` is the folder of a GGUF's exact compressed
    # IR (gguf_exact.py): the pipeline loads that IR with this tokenizer (the GGUF's metadata alone,
    # gguf_tokenizer.py).
    tokenizer_gguf: Path | None = None
    int8_ops: bool = False  # ``ir`` is the exact form with the int8 ops: the scorer compiles it without them


def _has_ir(xml: Path) -> bool:
    return xml.is_file() and xml.with_suffix(".bin").is_file()


def prepare_model(config: CoreConfig) -> ServedModel:
    path = Path(config.model_path)
    if path.is_dir():
        return ServedModel(path, path / IR_XML, False)
    q41_op = config.int8_extension is not None  # the exact IR with genmesh::Q41MatMul (its own folder)
    served = prepare(path, config.gguf_cache_dir, config.gguf_reencode, config.gguf_reencode_type, q41_op)
    exact = exact_ir(served)
    if exact is not None:
        tokenizer = tokenizer_source(served.resolve(), config.gguf_cache_dir)  # the API process's copy too
        return ServedModel(served.parent, exact, False, tokenizer_gguf=tokenizer, int8_ops=q41_op)
    ir = served.parent / IR_XML
    return ServedModel(served, ir, config.max_num_scoring_seqs > 0 and not _has_ir(ir))


def openvino_path_ir(config: CoreConfig) -> Path:
    """The exact form of ``config.model_path`` with OpenVINO's own MatMuls (no int8 op), made once."""
    plain = prepare(config.model_path, config.gguf_cache_dir, config.gguf_reencode, config.gguf_reencode_type, False)
    ir = exact_ir(plain)
    if ir is None:
        raise RuntimeError(f"{config.model_path} has no exact form without the int8 ops")
    return ir


def start_scorer(ov: Any, np: Any, config: CoreConfig, served: ServedModel) -> Scorer | None:
    """The scorer, compiled like the pipeline's model (same device and plugin configuration); where the
    pipeline runs the int8 ops, on the same exact form with OpenVINO's MatMuls instead."""
    from .scorer import load_scorer

    if config.max_num_scoring_seqs <= 0:
        log.info("scoring is off (--max-num-scoring-seqs 0)")
        return None
    if not _has_ir(served.ir):
        log.warning("no OpenVINO model at %s: prompt logprobs and top_logprobs are off", served.ir)
        return None
    if served.int8_ops:
        ir, extension, what = (lambda: openvino_path_ir(config)), None, "the exact form with OpenVINO's MatMuls"
    else:
        ir, extension, what = (lambda: served.ir), config.int8_extension, str(served.ir)
    scorer = load_scorer(
        ov,
        np,
        ir,
        config.device,
        config.plugin_config,
        config.max_num_scoring_seqs,
        config.scoring_chunk_tokens,
        extension,
    )
    log.info("scorer set up (%s, compiled on first use; %d sessions)", what, config.max_num_scoring_seqs)
    return scorer
