"""The runner's lending order (``runner/fair_scheduler.py``): tenants in turn, then each tenant's batches in turn."""

from __future__ import annotations

from genmesh.gateway.runner.fair_scheduler import FairScheduler


def _lend(scheduler: FairScheduler, batches: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    """What ``BatchRunner._lend`` does, with every claim succeeding: ``n`` lines' (tenant, batch)."""
    order, out = scheduler.order(batches), []
    while order and len(out) < n:
        owner, ids = order.pop(0)
        batch_id = ids.pop(0)
        out.append((owner, batch_id))
        scheduler.lent(owner, batch_id)
        order.append((owner, [*ids, batch_id]))
    return out


def test_a_tenant_with_ten_batches_gets_one_tenants_share() -> None:
    batches = [("many", f"b{i}") for i in range(10)] + [("one", "x")]
    scheduler = FairScheduler()
    first = _lend(scheduler, batches, 8)
    assert [o for o, _ in first].count("one") == 4
    assert [o for o, _ in first].count("many") == 4
    assert len({b for o, b in first if o == "many"}) == 4  # the big tenant's batches in turn
    # the next pass goes on where this one stopped, across tenants and across the big one's batches
    again = _lend(scheduler, batches, 20)
    assert [o for o, _ in again].count("one") == 10
    assert {b for o, b in again if o == "many"} == {f"b{i}" for i in range(10)}


def test_a_tenant_sitting_out_lends_nothing_until_its_retry_after() -> None:
    scheduler = FairScheduler()
    scheduler.sit_out("limited", 30)
    batches = [("limited", "a"), ("free", "b")]
    assert [o for o, _ in _lend(scheduler, batches, 4)] == ["free"] * 4
    scheduler.sit_out("limited", 0.001)
    scheduler.cool["limited"] = 0.0  # its Retry-After has passed
    assert "limited" in [o for o, _ in _lend(scheduler, batches, 4)]
