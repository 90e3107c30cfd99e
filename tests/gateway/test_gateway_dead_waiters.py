"""A dead gateway's queued requests are never granted (issue 55 item 3), on a real Redis with the
gateway's own scripts: gateway D holds the model's one slot, renews, queues a request, and dies (it
renews no more). When D's lease lapses the sweep that frees the slot finds D's waiter lapsed too, so
the slot stays free for a live gateway instead of going to a request nobody will ever use."""

from __future__ import annotations

import time
from typing import Any

from genmesh.gateway.redis.scripts import source
from support.gateway_helpers import KeySpace, RedisServer
from support.polling import wait_until

LEASE_MS = 1000
KEYS = KeySpace().model("m", ["u1"])


class Gateway:
    """One gateway's side of the model's scripts (its id and the state's epoch)."""

    def __init__(self, rc: Any, gateway_id: str) -> None:
        self.rc = rc
        self.id = gateway_id
        self.epoch = ""
        self.scripts = {name: rc.register_script(source(name)) for name in ("admit", "renew", "reclaim", "release")}

    def run(self, name: str, *args: Any) -> Any:
        argv = [LEASE_MS, 60_000, KEYS.channel, "1", self.epoch, self.id, 0, *args]
        return self.scripts[name](keys=list(KEYS.all()), args=argv)

    def renew(self, *entries: str) -> None:
        epoch, _, lost = self.run("renew", *entries)
        self.epoch = epoch.decode()
        assert not lost

    def admit(self, rid: str) -> list[Any]:
        res: list[Any] = self.run("admit", rid, "tenant", "5", 16, "0", 60_000, 4, 0)
        assert res[0] != 4, res
        return res


def _state(rc: Any, rid: str) -> bytes | None:
    value: bytes | None = rc.hget(KEYS.waiters, rid)
    return value


def test_a_dead_gateway_s_waiter_is_swept_before_its_lease_frees_the_slot(redis_server: RedisServer) -> None:
    rc = redis_server.client()
    dead, live = Gateway(rc, "dead"), Gateway(rc, "live")
    dead.renew()
    live.renew()
    assert dead.admit("running")[0] == 1  # granted: the one slot
    dead.renew("running|1")  # its last renewal: lease and membership end a lease time from now
    renewed = time.monotonic()
    time.sleep(LEASE_MS / 2000)  # half a lease later it queues one more request, then dies
    assert dead.admit("queued")[0] == 2
    # the live gateway's sweeps run on; the first one after the dead lease lapses frees the slot
    wait_until(lambda: time.monotonic() > renewed + LEASE_MS / 1000 + 0.05, 5, what="the dead lease to lapse")
    while time.monotonic() < renewed + LEASE_MS / 1000 * 1.4:  # up to the waiter's own old heartbeat and past it
        live.run("reclaim")
        assert _state(rc, "queued") is None or _state(rc, "queued").startswith(b"q|"), _state(rc, "queued")
        time.sleep(0.05)
    assert _state(rc, "queued") is None  # swept, never granted
    assert rc.zcard(KEYS.slots[0]) == 0
    assert live.admit("mine")[0] == 1  # the slot is the live gateway's at once


def test_a_live_gateway_s_waiter_queued_between_renewals_is_granted(redis_server: RedisServer) -> None:
    """The other side: a waiter whose gateway renews keeps its place and gets the slot."""
    rc = redis_server.client()
    a = Gateway(rc, "a")
    a.renew()
    assert a.admit("first")[0] == 1
    a.renew("first|1")
    time.sleep(LEASE_MS / 2000)
    assert a.admit("second")[0] == 2
    for _ in range(3):  # renewing every lease/3 while both wait
        time.sleep(LEASE_MS / 3000)
        a.renew("first|1", "second|0")
        a.run("reclaim")
    assert _state(rc, "second").startswith(b"q|")
    a.run("release", "first")
    assert _state(rc, "second") == b"g|1"
