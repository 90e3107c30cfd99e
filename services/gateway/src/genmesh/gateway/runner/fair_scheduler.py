"""The batch runner's fair scheduler, whose lines it lends next: round robin across tenants (API keys),
then across each tenant's batches; a tenant whose key refused a line (RPM, TPM, concurrency) sits out until the
refusal's Retry-After; and a batch is lent only by replicas that route its models.

Which replica lends which batch: every replica names the models it routes in Redis
(``KeySpace.served_models``, each name with an expiry a few poll intervals ahead). A replica lends a
batch when it routes every model the batch names; a model it does not route, but another live
replica does, leaves the batch for that replica. A model nobody routes is lent by anyone, and its
lines fail alone with the interactive path's 404, as a client's request would.
"""

from __future__ import annotations

import time

import orjson

from ..redis.client import RedisClient, text
from ..routing.config import RoutingConfig
from .line import Outcome

MAX_COOL_S = 60.0  # longest a rate-limited key's batches lend nothing (an RPM/TPM window)


class FairScheduler:
    def __init__(self) -> None:
        self.last_owner = ""  # the tenant a line was last lent for
        self.last_batch: dict[str, str] = {}  # per tenant, the batch a line was last lent from
        self.cool: dict[str, float] = {}  # tenant -> monotonic time its key's refusal ends

    def order(self, batches: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
        """The lendable batches by tenant: tenants after the last one served first, each tenant's
        batches after its last one served first; tenants sitting out are left out."""
        now = time.monotonic()
        self.cool = {o: t for o, t in self.cool.items() if t > now}
        by_owner: dict[str, list[str]] = {}
        for owner, batch_id in sorted(batches):
            if owner not in self.cool:
                by_owner.setdefault(owner, []).append(batch_id)
        owners = sorted(by_owner)
        owners = [o for o in owners if o > self.last_owner] + [o for o in owners if o <= self.last_owner]
        out = []
        for owner in owners:
            ids, last = by_owner[owner], self.last_batch.get(owner, "")
            out.append((owner, [b for b in ids if b > last] + [b for b in ids if b <= last]))
        return out

    def lent(self, owner: str, batch_id: str) -> None:
        self.last_owner, self.last_batch[owner] = owner, batch_id

    def sit_out(self, owner: str, retry_after_s: float) -> None:
        self.cool[owner] = time.monotonic() + min(MAX_COOL_S, retry_after_s or 1.0)


def serves(config: RoutingConfig, meta: dict[str, str], elsewhere: set[str]) -> bool:
    """Whether this replica should lend the batch: no model it names (``m:<model>``; ``-``: lines
    without ``model``, served by the one model of the endpoint's kind) is routed by another replica
    but not here."""
    kind = "embeddings" if meta.get("endpoint") == "/v1/embeddings" else "chat"
    for field in meta:
        if not field.startswith("m:"):
            continue
        model = field[2:]
        if model == "-":
            if sum(1 for r in config.models.values() if r.kind == kind) != 1 and elsewhere:
                return False
        elif config.route(model) is None and model in elsewhere:
            return False
    return True


def key_limited(outcome: Outcome) -> bool:
    """A refusal for the key's own limits (RPM, TPM, concurrency), not the model's queue or Redis."""
    if not outcome.refused or outcome.status != 429:
        return False
    try:
        code = orjson.loads(outcome.body)["error"]["code"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return False
    return isinstance(code, str) and code.startswith("rate_limit_exceeded_")


async def served_elsewhere(store: RedisClient, mine: set[str], poll_interval_s: float) -> set[str]:
    """Name the models this replica routes (``mine``, for a few poll intervals); those other replicas route."""
    key, redis = store.keyspace.served_models(), store.redis
    now_ms = int(time.time() * 1000)
    expiry = now_ms + int(max(10.0, 5 * poll_interval_s) * 1000)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zadd(key, dict.fromkeys(mine, expiry))
        pipe.zremrangebyscore(key, "-inf", now_ms)
        pipe.zrange(key, 0, -1)
        pipe.pexpire(key, 60_000)
        res = await store.call(pipe.execute())
    return {text(m) for m in res[2]} - mine
