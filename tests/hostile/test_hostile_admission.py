"""Admission before bytes at scale (issue 55 item 3), ``make fuzz`` only (``GENMESH_FUZZ=full``; the
bounded form is tests/gateway/test_gateway_admission.py in ``make test``): a real gateway on a real
Redis with the fake upstream. 300 unauthenticated 25 MB uploads at once are each refused and closed
unread; 64 transcriptions of 20 MiB queue behind one holding the model's slot with none of their
bytes in the gateway. Both run while another tenant's chat requests are all served, the gateway's
peak RSS growing less than ``RSS_GROWTH_BOUND`` (24 MiB)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.admission import (
    TRANSCRIPTIONS,
    Pusher,
    abuse,
    answer_then_closed,
    audio_form,
    head,
    new_key,
    queued,
    slots,
)
from support.gateway_helpers import Fake, RedisServer, launch_gateway_for, model_config
from support.hostile import FULL, connect
from support.polling import wait_until
from support.servers import Server

pytestmark = pytest.mark.skipif(not FULL, reason="make fuzz only (GENMESH_FUZZ=full)")
QUEUED = 64


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, fake_upstream: Server
) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("admission-full")
    stt = model_config(fake_upstream.url, max_concurrency=1, max_queue_length=QUEUED * 2, max_queue_wait_s=10)
    models = {"chat": model_config(fake_upstream.url, max_concurrency=4), "stt": {**stt, "kind": "transcription"}}
    server = launch_gateway_for(log_dir, models, redis_server.url, "--auth", "on")
    yield server
    server.stop()


def test_three_hundred_unauthenticated_uploads_are_refused_and_closed_unread(gateway: Server, fake: Fake) -> None:
    def one(_: int) -> tuple[int, bytes]:
        with connect(gateway.url) as sock:
            sock.sendall(head(TRANSCRIPTIONS, 25_000_000, None) + b"x" * 1000)
            status, _, after = answer_then_closed(sock)
            return status, after

    with abuse(gateway, "300 unauthenticated uploads"), ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(300)))
    assert {status for status, _ in results} == {401}
    assert all(after == b"" for _, after in results)


def test_sixty_four_queued_transcriptions_hold_none_of_their_uploads(
    gateway: Server, fake: Fake, redis_server: RedisServer
) -> None:
    key = new_key(gateway)
    rc = redis_server.client()
    form = audio_form(b"\0" * 1000)
    with abuse(gateway, f"{QUEUED} queued 20 MiB uploads"):
        slow = connect(gateway.url)
        slow.sendall(head(TRANSCRIPTIONS, len(form), key) + form[:100])
        wait_until(lambda: slots(rc, fake) == 1, 10, what="the first upload admitted")
        pushers = [Pusher(gateway.url, key) for _ in range(QUEUED)]
        for p in pushers:
            p.start()
        wait_until(lambda: queued(rc) == QUEUED, 30, what=f"{QUEUED} uploads queued")
        for p in pushers:
            p.stop.set()
            p.join(5)
            p.sock.close()
        slow.close()
    wait_until(lambda: queued(rc) == 0, 30, what="the queued uploads gone")
