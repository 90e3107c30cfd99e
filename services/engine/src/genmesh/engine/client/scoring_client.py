"""Prompt log-probabilities and true top-k for the API process: sessions on the core's scorer.

``Scoring.session`` opens a scoring session (``core/scorer.py`` in the core) once one of the
``max_num_scoring_seqs`` slots is free (503 with Retry-After after ``scoring_queue_timeout_s``); a
session waits at most ``scoring_output_timeout_s`` for each of its next positions (then 503 too).
``with_top`` wraps a generation's events so that every ``Delta`` carries, for each of its tokens,
the scorer's entry: the token's log-probability and the most likely tokens at its position.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from genmesh.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    invalid_request,
    service_unavailable,
)

from ..core import ipc as m
from .collector import Collector
from .core_client import EngineDeadError
from .generation import Delta, Event
from .supervisor import CoreSupervisor, EngineRestarting


def check_cap(value: int | None, cap: int, param: str) -> None:
    if value is not None and value > cap:
        raise invalid_request(f"'{param}' is {value}, above this server's limit of {cap}", param=param)


def top_k(req: ChatCompletionRequest | CompletionRequest) -> int:
    """How many most likely tokens each generated position reports (0: the chosen one only)."""
    if isinstance(req, ChatCompletionRequest):
        return (req.top_logprobs or 0) if req.logprobs else 0
    return req.logprobs or 0


def check_logprob_request(req: ChatCompletionRequest | CompletionRequest, max_logprobs: int) -> None:
    """Caps (400 naming the field) and combinations the scorer cannot serve."""
    check_cap(req.prompt_logprobs, max_logprobs, "prompt_logprobs")
    if isinstance(req, ChatCompletionRequest):
        check_cap(req.top_logprobs, max_logprobs, "top_logprobs")
        if req.top_logprobs and not req.logprobs:
            raise invalid_request("'top_logprobs' needs 'logprobs' set to true", param="top_logprobs")
    else:
        check_cap(req.logprobs, max_logprobs, "logprobs")
        if req.max_tokens == 0 and not req.echo:
            raise invalid_request(
                "'max_tokens' 0 generates nothing: it is only allowed with 'echo' (to score the prompt)",
                param="max_tokens",
            )
    if (req.best_of or 1) > 1 and (top_k(req) > 0 or req.prompt_logprobs is not None):
        raise invalid_request(
            "'best_of' (beam search) cannot be combined with top logprobs or 'prompt_logprobs'", param="best_of"
        )


@dataclass
class ScoreSession:
    core: CoreSupervisor
    sid: int
    outputs: Collector[m.ScoreOutput]
    output_timeout_s: float
    ready: list[m.ScoredToken] = field(default_factory=list)
    finished: bool = False

    async def take(self, count: int) -> list[m.ScoredToken]:
        """The next ``count`` scored positions, in order (each wait for the scorer bounded by
        ``output_timeout_s``)."""
        while len(self.ready) < count:
            if self.finished:
                raise RuntimeError("scoring session ended early")
            try:
                out = await asyncio.wait_for(self.outputs.get(), self.output_timeout_s)
            except TimeoutError:
                self.finished = True
                raise service_unavailable(
                    f"the scorer gave no positions for {self.output_timeout_s:g} s", "scoring_timeout", 1
                ) from None
            if out.error is not None:
                self.finished = True
                if "outside the vocabulary" in out.error:
                    raise invalid_request(out.error, param="prompt")
                raise service_unavailable(f"scoring failed: {out.error}", "scoring_failed", 1)
            self.ready.extend(out.tokens)
            self.finished = out.done
        got, self.ready = self.ready[:count], self.ready[count:]
        return got

    def append(self, ids: list[int], last: bool = False) -> None:
        self.core.score_append(self.sid, ids, last)

    def close(self) -> None:
        self.core.score_close(self.sid)


class Scoring:
    def __init__(self, core: CoreSupervisor, slots: int, queue_timeout_s: float, output_timeout_s: float) -> None:
        self.core = core
        self.output_timeout_s = output_timeout_s
        self.enabled = slots > 0
        self._slots = asyncio.Semaphore(max(slots, 1))
        self.queue_timeout_s = queue_timeout_s

    @contextlib.asynccontextmanager
    async def session(
        self, token_ids: list[int], top: int, report_from: int, keep: bool
    ) -> AsyncIterator[ScoreSession]:
        """A scoring session over ``token_ids`` (positions from ``report_from`` reported; ``keep``:
        tokens will be appended); closed on exit."""
        if not self.enabled:
            raise invalid_request(
                "prompt log-probabilities and top_logprobs need the scorer, which is off on this server "
                "(--max-num-scoring-seqs 0)",
                code="scoring_disabled",
            )
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            raise service_unavailable(
                f"every scoring slot is busy (waited {self.queue_timeout_s:g} s)", "scoring_busy", 1
            ) from None
        session: ScoreSession | None = None
        try:
            try:
                sid, outputs = self.core.score_open(token_ids, top, report_from, keep)
            except EngineDeadError as exc:
                code = "engine_restarting" if isinstance(exc, EngineRestarting) else "engine_unavailable"
                raise service_unavailable(f"engine unavailable: {exc}", code, self.core.retry_after_s()) from exc
            session = ScoreSession(self.core, sid, outputs, self.output_timeout_s)
            yield session
        finally:
            if session is not None:
                session.close()
            self._slots.release()


async def with_top(events: AsyncIterator[Event], session: ScoreSession) -> AsyncIterator[Event]:
    """The generation's events, each ``Delta`` with the scorer's entries for its tokens."""
    async for ev in events:
        if isinstance(ev, Delta) and ev.token_ids:
            session.append(list(ev.token_ids))
            scored = await session.take(len(ev.token_ids))
            yield replace(ev, logprobs=[s.logprob for s in scored], scored=scored)
        else:
            yield ev


__all__ = [
    "OpenAIError",
    "ScoreSession",
    "Scoring",
    "check_cap",
    "check_logprob_request",
    "top_k",
    "with_top",
]
