"""``genmesh-gateway-keys``: create, list and revoke API keys directly in Redis.

genmesh-gateway-keys create --tenant acme --priority 5 --rpm 600 --tpm 100000 --max-concurrent 8
genmesh-gateway-keys list
genmesh-gateway-keys revoke KEY_ID [--purge]   # --purge: also delete its files, batches, stored responses
genmesh-gateway-keys usage KEY_ID
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from .admission.auth import KeyStore
from .admission.quotas import Quotas
from .admission.ratelimit import Limiter
from .metrics import GatewayMetrics
from .redis.client import RedisClient, RedisUnavailable
from .redis.keys import API_KEY_TTL_S, KeySpace
from .redis.scripts import Scripts
from .settings import GatewaySettings
from .state import connect_redis
from .storage.batches import BatchStore
from .storage.files import FileStore
from .storage.purge import Holdings
from .storage.responses import ResponseStore

# The ``create`` flags passed to ``KeyStore.create`` as they are (the tenant and lifetime apart).
CREATE_OPTIONS = ("name", "priority", "max_priority", "rpm", "tpm", "max_concurrent", "aspm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="genmesh-gateway-keys", description="Manage genmesh gateway API keys in Redis.")
    p.add_argument("--redis-url", help="Redis URL (default $REDIS_URL or redis://127.0.0.1:6379/0)")
    p.add_argument("--redis-prefix", help="key prefix (default genmesh:gw)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="create a key; the secret is printed once")
    c.add_argument("--tenant", required=True)
    c.add_argument("--name", default="")
    c.add_argument("--priority", type=int, default=5, help="0-9, higher served first (default 5)")
    c.add_argument("--max-priority", type=int, help="highest X-Priority the key may ask for (default: its priority)")
    c.add_argument("--rpm", type=int, default=0, help="requests per minute (0: unlimited)")
    c.add_argument("--tpm", type=int, default=0, help="tokens per minute (0: unlimited)")
    c.add_argument("--aspm", type=int, default=0, help="audio seconds per minute (0: unlimited)")
    c.add_argument("--max-concurrent", type=int, default=0, help="requests at once (0: unlimited)")
    c.add_argument("--ttl-days", type=float, default=API_KEY_TTL_S / 86400, help="key lifetime (default 365)")
    sub.add_parser("list", help="list keys (never their secrets)")
    r = sub.add_parser("revoke", help="revoke a key by id")
    r.add_argument("key_id")
    r.add_argument("--purge", action="store_true", help="also delete the key's files, batches and stored responses")
    u = sub.add_parser("usage", help="tokens and requests used by a key")
    u.add_argument("key_id")
    return p


def _storage(redis: Redis, keyspace: KeySpace, settings: GatewaySettings) -> Holdings:
    metrics = GatewayMetrics()
    store = RedisClient(redis, Scripts.register(redis), keyspace, metrics)
    quotas = Quotas(store, settings)
    files = FileStore(store, settings, quotas)
    responses = ResponseStore(redis, keyspace, metrics, settings.responses_ttl_s, settings.responses_max_bytes, quotas)
    return Holdings(files, BatchStore(store, files, settings), responses)


async def run(ns: argparse.Namespace) -> int:
    overrides = {k: v for k, v in (("redis_url", ns.redis_url), ("redis_prefix", ns.redis_prefix)) if v}
    settings = GatewaySettings(**overrides)
    redis = connect_redis(settings)
    keyspace = KeySpace(settings.redis_prefix)
    store = KeyStore(redis, keyspace)
    try:
        if ns.command == "create":
            options = {name: getattr(ns, name) for name in CREATE_OPTIONS}
            secret, key = await store.create(ns.tenant, ttl_s=int(ns.ttl_days * 86400), **options)
            print(json.dumps({"api_key": secret, **key.public()}))
        elif ns.command == "list":
            for key in await store.list():
                print(json.dumps(key.public()))
        elif ns.command == "revoke":
            if not await store.revoke(ns.key_id):
                print(f"no API key with id {ns.key_id}", file=sys.stderr)
                return 1
            out: dict[str, object] = {"key_id": ns.key_id, "revoked": True}
            if ns.purge:
                out["deleted"] = await _storage(redis, keyspace, settings).purge(ns.key_id)
            print(json.dumps(out))
        elif ns.command == "usage":
            limiter = Limiter(
                RedisClient(redis, Scripts.register(redis), keyspace, GatewayMetrics()), settings.lease_ttl_s
            )
            print(json.dumps({"key_id": ns.key_id, **await limiter.usage(ns.key_id)}))
    except (RedisError, OSError, RedisUnavailable) as exc:
        print(f"genmesh-gateway-keys: Redis at {settings.redis_location()} unavailable: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"genmesh-gateway-keys: {exc}", file=sys.stderr)
        return 2
    finally:
        await redis.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
