"""The ceiling: the same work through ``ContinuousBatchingPipeline.generate()`` in one process.

:class:`Ceiling` keeps the pipeline loaded in a spawned worker process and times one
``generate()`` of the whole workload each time it is asked.

The prompts go through the same path as the server's chat route: the model's chat template
with ``add_generation_prompt=True``, then tokenised without special tokens, and the token
ids are handed to ``generate()``.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from .progress import say
from .steal import StealMeter
from .workload import Scheduler, Workload


@dataclass(frozen=True)
class InProcessResult:
    load_s: float
    wall_s: float
    completion_tokens: int
    steal_percent: float | None
    busy_percent: float | None
    other_percent: float | None

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0


def _prompt_tensors(ov: Any, np: Any, tokenizer: Any, prompts: tuple[str, ...]) -> list[Any]:
    tensors = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False).input_ids.data
        tensors.append(ov.Tensor(np.asarray(ids, dtype=np.int64).reshape(1, -1)))
    return tensors


@dataclass
class _Loaded:
    pipe: Any
    inputs: list[Any]
    configs: list[Any]
    load_s: float


_LOADED: _Loaded | None = None  # the worker process's pipeline (see :class:`Ceiling`)


def _load(model: str, scheduler: Scheduler, workload: Workload) -> None:
    """Load the pipeline and warm it up (in the worker process, once)."""
    global _LOADED
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    say("in-process: loading the pipeline")
    t0 = time.perf_counter()
    pipe = ov_genai.ContinuousBatchingPipeline(model, scheduler.to_openvino(ov_genai), "CPU", scheduler.plugin_config)
    load_s = time.perf_counter() - t0
    tokenizer = pipe.get_tokenizer()
    say(f"in-process: loaded in {load_s:.1f}s; warm-up ({len(workload.warmup_prompts)} requests)")
    warm = _prompt_tensors(ov, np, tokenizer, workload.warmup_prompts)
    pipe.generate(warm, [workload.generation_config(ov_genai, workload.warmup_max_tokens)] * len(warm))
    inputs = _prompt_tensors(ov, np, tokenizer, workload.prompts)
    configs = [workload.generation_config(ov_genai, workload.max_tokens)] * len(inputs)
    _LOADED = _Loaded(pipe, inputs, configs, load_s)


def _generate_once() -> InProcessResult:
    """Time one ``generate()`` of the whole workload on the loaded pipeline."""
    assert _LOADED is not None, "pipeline not loaded in this process"
    say(f"in-process: measuring {len(_LOADED.inputs)} requests")
    with StealMeter() as meter:
        start = time.perf_counter()
        results = _LOADED.pipe.generate(_LOADED.inputs, _LOADED.configs)
        wall = time.perf_counter() - start
    tokens = sum(len(r.m_generation_ids[0]) for r in results)
    return InProcessResult(_LOADED.load_s, wall, tokens, meter.steal_percent, meter.busy_percent, meter.other_percent)


class Ceiling:
    """The pipeline loaded once in a spawned worker process, measured as often as asked.

    Between measurements the worker sits idle (no CPU), so it can stay loaded while the HTTP
    side is measured; pairs then cost no reloads, and the two sides can alternate closely.
    Use it as a context manager: the worker exits, pipeline and threads with it, on the way out.
    """

    def __init__(self, model: str, scheduler: Scheduler, workload: Workload) -> None:
        self._pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_load,
            initargs=(model, scheduler, workload),
        )

    def __enter__(self) -> Ceiling:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def measure(self) -> InProcessResult:
        return self._pool.submit(_generate_once).result()


@dataclass(frozen=True)
class WaveResult:
    """One load level of the in-process ceiling: ``concurrency`` requests per ``generate()`` call."""

    concurrency: int
    requests: int
    wall_s: float
    completion_tokens: int
    steal_percent: float | None
    busy_percent: float | None
    other_percent: float | None


def measure_waves(
    model: str,
    scheduler: Scheduler,
    messages: list[list[dict[str, str]]],
    max_tokens: int,
    levels: list[tuple[int, int]],
) -> tuple[float, list[WaveResult]]:
    """For each ``(concurrency, n)`` in ``levels``: the first ``n`` chat ``messages`` as a closed
    loop of ``concurrency`` requests in flight, driven with ``add_request``/``step`` as the
    engine's core drives it (a new request joins as soon as one ends, so the batch stays full,
    unlike waves of ``generate()``). Returns (load seconds, results)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    t0 = time.perf_counter()
    pipe = ov_genai.ContinuousBatchingPipeline(model, scheduler.to_openvino(ov_genai), "CPU", scheduler.plugin_config)
    load_s = time.perf_counter() - t0
    tokenizer = pipe.get_tokenizer()
    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.ignore_eos, gc.do_sample = max_tokens, True, False
    warm_gc = ov_genai.GenerationConfig()
    warm_gc.max_new_tokens, warm_gc.ignore_eos, warm_gc.do_sample = 8, True, False

    def tensor(history: list[dict[str, str]]) -> Any:
        text = tokenizer.apply_chat_template(history, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False).input_ids.data
        return ov.Tensor(np.asarray(ids, dtype=np.int64).reshape(1, -1))

    inputs = [tensor(m) for m in messages]
    pipe.generate(inputs[:2], [warm_gc] * len(inputs[:2]))
    ids = iter(range(1 << 30))
    running = ov_genai.GenerationStatus.RUNNING

    def closed_loop(todo: list[Any], concurrency: int) -> int:
        tokens = 0
        live: list[Any] = []
        todo = list(todo)
        while todo or live:
            while todo and len(live) < concurrency:
                live.append(pipe.add_request(next(ids), todo.pop(0), gc))
            pipe.step()
            still: list[Any] = []
            for handle in live:
                if handle.can_read():
                    tokens += sum(len(o.generated_ids) for o in handle.read().values())
                if handle.get_status() == running:
                    still.append(handle)
            live = still
        return tokens

    out: list[WaveResult] = []
    for concurrency, n in levels:
        with StealMeter() as meter:
            start = time.perf_counter()
            tokens = closed_loop(inputs[:n], concurrency)
            wall = time.perf_counter() - start
        out.append(
            WaveResult(concurrency, n, wall, tokens, meter.steal_percent, meter.busy_percent, meter.other_percent)
        )
        say(f"in-process c={concurrency}: {tokens / wall:.1f} tok/s")
    return load_s, out


T = TypeVar("T")


def _in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned process that exits when it is done (its pipeline and threads with it)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def measure_waves_in_subprocess(
    model: str,
    scheduler: Scheduler,
    messages: list[list[dict[str, str]]],
    max_tokens: int,
    levels: list[tuple[int, int]],
) -> tuple[float, list[WaveResult]]:
    """:func:`measure_waves` in a fresh process that exits when it is done."""
    return _in_fresh_process(measure_waves, model, scheduler, messages, max_tokens, levels)
