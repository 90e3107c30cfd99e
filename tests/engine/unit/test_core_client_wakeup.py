"""The engine API reads its core's outputs on an asyncio ZeroMQ socket that the watchdog also
asks "is anything waiting?": asking must never make the reader miss its wake-up."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import zmq
import zmq.asyncio

from genmesh.engine.client.core_client import has_pending

N = 2000


async def test_asking_for_pending_output_never_starves_the_reader(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/out"
    ctx = zmq.asyncio.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(address)
    got = 0
    # The sender keeps its socket open until the reader is done: libzmq drops the tail of what a
    # PUSH socket had queued on ipc when it is closed at once (even with a linger), and a lost
    # message would look like the starved reader this test is about.
    read_all = threading.Event()

    async def reader() -> None:
        nonlocal got
        while got < N:
            await pull.recv()
            got += 1

    async def watchdog() -> None:
        while got < N:
            has_pending(pull)
            await asyncio.sleep(0)

    def core() -> None:
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.connect(address)
        for _ in range(N):
            push.send(b"step")
        read_all.wait(60)
        push.close(linger=0)

    threading.Thread(target=core, daemon=True).start()
    watching = asyncio.create_task(watchdog())
    try:
        await asyncio.wait_for(reader(), 30)
    finally:
        read_all.set()
        watching.cancel()
        pull.close(linger=0)
        ctx.term()
    assert got == N
