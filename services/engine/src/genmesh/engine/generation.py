"""One request's generation as an async stream of text deltas, ending in a ``Finished`` event.

Closing the stream early (client gone, stop string hit) aborts the request in the engine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from genmesh.protocol import OpenAIError, Usage, internal_error, service_unavailable

from .core_client import CoreClient, EngineDeadError, RequestStream
from .messages import SamplingParams
from .metrics import EngineMetrics
from .stop import StopMatcher
from .tokenizer import PromptTokenizer


@dataclass(frozen=True)
class Finished:
    reason: str
    prompt_tokens: int
    completion_tokens: int


def usage_of(fin: Finished) -> Usage:
    return Usage(
        prompt_tokens=fin.prompt_tokens,
        completion_tokens=fin.completion_tokens,
        total_tokens=fin.prompt_tokens + fin.completion_tokens,
    )


async def collect(events: AsyncIterator[str | Finished]) -> tuple[str, Finished]:
    """Drain a generation into its whole text and finish event."""
    parts: list[str] = []
    async for ev in events:
        if isinstance(ev, Finished):
            return "".join(parts), ev
        parts.append(ev)
    raise RuntimeError("generation ended without a finish event")


class Generator:
    def __init__(self, core: CoreClient, tokenizer: PromptTokenizer, metrics: EngineMetrics) -> None:
        self.core = core
        self.tokenizer = tokenizer
        self.metrics = metrics

    def start(
        self,
        endpoint: str,
        prompt_ids: list[int],
        params: SamplingParams,
        stops: Sequence[str],
        arrival: float,
    ) -> AsyncIterator[str | Finished]:
        """Submit the request now (a 503 if the engine is down), stream its text lazily."""
        try:
            handle = self.core.add(prompt_ids, params)
        except EngineDeadError as exc:
            raise service_unavailable(f"engine unavailable: {exc}", code="engine_unavailable") from exc
        return self._run(handle, endpoint, prompt_ids, stops, arrival)

    async def _run(
        self,
        handle: RequestStream,
        endpoint: str,
        prompt_ids: list[int],
        stops: Sequence[str],
        arrival: float,
    ) -> AsyncIterator[str | Finished]:
        matcher = StopMatcher(stops)
        generated = 0
        first_token_at: float | None = None
        outcome = "cancelled"
        try:
            while True:
                out = await handle.queue.get()
                if out.finish_reason == "error":
                    outcome = "error"
                    if not self.core.alive:
                        raise service_unavailable(out.error or "engine died", code="engine_unavailable")
                    raise internal_error(out.error or "generation failed")
                if out.num_tokens:
                    if first_token_at is None:
                        first_token_at = time.perf_counter()
                        self.metrics.ttft.observe(first_token_at - arrival)
                    generated += out.num_tokens
                final = out.finish_reason is not None
                text, stopped = matcher.feed(out.text, final)
                if text:
                    yield text
                if stopped or final:
                    outcome = "stop" if stopped else str(out.finish_reason)
                    yield Finished(outcome, len(prompt_ids), generated)
                    return
        finally:
            # No-op once the engine reported the end; otherwise (client gone, stop string) abort.
            self.core.abort(handle.request_id)
            self._observe(endpoint, outcome, len(prompt_ids), generated, arrival, first_token_at)

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


__all__ = ["Finished", "Generator", "OpenAIError", "collect", "usage_of"]
