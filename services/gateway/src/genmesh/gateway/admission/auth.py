"""API keys: stored hashed (SHA-256) in Redis with tenant, priority and limits; Bearer lookup.

A secret is shown once, at creation. Its record lives under ``apikey:<sha256>``; an index maps
the public key id (the first 12 hex digits of the digest) to the digest for listing and revoking.
A revoked key keeps a tombstone for a while so that its holder is told it was revoked.

Looked-up keys are reused for ``auth_cache_s`` (default 1 s) so that a request does not pay a
Redis round trip for them. Revocation stays immediate: ``revoke`` drops the key from this
process's cache and publishes its digest, and every replica's grant listener drops it too (and
its whole cache whenever it re-subscribes). Only if that message is lost can a revoked key still
be honoured, and then for at most ``auth_cache_s``. Unknown keys are never cached, so a new key
works at once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, cast

from redis.asyncio import Redis

from genmesh.protocol import OpenAIError

from ..redis.keys import API_KEY_TTL_S, REVOKED_TOMBSTONE_TTL_S, KeySpace

PRIORITY_NAMES = {"lowest": 0, "low": 2, "normal": 5, "high": 7, "highest": 9}


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant: str
    name: str = ""
    priority: int = 5
    max_priority: int = 5
    rpm: int = 0  # 0: unlimited
    tpm: int = 0
    max_concurrent: int = 0
    aspm: int = 0  # audio seconds per minute (transcribed or spoken; 0: unlimited)
    created: int = 0
    revoked: bool = False

    def to_redis(self) -> dict[str, str]:
        return {k: str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_redis(cls, raw: dict[Any, Any]) -> ApiKey:
        d = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
        return cls(
            key_id=d["key_id"],
            tenant=d["tenant"],
            name=d.get("name", ""),
            priority=int(d.get("priority", 5)),
            max_priority=int(d.get("max_priority", d.get("priority", 5))),
            rpm=int(d.get("rpm", 0)),
            tpm=int(d.get("tpm", 0)),
            max_concurrent=int(d.get("max_concurrent", 0)),
            aspm=int(d.get("aspm", 0)),
            created=int(d.get("created", 0)),
            revoked=d.get("revoked", "0") == "1",
        )

    def public(self) -> dict[str, Any]:
        return asdict(self)


ANONYMOUS = ApiKey(key_id="", tenant="anonymous", priority=5, max_priority=9)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def unauthorized(message: str, code: str = "invalid_api_key") -> OpenAIError:
    return OpenAIError(message, status=401, type="authentication_error", code=code)


def forbidden(message: str, code: str = "permission_denied") -> OpenAIError:
    return OpenAIError(message, status=403, type="permission_error", code=code)


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def check_admin(authorization: str | None, admin_key: str | None) -> None:
    if not admin_key:
        raise forbidden(
            "admin endpoints are disabled: set GENMESH_GATEWAY_ADMIN_KEY (or --admin-key-file)", code="admin_disabled"
        )
    token = bearer(authorization)
    if token is None or not hmac.compare_digest(token.encode(), admin_key.encode()):
        raise unauthorized("a valid admin key is required", code="invalid_admin_key")


class KeyStore:
    _MAX_CACHED = 10_000

    def __init__(self, redis: Redis, keyspace: KeySpace, cache_ttl_s: float = 0.0) -> None:
        self.redis = redis
        self.keyspace = keyspace
        self.cache_ttl_s = cache_ttl_s
        self._cache: dict[str, tuple[float, ApiKey]] = {}

    def forget(self, key_digest: str | None = None) -> None:
        """Drop one key (by digest) from the lookup cache, or all of them."""
        if key_digest is None:
            self._cache.clear()
        else:
            self._cache.pop(key_digest, None)

    async def create(
        self,
        tenant: str,
        *,
        name: str = "",
        priority: int = 5,
        max_priority: int | None = None,
        rpm: int = 0,
        tpm: int = 0,
        max_concurrent: int = 0,
        aspm: int = 0,
        ttl_s: int = API_KEY_TTL_S,
    ) -> tuple[str, ApiKey]:
        if not 0 <= priority <= 9 or not 0 <= (max_priority if max_priority is not None else priority) <= 9:
            raise ValueError("priorities are 0..9")
        secret = "gm-" + secrets.token_urlsafe(32)
        d = digest(secret)
        key = ApiKey(
            key_id=d[:12],
            tenant=tenant,
            name=name,
            priority=priority,
            max_priority=max(priority, max_priority if max_priority is not None else priority),
            rpm=rpm,
            tpm=tpm,
            max_concurrent=max_concurrent,
            aspm=aspm,
            created=int(time.time()),
        )
        index = self.keyspace.api_key_index()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keyspace.api_key(d), mapping=cast(Any, key.to_redis()))
            pipe.expire(self.keyspace.api_key(d), ttl_s)
            pipe.hset(index, key.key_id, d)
            pipe.expire(index, max(ttl_s, API_KEY_TTL_S), gt=True)
            pipe.expire(index, max(ttl_s, API_KEY_TTL_S), nx=True)
            await pipe.execute()
        return secret, key

    async def lookup(self, secret: str) -> ApiKey | None:
        d = digest(secret)
        if self.cache_ttl_s > 0:
            hit = self._cache.get(d)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
        raw = await self.redis.hgetall(self.keyspace.api_key(d))
        key = ApiKey.from_redis(raw) if raw else None
        if key is not None and self.cache_ttl_s > 0:
            if len(self._cache) >= self._MAX_CACHED:
                self._cache.clear()
            self._cache[d] = (time.monotonic() + self.cache_ttl_s, key)
        return key

    async def by_id(self, key_id: str) -> ApiKey | None:
        """The key with this public id (None: unknown or expired); ``""``: the anonymous tenant."""
        if not key_id:
            return ANONYMOUS
        d = await self.redis.hget(self.keyspace.api_key_index(), key_id)
        if d is None:
            return None
        raw = await self.redis.hgetall(self.keyspace.api_key(d.decode() if isinstance(d, bytes) else str(d)))
        return ApiKey.from_redis(raw) if raw else None

    async def list(self) -> list[ApiKey]:
        index: dict[Any, Any] = await self.redis.hgetall(self.keyspace.api_key_index())
        out = []
        for kid, d in sorted(index.items()):
            raw = await self.redis.hgetall(self.keyspace.api_key(d.decode() if isinstance(d, bytes) else d))
            if raw:
                out.append(ApiKey.from_redis(raw))
            else:
                await self.redis.hdel(self.keyspace.api_key_index(), kid)
        return out

    async def revoke(self, key_id: str) -> bool:
        d = await self.redis.hget(self.keyspace.api_key_index(), key_id)
        if d is None:
            return False
        key_digest = d.decode() if isinstance(d, bytes) else str(d)
        rkey = self.keyspace.api_key(key_digest)
        if not await self.redis.exists(rkey):
            return False
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(rkey, "revoked", "1")
            pipe.expire(rkey, REVOKED_TOMBSTONE_TTL_S)
            pipe.publish(self.keyspace.api_key_revocations(), key_digest)
            await pipe.execute()
        self.forget(key_digest)
        return True

    async def authenticate(self, authorization: str | None, required: bool) -> ApiKey:
        """The caller's key; with auth off, a missing or unknown key is the anonymous tenant."""
        token = bearer(authorization)
        if token is None:
            if required:
                raise unauthorized("missing API key: send 'Authorization: Bearer <key>'")
            return ANONYMOUS
        key = await self.lookup(token)
        if key is None:
            if required:
                raise unauthorized("invalid API key")
            return ANONYMOUS
        if key.revoked:
            raise unauthorized("this API key has been revoked", code="revoked_api_key")
        return key


def resolve_priority(key: ApiKey, header: str | None, default: int) -> int:
    """The key's priority, or the ``X-Priority`` header (0-9 or a name) when the key may use it."""
    base = key.priority if key.key_id else default
    if header is None or not header.strip():
        return base
    h = header.strip().lower()
    if h in PRIORITY_NAMES:
        value = PRIORITY_NAMES[h]
    elif h.isdigit() and 0 <= int(h) <= 9:
        value = int(h)
    else:
        raise OpenAIError(
            "X-Priority must be 0-9 or one of " + ", ".join(PRIORITY_NAMES),
            status=400,
            param="X-Priority",
            code="invalid_priority",
        )
    if value > key.max_priority:
        raise forbidden(f"this API key may not use priority above {key.max_priority}", code="priority_not_allowed")
    return value
