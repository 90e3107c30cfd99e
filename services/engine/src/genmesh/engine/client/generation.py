"""One request's generation as an async stream of text deltas, ending in a ``Finished`` event.

Events: ``str`` (new text; the hot path), ``Delta`` (new text with its tokens' logprobs, when
asked for), ``Beams`` (beam search: every returned sequence at once), then ``Finished``.
The output processor (``output_processor.py``) has already detokenised, applied stop strings
and counted tokens; a failed request's typed error becomes an OpenAI error here. Closing the
stream early (client gone) aborts the request in the engine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from genmesh.protocol import OpenAIError, internal_error, invalid_request, service_unavailable

from ..core.ipc import RequestError, SamplingParams, ScoredToken
from ..metrics import EngineMetrics
from . import request_trace
from .core_client import EngineDeadError
from .output_processor import BeamResult, RequestHandle, TextOptions
from .request_trace import RequestTrace
from .supervisor import CoreSupervisor, EngineRestarting


@dataclass(frozen=True)
class Delta:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    scored: list[ScoredToken] | None = None  # top-k per token, when asked for (scoring.with_top)


@dataclass(frozen=True)
class Beams:
    results: list[BeamResult]


@dataclass(frozen=True)
class Finished:
    reason: str
    prompt_tokens: int
    completion_tokens: int


Event = str | Delta | Beams | Finished


@dataclass(frozen=True)
class Generation:
    """One engine request (one choice of a reply): its id and its event stream."""

    request_id: int
    events: AsyncIterator[Event]


@dataclass
class Collected:
    """A whole generation: its text, token logprobs (when asked for) and finish event."""

    text: str
    finished: Finished
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    beams: list[BeamResult] | None = None
    scored: list[ScoredToken] = field(default_factory=list)


async def collect(events: AsyncIterator[Event]) -> Collected:
    """Drain a generation into one result."""
    parts: list[str] = []
    ids: list[int] = []
    lps: list[float] = []
    beams: list[BeamResult] | None = None
    scored: list[ScoredToken] = []
    async for ev in events:
        if isinstance(ev, Finished):
            return Collected("".join(parts), ev, ids, lps, beams, scored)
        if isinstance(ev, str):
            parts.append(ev)
        elif isinstance(ev, Delta):
            parts.append(ev.text)
            ids.extend(ev.token_ids)
            lps.extend(ev.logprobs)
            scored.extend(ev.scored or ())
        else:
            beams = ev.results
    raise RuntimeError("generation ended without a finish event")


class Generator:
    def __init__(self, core: CoreSupervisor, metrics: EngineMetrics) -> None:
        self.core = core
        self.metrics = metrics

    def start(
        self,
        endpoint: str,
        prompt_ids: list[int],
        choices: Sequence[SamplingParams],
        text: TextOptions,
        arrival: float,
    ) -> list[Generation]:
        """Submit one engine request per choice now (a 503 if the engine is down); stream lazily."""
        started: list[RequestHandle] = []
        try:
            for params in choices:
                started.append(self.core.add(prompt_ids, params, text))
        except EngineDeadError as exc:
            for handle in started:
                self.core.abort(handle.request_id)
            code = "engine_restarting" if isinstance(exc, EngineRestarting) else "engine_unavailable"
            raise service_unavailable(f"engine unavailable: {exc}", code, self.core.retry_after_s()) from exc
        mt = self.metrics
        return [
            Generation(
                h.request_id,
                self._run(
                    h, endpoint, len(prompt_ids), arrival, request_trace.begin(arrival, mt.model, p, mt.last_waiting)
                ),
            )
            for h, p in zip(started, choices, strict=True)
        ]

    def abort(self, generations: Sequence[Generation]) -> None:
        """Abort whatever is still running (also generations whose stream never started)."""
        for gen in generations:
            self.core.abort(gen.request_id)

    def _raise_for(self, error: RequestError) -> None:
        if error.kind == "rejected":
            raise invalid_request(error.message)
        if not self.core.alive:
            raise service_unavailable(error.message, "engine_unavailable", self.core.retry_after_s())
        raise internal_error(error.message)

    async def _run(
        self, handle: RequestHandle, endpoint: str, prompt: int, arrival: float, traced: RequestTrace | None = None
    ) -> AsyncIterator[Event]:
        generated = 0
        first_token_at: float | None = None
        outcome = "cancelled"
        try:
            while True:
                out = await handle.outputs.get()
                if out.error is not None:
                    outcome = "error"
                    self._raise_for(out.error)
                if out.num_tokens and first_token_at is None:
                    first_token_at = time.perf_counter()
                    self.metrics.ttft.observe(first_token_at - arrival)
                generated = out.completion_tokens
                if out.beams is not None:
                    yield Beams(out.beams)
                elif out.token_ids is not None:
                    if out.text or out.token_ids:
                        yield Delta(out.text, out.token_ids, out.logprobs or [])
                elif out.text:
                    yield out.text
                if out.finish_reason is not None:
                    outcome = out.finish_reason
                    yield Finished(outcome, out.prompt_tokens, out.completion_tokens)
                    return
        finally:
            # No-op once the request ended; otherwise (client gone) abort it in the engine.
            self.core.abort(handle.request_id)
            self._observe(endpoint, outcome, prompt, generated, arrival, first_token_at)
            if traced is not None:
                traced.finish(outcome, prompt, generated, first_token_at)

    def _observe(
        self, endpoint: str, outcome: str, prompt: int, generated: int, arrival: float, first: float | None
    ) -> None:
        end = time.perf_counter()
        mt = self.metrics
        mt.requests.labels(endpoint=endpoint, finish_reason=outcome).inc()
        mt.prompt_tokens.inc(prompt)
        mt.generation_tokens.inc(generated)
        mt.e2e.observe(end - arrival)
        if first is not None and generated > 1:
            mt.tpot.observe((end - first) / (generated - 1))


__all__ = [
    "BeamResult",
    "Beams",
    "Collected",
    "Delta",
    "Event",
    "Finished",
    "Generation",
    "Generator",
    "OpenAIError",
    "TextOptions",
    "collect",
]
