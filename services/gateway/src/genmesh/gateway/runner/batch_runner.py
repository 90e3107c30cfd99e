"""The batch runner, one in every gateway replica: claims lines from Redis with leases and sends
each through the interactive path (``line.py``) at a priority below every interactive request.

Each pass over the active batches (every ``batch_poll_interval_s``, or at once when a line ends):
a batch whose end is decided gets its files written (``BatchStore.finish``, any replica); a
cancelled one whose running lines have ended is closed; one past its window is closed as
expired; the others lend lines while this replica runs fewer than ``batch_concurrency``, in
``fair_scheduler.py``'s order (tenants, then their batches, round robin; only batches of models it routes).
A line refused for its key's RPM, TPM or concurrency goes back to its batch at once, with its
runner and batch slots, and its tenant sits out until the refusal's Retry-After.

A claimed line first takes one of its model's batch slots (``batch_slot_share`` of the model's
slots, counted over all replicas in Redis; a line without ``model`` takes one of the model it is
served by), then runs. Leases (the line's and the batch slot's)
are renewed every third of ``batch_lease_ttl_s`` while it runs; a replica that dies stops
renewing, and the next claim of that batch puts its lines back in front. A line's result is
written once (``LINE_DONE``): when a line ran twice (its first runner was only slow), the second
result changes nothing, so each ``custom_id`` is in the output or the error file exactly once.

Interactive first: batch lines wait in the admission queue in a class after every interactive
one, and hold at most their share of slots. With ``batch_preempt`` (the default), an interactive
request that finds no free slot (after ``batch_preempt_after_s``) preempts the youngest batch line
holding one (``queue.py``, ``PREEMPT_BATCH``): the runner running it gets ``!<lease id>`` on the
model's channel, cancels the line's request (its slot is released and goes to the waiting request
first; the engine aborts it) and puts the line back in front of its batch, to run again from the
start. Its result was never written, so it is still written once. Without preemption an
interactive request waits for the next slot to free, and gets it before any batch line. A
cancelled batch's lines waiting in admission are stopped the same way: only running lines finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from genmesh.protocol import OpenAIError
from genmesh.protocol.batches import TERMINAL_BATCH_STATUSES

from ..admission.auth import ApiKey
from ..exchange.dispatch import route_of
from ..exchange.metering import ChargeOnce
from ..redis.client import RedisUnavailable, text
from ..state import GatewayState
from ..storage.batch_validation import served_model
from ..storage.batches import BatchStore, output_line
from ..storage.files import FENCE_TTL_MS
from .fair_scheduler import FairScheduler, key_limited, served_elsewhere, serves
from .line import Outcome, send_line

log = logging.getLogger("genmesh.gateway.batch")

ORPHAN_GRACE_S = 60.0  # an active entry without its batch is dropped only when older than this
MAX_WAIT_S = 5.0  # longest pause between tries of a line that must wait (queue, slots, Redis)


def _lease_id() -> str:
    """A batch slot's lease id: its take time first, so the largest id is the youngest line."""
    return f"{time.time_ns() // 1_000_000:013d}{uuid.uuid4().hex}"


@dataclass
class _Line:
    owner: str
    batch_id: str
    idx: int
    model: str = "-"
    route: str | None = None  # the model it is served by (its batch slots), once known
    slot: str = field(default_factory=_lease_id)  # its batch slot's lease id, its admission ticket id too
    has_slot: bool = False
    call: asyncio.Future[Outcome] | None = None  # its request, while one is under way
    preempted: bool = False


class BatchRunner:
    def __init__(self, st: GatewayState, batches: BatchStore) -> None:
        self.st = st
        self.settings = st.settings
        self.batches = batches
        self.running: dict[tuple[str, str, int], _Line] = {}
        self.status: dict[tuple[str, str], str] = {}  # batch -> status, as of the last pass
        self.wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.scheduler = FairScheduler()
        st.admission.grants.on_preempt = self.preempt

    # -- the loop ----------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        renew = asyncio.ensure_future(self._renew_forever())
        try:
            while True:
                try:
                    await self.tick()
                except (RedisUnavailable, OSError) as exc:
                    log.warning("batch runner: Redis unavailable (%s); retrying", exc)
                except Exception:
                    log.exception("batch runner pass failed")
                self.wake.clear()
                # asyncio.wait, not wait_for: on 3.11 wait_for can swallow a cancellation that
                # arrives as its timeout fires, and the gateway's shutdown would wait for ever
                woken = asyncio.ensure_future(self.wake.wait())
                try:
                    await asyncio.wait({woken}, timeout=self.settings.batch_poll_interval_s)
                finally:
                    woken.cancel()
        finally:
            renew.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(renew, *self._tasks, return_exceptions=True)

    async def tick(self) -> None:
        redis = self.st.redis
        active = self.st.keyspace.active_batches()
        entries: Any = await self.batches.store.call(redis.zrange(active, 0, -1, withscores=True))
        elsewhere = await served_elsewhere(  # named every pass, also while no batch runs
            self.batches.store, set(self.st.config.models), self.settings.batch_poll_interval_s
        )
        lendable: list[tuple[str, str]] = []
        now = time.time()
        seen: dict[tuple[str, str], str] = {}
        for raw, score in entries:
            owner, _, batch_id = text(raw).rpartition("|")
            meta = await self.batches.meta(owner, batch_id)
            status = seen[(owner, batch_id)] = meta.get("status", "")
            self.status[(owner, batch_id)] = status
            if not meta:
                if now - score / 1000 > ORPHAN_GRACE_S:  # its creation never finished
                    await self.batches.store.call(redis.zrem(active, text(raw)))
                continue
            if meta.get("closing"):
                await self._finish(owner, batch_id, meta["closing"])
            elif status in TERMINAL_BATCH_STATUSES:
                await self.batches.store.call(redis.zrem(active, text(raw)))
                await self.batches.ended(owner, batch_id)
            elif now >= int(meta.get("expires_at", "0") or 0):
                await self._close(owner, batch_id, "expired")
            elif status == "cancelling":
                self._stop_waiting(owner, batch_id)
                await self._close(owner, batch_id, "cancelled")
            elif status == "in_progress" and serves(self.st.config, meta, elsewhere):
                lendable.append((owner, batch_id))
        self.status = seen  # batches no longer active are forgotten
        await self._lend(lendable)

    async def _lend(self, batches: list[tuple[str, str]]) -> None:
        """Claim lines, one per tenant in turn (each tenant's batches in turn), while this replica has room."""
        turns = self.scheduler.order(batches)
        while turns and len(self.running) < self.settings.batch_concurrency:
            owner, ids = turns.pop(0)
            while ids:
                batch_id = ids.pop(0)
                res = await self.batches.claim(owner, batch_id)
                kind = text(res[0])
                if kind == "ok":
                    self._start(owner, batch_id, int(res[1]), bytes(res[2] or b""))
                    self.scheduler.lent(owner, batch_id)
                    turns.append((owner, [*ids, batch_id]))  # this tenant's next turn: its next batch
                    break
                if kind == "empty" and int(res[1]) == 0:
                    await self._close(owner, batch_id, "completed")

    def _stop_waiting(self, owner: str, batch_id: str) -> None:
        """A cancelled batch's lines that wait for admission (or a batch slot) are given back unrun;
        lines an upstream already serves finish."""
        for line in self.running.values():
            if (line.owner, line.batch_id) != (owner, batch_id) or line.call is None or line.call.done():
                continue
            ticket = self.st.admission.tracked.get(line.route or "", {}).get(line.slot)
            if ticket is not None and ticket.upstream is None:
                line.preempted = True
                line.call.cancel()
                log.info("batch %s line %d: cancelled while it waited in admission", batch_id, line.idx)

    async def _close(self, owner: str, batch_id: str, target: str) -> None:
        closing = await self.batches.close(owner, batch_id, target)
        if closing:
            await self._finish(owner, batch_id, closing)

    async def _finish(self, owner: str, batch_id: str, closing: str) -> None:
        """End a batch whose end is decided, unless another replica is at it (a lock that lapses)."""
        lock = self.batches.keys(owner, batch_id).finalizer
        redis = self.st.redis
        token = f"{self.st.admission.gateway_id}:{uuid.uuid4().hex}"  # fences each chunk it writes
        if not await self.batches.store.call(redis.set(lock, token, nx=True, px=FENCE_TTL_MS)):
            return
        try:
            await self.batches.finish(owner, batch_id, closing, token)
            log.info("batch %s ended: %s", batch_id, closing)
        finally:
            with contextlib.suppress(Exception):
                if text(await redis.get(lock) or b"") == token:
                    await redis.delete(lock)

    # -- one line ----------------------------------------------------------------------------------

    def _start(self, owner: str, batch_id: str, idx: int, raw: bytes) -> None:
        line = _Line(owner, batch_id, idx)
        self.running[(owner, batch_id, idx)] = line
        task = asyncio.ensure_future(self._run(line, raw))
        self._tasks.add(task)

        def ended(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self.running.pop((owner, batch_id, idx), None)
            self.wake.set()

        task.add_done_callback(ended)

    async def _run(self, line: _Line, raw: bytes) -> None:
        try:
            result = await self._execute(line, raw)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.batches.give_back(line.owner, line.batch_id, line.idx))
            raise
        except RedisUnavailable as exc:  # its lease lapses and the line runs again once Redis is back
            log.warning("batch %s line %d: Redis unavailable (%s)", line.batch_id, line.idx, exc)
            return
        except Exception:  # not given back at once: the lease lapses first, so a failing line never spins
            log.exception("batch %s line %d failed in the gateway", line.batch_id, line.idx)
            return
        finally:
            if line.has_slot:
                self._drop_slot(line)
        if result is None:  # given back: it runs again (or, in a cancelled batch, not at all)
            with contextlib.suppress(Exception):
                await self.batches.give_back(line.owner, line.batch_id, line.idx)
            return
        await self._record(line, *result)

    async def _execute(self, line: _Line, raw: bytes) -> tuple[str, bytes] | None:
        """The line's result, ``(kind, output line)``; None when it was not run (cancelled)."""
        # the line's one parse (checked at creation: at most max_body_bytes, its nesting, its model)
        req = orjson.loads(raw)
        custom_id = str(req["custom_id"])
        body = req["body"]
        path = str(req["url"])
        line.model = served_model(self.batches.kinds, path, body) or "-"  # a served name: a bounded label
        key = await self._key(line.owner)
        if key is None or key.revoked:
            message = "the batch's API key no longer exists" if key is None else "this API key has been revoked"
            err = {"error": {"message": message, "type": "authentication_error", "param": None, "code": None}}
            return "e", output_line(custom_id, 401, "", orjson.dumps(err))
        if not await self._take_slot(line, body, path):
            return None
        body_bytes = orjson.dumps(body)
        attempts = 0
        while True:
            rid = f"{line.batch_id}-{line.idx}-{uuid.uuid4().hex[:8]}"
            outcome = await self._send(line, path, key, (body_bytes, body), rid)
            if outcome is None:  # preempted: it runs again from the start
                return None
            if outcome.wait and key_limited(outcome):  # give the runner and batch slots back while it waits
                self.scheduler.sit_out(line.owner, outcome.retry_after_s)
                return None
            if outcome.wait or (outcome.transient and attempts + 1 < self.settings.batch_max_attempts):
                attempts += 0 if outcome.wait else 1
                if not self._in_progress(line):
                    return None
                await asyncio.sleep(self._pause(outcome))
                continue
            kind = "o" if 200 <= outcome.status < 300 else "e"
            return kind, output_line(custom_id, outcome.status, rid, outcome.body)

    async def _send(
        self, line: _Line, path: str, key: ApiKey, body: tuple[bytes, dict[str, Any]], rid: str
    ) -> Outcome | None:
        """The line's request (its bytes and its parsed body), in a task of its own that ``preempt``
        may cancel; None when it did."""
        once = ChargeOnce(self.batches.keys(line.owner, line.batch_id).charged, line.idx, self.batches.ttl_ms)
        line.call = asyncio.ensure_future(send_line(self.st, path, key, body, rid, line.slot, once))
        try:
            return await line.call
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if line.preempted and task is not None and not task.cancelling():
                return None
            raise
        finally:
            line.call = None

    def preempt(self, lease: str) -> None:
        """``lease``'s line, if it runs here, gives its slot to a waiting interactive request: its
        request is cancelled (the slot is released, the upstream connection closed so the engine
        aborts), and the line goes back to its batch (``_run``)."""
        for line in self.running.values():
            if line.slot == lease:
                line.has_slot = False  # PREEMPT_BATCH dropped the batch slot already
                if line.call is not None and not line.call.done():
                    line.preempted = True
                    line.call.cancel()
                    log.info("batch %s line %d preempted by an interactive request", line.batch_id, line.idx)
                return

    def _pause(self, outcome: Outcome) -> float:
        base = outcome.retry_after_s or 1.0
        return min(MAX_WAIT_S, base) * random.uniform(0.8, 1.2)

    def _in_progress(self, line: _Line) -> bool:
        return self.status.get((line.owner, line.batch_id), "in_progress") == "in_progress"

    async def _record(self, line: _Line, kind: str, out: bytes) -> None:
        """Write the result once; Redis away: try again until the lease would lapse (then the
        line runs again elsewhere, and the first result written is the one kept)."""
        deadline = time.monotonic() + self.settings.batch_lease_ttl_s
        while True:
            try:
                written, pending, running = await self.batches.done(
                    line.owner, line.batch_id, line.idx, kind, out, line.model
                )
                break
            except RedisUnavailable:
                if time.monotonic() > deadline:
                    log.warning("batch %s line %d: result not recorded (Redis away)", line.batch_id, line.idx)
                    return
                await asyncio.sleep(0.5)
        if written:
            outcome = "completed" if kind == "o" else "failed"
            self.st.metrics.batch_lines.labels(line.model, outcome).inc()
        if pending == 0 and running == 0:
            with contextlib.suppress(RedisUnavailable):
                await self._close(line.owner, line.batch_id, "completed")

    async def _key(self, owner: str) -> ApiKey | None:
        try:
            return await self.st.keys.by_id(owner)
        except OSError as exc:
            raise RedisUnavailable(str(exc)) from exc

    # -- the model's batch slots -------------------------------------------------------------------

    async def _take_slot(self, line: _Line, body: dict[str, Any], path: str) -> bool:
        """Wait for one of the batch slots of the model that serves the line (named or, without
        ``model``, the one of its kind); False when the batch stops meanwhile."""
        try:
            route = route_of(self.st, body, path)
        except OpenAIError:
            return True  # an unknown model: the interactive path answers it (404), no slot is used
        line.route = route.name
        key = self.st.admission.keys[route.name].batch
        cap = max(1, int(sum(self.st.pool.caps(route)) * self.settings.batch_slot_share))
        ttl_ms = int(self.settings.batch_lease_ttl_s * 1000)
        while True:
            try:
                took = await self.batches.store.call(
                    self.st.scripts.take_batch_slot(keys=[key], args=[cap, line.slot, ttl_ms])
                )
                if took:
                    line.has_slot = True
                    return True
            except RedisUnavailable:
                pass
            if not self._in_progress(line):
                return False
            await asyncio.sleep(random.uniform(0.1, 0.3))

    def _drop_slot(self, line: _Line) -> None:
        line.has_slot = False
        if line.route is not None:
            self.st.spawn(self._zrem(self.st.admission.keys[line.route].batch, line.slot))

    async def _zrem(self, key: str, member: str) -> None:
        with contextlib.suppress(Exception):
            await self.st.redis.zrem(key, member)

    # -- leases ------------------------------------------------------------------------------------

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.batch_lease_ttl_s / 3)
            with contextlib.suppress(Exception):
                await self.renew_once()

    async def renew_once(self) -> None:
        by_batch: dict[tuple[str, str], list[int]] = {}
        by_model: dict[str, list[str]] = {}
        for line in list(self.running.values()):
            by_batch.setdefault((line.owner, line.batch_id), []).append(line.idx)
            if line.has_slot and line.route is not None:
                by_model.setdefault(line.route, []).append(line.slot)
        for (owner, batch_id), indexes in by_batch.items():
            with contextlib.suppress(RedisUnavailable):
                await self.batches.renew(owner, batch_id, indexes)
        ttl_ms = int(self.settings.batch_lease_ttl_s * 1000)
        for name, slots in by_model.items():
            with contextlib.suppress(RedisUnavailable):
                key = self.st.admission.keys[name].batch
                await self.batches.store.call(self.st.scripts.renew_batch_slots(keys=[key], args=[ttl_ms, *slots]))
