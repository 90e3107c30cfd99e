"""The ceiling: the same work through ``ContinuousBatchingPipeline`` in a worker process, no HTTP; the
prompts take the chat route's path (chat template, no special tokens), greedy, ``ignore_eos``."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from genmesh.engine.core.gguf_reencode import DEFAULT_CACHE_DIR, DEFAULT_TARGET, exact_ir, prepare
from genmesh.engine.core.ipc import SamplingParams
from genmesh.engine.core.pipeline_config import SCHEDULER_FIELDS as FIELDS
from genmesh.engine.core.pipeline_config import generation_config, pipeline_properties, scheduler_config
from genmesh.engine.models.int8_path import int8_choice
from genmesh.engine.settings import EngineSettings, parse_settings

from .render import say
from .results import Load, Result, StealMeter, make_result


def engine_settings(model: str, flags: Sequence[str] = ()) -> EngineSettings:
    """What ``genmesh-engine --model MODEL FLAGS`` runs with (its own parser: the same defaults)."""
    return parse_settings(["--model", model, *flags])


def scheduler_text(settings: EngineSettings) -> str:
    return ", ".join(f"{name}={getattr(settings, name)}" for name in FIELDS)


_LOADED: dict[str, Any] = {}  # the worker process's pipeline, prompts and load time (see :class:`Pipeline`)


def _greedy(ov_genai: Any, max_tokens: int, look: tuple[int, int]) -> Any:
    """The ``GenerationConfig`` the engine core makes of a greedy ``ignore_eos`` request (its own builder)."""
    params = SamplingParams(max_tokens, 0.0, ignore_eos=True, num_assistant_tokens=look[0], max_ngram_size=look[1])
    return generation_config(ov_genai, params)


def served_file(model: str, q41_op: bool = False) -> str:
    """What the engine's core loads for ``model`` with its defaults: a GGUF's faithful re-encoding (the
    file OpenVINO GenAI reads as the GGUF means it, core/gguf_reencode.py), an IR folder as it is. The
    baseline runs the served model, never the misread one (``q41_op``: the exact form with the int8 op,
    where the engine chose it)."""
    if Path(model).is_dir():
        return model
    served = prepare(model, DEFAULT_CACHE_DIR, True, DEFAULT_TARGET, q41_op)
    return str(served.parent) if exact_ir(served) is not None else str(served)


def _pipeline(ov_genai: Any, model: str, config: Any, properties: dict[str, Any]) -> Any:
    """The pipeline the engine core builds for ``model``: an exact compressed IR folder (gguf_exact.py)
    with its GGUF's tokenizer, or the served file or folder as it is (with the int8 op where
    ``properties`` carry its extension)."""
    served = served_file(model, "extensions" in properties)
    gguf = Path(served) / "model.gguf"
    if Path(served).is_dir() and not Path(model).is_dir() and gguf.exists():
        return ov_genai.ContinuousBatchingPipeline(served, ov_genai.Tokenizer(str(gguf)), config, "CPU", **properties)
    return ov_genai.ContinuousBatchingPipeline(served, config, "CPU", properties)


def _load(model: str, flags: Sequence[str], prompts: list[str], warmup: int, warmup_tokens: int) -> None:
    """Load the pipeline, tokenise ``prompts`` and warm up with the first ``warmup`` (in the worker, once)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    say("in-process: loading the pipeline")
    t0, settings = time.perf_counter(), engine_settings(model, flags)
    config = scheduler_config(ov_genai, settings)  # the engine core's builder
    int8 = int8_choice(settings)  # the engine's path for the Q4_1 matmuls on this CPU
    say(f"in-process: {int8.log_line()}")
    library = str(int8.library) if int8.library is not None else None
    properties = pipeline_properties(settings.device_config, settings.uses_prompt_lookup, library)
    pipe = _pipeline(ov_genai, model, config, properties)
    load_s, tok = time.perf_counter() - t0, pipe.get_tokenizer()
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True) for p in prompts]
    ids = [tok.encode(text, add_special_tokens=False).input_ids.data for text in texts]
    inputs = [ov.Tensor(np.asarray(i, dtype=np.int64).reshape(1, -1)) for i in ids]
    say(f"in-process: loaded in {load_s:.1f}s; warm-up ({warmup} requests)")
    pipe.generate(inputs[:warmup], [_greedy(ov_genai, warmup_tokens, settings.request_lookup)] * len(inputs[:warmup]))
    _LOADED.update(pipe=pipe, inputs=inputs, load_s=load_s, look=settings.request_lookup)


def _measure(label: str, n: int, max_tokens: int, concurrency: int | None, offset: int = 0) -> Result:
    """``n`` prompts from ``offset``: one ``generate()``, or a closed loop of ``concurrency`` in flight."""
    import openvino_genai as ov_genai

    pipe, todo = _LOADED["pipe"], list(_LOADED["inputs"][offset : offset + n])
    gc = _greedy(ov_genai, max_tokens, _LOADED["look"])
    with StealMeter() as meter:
        start = time.perf_counter()
        if concurrency is None:
            tokens = sum(len(r.m_generation_ids[0]) for r in pipe.generate(todo, [gc] * n))
        else:
            tokens, live, ids = 0, list[Any](), iter(range(1 << 30))
            while todo or live:
                while todo and len(live) < concurrency:
                    live.append(pipe.add_request(next(ids), todo.pop(0), gc))
                pipe.step()
                tokens += sum(len(o.generated_ids) for h in live if h.can_read() for o in h.read().values())
                live = [h for h in live if h.get_status() == ov_genai.GenerationStatus.RUNNING]
        wall = time.perf_counter() - start
    settings = {"max_concurrency": concurrency or n, "request_rate": None, "load_s": _LOADED["load_s"]}
    return make_result(label, Load(wall, []), meter, completed=n, output_tokens=tokens, settings=settings)


class Pipeline:
    """The pipeline (the engine's settings with ``flags``) and ``prompts`` in a spawned worker process."""

    def __init__(self, model: str, flags: Sequence[str], prompts: list[str], warmup: int, warmup_tokens: int) -> None:
        spawn, args = multiprocessing.get_context("spawn"), (model, list(flags), prompts, warmup, warmup_tokens)
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=spawn, initializer=_load, initargs=args)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def measure(self, label: str, n: int, max_tokens: int, concurrency: int | None = None, offset: int = 0) -> Result:
        """See :func:`_measure`; logs the throughput."""
        result = self._pool.submit(_measure, label, n, max_tokens, concurrency, offset).result()
        say(f"in-process c={result['max_concurrency']}: {result['output_throughput']:.1f} tok/s")
        return result
