"""Admission at idle (core/step_loop.py ``_admit_burst``): requests that find the loop idle wait, briefly, for the
ones that follow them, so that a burst starts as one batch; a lone request does not wait past the gap.

The loop runs on the real pipeline (the default model, as the engine core loads it) with real ZeroMQ sockets; a
thread sends the requests at set times, as the API process would, while the loop takes them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov
import openvino_genai as ov_genai
import pytest
import zmq

from genmesh.engine.core import ipc as m
from genmesh.engine.core.config import CoreConfig
from genmesh.engine.core.model_loading import prepare_model
from genmesh.engine.core.pipeline_config import pipeline_properties, scheduler_config
from genmesh.engine.core.step_loop import _Loop
from support.servers import DEFAULT_MODEL

PARAMS = m.SamplingParams(4, 0.0)
PROMPT = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def pipe() -> Any:
    config = CoreConfig(str(DEFAULT_MODEL), "CPU", 1, 8, 256, True, True)
    served = prepare_model(config)
    properties = pipeline_properties({}, False)
    sc = scheduler_config(ov_genai, config)
    if served.tokenizer_gguf is not None:
        tokenizer = ov_genai.Tokenizer(str(served.tokenizer_gguf))
        return ov_genai.ContinuousBatchingPipeline(str(served.path), tokenizer, sc, "CPU", **properties)
    return ov_genai.ContinuousBatchingPipeline(str(served.path), sc, "CPU", properties)


@dataclass
class Wired:
    loop: _Loop
    sender: zmq.Socket[bytes]


@pytest.fixture
def wired(pipe: Any) -> Iterator[Wired]:
    ctx = zmq.Context()
    addr = f"inproc://admission-{time.monotonic_ns()}"
    inbox, sender = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    inbox.bind(addr)
    sender.connect(addr)
    outbox, api = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)  # the API process's end takes idle heartbeats
    outbox.bind(f"{addr}-out")
    api.connect(f"{addr}-out")
    loop = _Loop(ov_genai, ov, np, pipe, inbox, outbox)
    yield Wired(loop, sender)
    for live in loop.handles.values():
        live.handle.cancel()
    while pipe.has_non_finished_requests():
        pipe.step()
    for sock in (inbox, sender, outbox, api):
        sock.close(linger=0)
    ctx.term()


def send_at(sender: zmq.Socket[bytes], offsets_s: list[float], first_id: int) -> threading.Thread:
    """Send one AddRequest at each offset from now, from a thread (the arrival schedule, not synchronisation)."""

    def run() -> None:
        start = time.monotonic()
        for i, at in enumerate(offsets_s):
            time.sleep(max(0.0, at - (time.monotonic() - start)))
            sender.send(m.encode(m.AddRequest(first_id + i, PROMPT, PARAMS)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def drain_once(loop: _Loop) -> float:
    started = time.monotonic()
    loop._drain(block=True)
    return time.monotonic() - started


def test_requests_that_follow_within_the_gap_join_the_first_step(wired: Wired) -> None:
    wired.loop.admission_window_s, wired.loop.admission_gap_s = 5.0, 1.0
    sending = send_at(wired.sender, [0.0, 0.05, 0.1, 0.15], first_id=1)
    drain_once(wired.loop)
    sending.join(timeout=10)
    assert sorted(wired.loop.handles) == [1, 2, 3, 4]


def test_the_wait_ends_at_the_window_however_many_keep_coming(wired: Wired) -> None:
    wired.loop.admission_window_s, wired.loop.admission_gap_s = 0.3, 1.0
    sending = send_at(wired.sender, [0.05 * i for i in range(60)], first_id=100)  # 3 s of arrivals
    took = drain_once(wired.loop)
    assert took < 2.0  # the window (0.3 s) bounds it, not the 3 s of arrivals
    assert 1 < len(wired.loop.handles) < 60
    sending.join(timeout=10)


def test_a_lone_request_waits_only_the_gap_and_none_with_the_window_off(wired: Wired) -> None:
    wired.loop.admission_window_s, wired.loop.admission_gap_s = 5.0, 0.2
    send_at(wired.sender, [0.0], first_id=200).join(timeout=10)
    took = drain_once(wired.loop)
    assert list(wired.loop.handles) == [200]
    assert 0.2 <= took < 2.0  # one gap, then the step; never the 5 s window
    wired.loop.handles.pop(200).handle.cancel()  # the loop is idle again
    wired.loop.admission_window_s = 0.0
    sending = send_at(wired.sender, [0.0, 0.5], first_id=300)
    drain_once(wired.loop)
    assert list(wired.loop.handles) == [300]  # the step comes at once: 301 is still to come
    sending.join(timeout=10)
