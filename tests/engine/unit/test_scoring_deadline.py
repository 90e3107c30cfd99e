"""A scoring session's wait for the scorer is bounded (``--scoring-output-timeout-s``): a scorer that gives no
positions (stuck behind other sessions, or gone) becomes a 503 with Retry-After, not a request that hangs.
The session's hand-over is the engine's own ``Collector``; the core is not needed to wait on it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from genmesh.engine.client.collector import Collector
from genmesh.engine.client.scoring_client import ScoreSession
from genmesh.engine.core import ipc as m
from genmesh.engine.settings import EngineSettings
from genmesh.protocol import OpenAIError


def _session(timeout_s: float) -> tuple[ScoreSession, Collector[m.ScoreOutput]]:
    outputs: Collector[m.ScoreOutput] = Collector(lambda a, b: b)
    return ScoreSession(cast(Any, None), 1, outputs, timeout_s), outputs


def test_a_silent_scorer_is_a_503_with_retry_after() -> None:
    session, _ = _session(0.05)

    async def take() -> None:
        await session.take(1)

    with pytest.raises(OpenAIError) as caught:
        asyncio.run(asyncio.wait_for(take(), 10))
    err = caught.value
    assert (err.status, err.code) == (503, "scoring_timeout")
    assert int(err.headers["Retry-After"]) >= 1
    assert session.finished


def test_positions_that_arrive_in_time_are_taken() -> None:
    session, outputs = _session(5.0)
    token = m.ScoredToken(token_id=7, logprob=-0.5, rank=1, top_ids=[], top_logprobs=[])

    async def run() -> list[m.ScoredToken]:
        asyncio.get_running_loop().call_later(0.05, outputs.put, m.ScoreOutput(session_id=1, tokens=[token], done=True))
        return await session.take(1)

    assert asyncio.run(run()) == [token]


def test_the_deadline_is_a_setting_with_a_default() -> None:
    assert EngineSettings.model_fields["scoring_output_timeout_s"].default == 300.0
