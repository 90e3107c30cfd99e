"""Closing the API's side of a core that no longer reads must not wait for it.

A core whose model fails to load sends ``LoadFailed``, closes its inbox and then takes its time
to exit (OpenVINO's teardown). The API closes its client as soon as it reads the failure; a
Shutdown handed to a PUSH socket with no peer left used to wait for ever, and the model stayed
"LOADING" (seen in CI: tests/engine/server/test_repository.py's fixture timed out). The core here is a
real spawned process doing exactly that, without a model.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq

from genmesh.engine.client.core_client import CoreClient, EngineDeadError
from genmesh.engine.core import ipc as m
from genmesh.engine.core.config import CoreConfig


def failing_core(config: CoreConfig, input_addr: str, output_addr: str, log_level: str) -> None:
    """Report a failed load, never read the inbox, and stay alive (as a slow teardown does)."""
    ctx = zmq.Context()
    outbox = ctx.socket(zmq.PUSH)
    outbox.connect(output_addr)
    outbox.send(m.encode(m.LoadFailed(error="no such device")))
    time.sleep(120)


class FailingCore(CoreClient):
    target = staticmethod(failing_core)


async def test_close_after_a_failed_load_returns_and_ends_the_process() -> None:
    config = CoreConfig("unused", "CPU", 1, 1, 16, True, False)
    client = FailingCore(config)
    with pytest.raises(EngineDeadError, match="no such device"):
        await client.start(timeout_s=60)
    proc = client._proc
    assert proc is not None
    assert proc.is_alive()
    started = time.monotonic()
    await asyncio.wait_for(client.close(timeout_s=1), 30)
    assert time.monotonic() - started < 30
    assert not proc.is_alive()  # it ignored the Shutdown it never read, so close() killed it
