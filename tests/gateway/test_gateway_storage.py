"""Files in bounded chunks, the storage quotas and the Redis budget: real gateways on a real Redis
started with ``maxmemory`` and ``noeviction``, as the shipped ones are.

The interactive requests of the "other tenant" go to the fake upstream (this module is about what the
gateway stores, not about the engine); the batch tests of the same quotas run on the real engine in
test_gateway_batch.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from genmesh.gateway.admission.quotas import Quotas, StorageBounds, storage_bounds
from genmesh.gateway.redis.keys import KeySpace
from genmesh.gateway.redis.scripts import source
from genmesh.gateway.settings import GatewaySettings
from genmesh.protocol import OpenAIError
from support.batches import chat_line, create_key, jsonl
from support.gateway_helpers import RedisServer, chat, model_config
from support.servers import MODEL_NAME, Server, free_port

CHUNK = 64 * 1024
MAXMEMORY = 96 * 1024 * 1024
KS = KeySpace()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of this module's own, with the shipped memory policy."""
    extra = ("--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction")
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"), extra=extra)
    server.start()
    yield server
    server.stop()


def _start(start_gateway: Any, upstream: Server, *flags: str) -> Any:
    models = {MODEL_NAME: model_config(upstream.url, max_concurrency=4)}
    if "--storage-headroom-bytes" not in flags:  # the default (256 MiB) is for the shipped 2 GiB Redis
        flags = (*flags, "--storage-headroom-bytes", str(16 * 1024 * 1024))
    return start_gateway(models, "--auth", "on", "--files-chunk-bytes", str(CHUNK), *flags)


def _data(size: int) -> bytes:
    """A JSONL file of exactly ``size`` bytes (lines of about 1 KB)."""
    out = bytearray()
    i = 0
    while len(out) < size:
        line = b'{"custom_id": "r%d", "pad": "' % i + b"x" * 1000 + b'"}\n'
        out += line
        i += 1
    del out[size - 1 :]
    return bytes(out) + b"\n"


def _upload(url: str, secret: str, data: bytes) -> httpx.Response:
    return httpx.post(
        url + "/v1/files",
        headers={"Authorization": f"Bearer {secret}"},
        files={"file": ("in.jsonl", data)},
        data={"purpose": "batch"},
        timeout=60,
    )


def _download(url: str, secret: str, file_id: str) -> bytes:
    r = httpx.get(f"{url}/v1/files/{file_id}/content", headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.content


def _refused(r: httpx.Response, status: int, code: str, *named: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    for word in named:
        assert word in err["message"]
    if status in (429, 503, 507):
        assert int(r.headers["retry-after"]) >= 1


def _served(url: str, secret: str) -> None:
    """Another tenant's interactive request is answered."""
    r = httpx.post(url + "/v1/chat/completions", json=chat(MODEL_NAME), headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 200, r.text


def test_a_file_of_many_chunks_round_trips_byte_exact(
    start_gateway: Any, fake_upstream: Server, redis_server: RedisServer
) -> None:
    gw = _start(start_gateway, fake_upstream)
    secret, key_id = create_key(gw.url, "chunks")
    data = _data(3 * CHUNK + 123)
    r = _upload(gw.url, secret, data)
    assert r.status_code == 200, r.text
    obj = r.json()
    assert obj["bytes"] == len(data)
    rc = redis_server.client()
    meta, body = KS.file(key_id, obj["id"])
    assert rc.type(body) == b"list"
    assert [len(p) for p in rc.lrange(body, 0, -1)] == [CHUNK, CHUNK, CHUNK, 123]
    assert rc.hmget(meta, ["bytes", "chunks"]) == [str(len(data)).encode(), b"4"]
    assert rc.pttl(body) > 0
    assert rc.pttl(meta) > 0
    with httpx.stream(
        "GET", f"{gw.url}/v1/files/{obj['id']}/content", headers={"Authorization": f"Bearer {secret}"}
    ) as resp:
        assert resp.headers["content-length"] == str(len(data))
        got = b"".join(resp.iter_raw())
    assert got == data
    z, h = KS.file_quota(key_id)
    assert rc.hget(h, "#") == str(len(data)).encode()
    assert rc.zcard(z) == 1
    r = httpx.delete(f"{gw.url}/v1/files/{obj['id']}", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 200, r.text
    assert rc.exists(z, h) == 0  # the last file gone: its bytes given back, no empty ledger left behind
    assert rc.exists(meta, body) == 0
    assert rc.zscore(KS.storage_quota()[0], f"{key_id}|{obj['id']}") is None


def test_file_quotas_refuse_before_storing_and_harm_nothing(
    start_gateway: Any, fake_upstream: Server, redis_server: RedisServer
) -> None:
    flags = ("--files-key-max-count", "2", "--files-key-max-bytes", "300000", "--files-total-max-bytes", "700000")
    gw = _start(start_gateway, fake_upstream, *flags)
    a, _ = create_key(gw.url, "a")
    b, _ = create_key(gw.url, "b")
    c, _ = create_key(gw.url, "c")
    other, _ = create_key(gw.url, "other")
    kept = _data(100_000)
    f1 = _upload(gw.url, a, kept).json()["id"]
    f2 = _upload(gw.url, a, _data(100_000)).json()["id"]
    _refused(_upload(gw.url, a, _data(1000)), 413, "quota_exceeded", "files_key_max_count", "2")
    _served(gw.url, other)
    assert httpx.delete(f"{gw.url}/v1/files/{f2}", headers={"Authorization": f"Bearer {a}"}).status_code == 200
    _refused(_upload(gw.url, a, _data(250_000)), 413, "quota_exceeded", "files_key_max_bytes", "300000")
    assert _upload(gw.url, b, _data(250_000)).status_code == 200
    assert _upload(gw.url, c, _data(250_000)).status_code == 200  # 600,000 bytes in all
    _refused(_upload(gw.url, c, _data(200_000)), 507, "storage_full", "files_total_max_bytes", "700000")
    _served(gw.url, other)
    assert _download(gw.url, a, f1) == kept  # nothing stored was harmed
    listed = httpx.get(gw.url + "/v1/files", headers={"Authorization": f"Bearer {a}"}).json()["data"]
    assert [f["id"] for f in listed] == [f1]
    assert redis_server.client().info("memory")["used_memory"] < MAXMEMORY


def test_the_redis_budget_keeps_headroom_below_maxmemory(
    start_gateway: Any, fake_upstream: Server, redis_server: RedisServer
) -> None:
    rc = redis_server.client()
    used = int(rc.info("memory")["used_memory"])
    headroom = MAXMEMORY - used - 3 * 1024 * 1024  # about 3 MiB of room for stored bytes
    gw = _start(start_gateway, fake_upstream, "--storage-headroom-bytes", str(headroom))
    secret, _ = create_key(gw.url, "budget")
    other, _ = create_key(gw.url, "other")
    first = _data(1024 * 1024)
    r = _upload(gw.url, secret, first)
    assert r.status_code == 200, r.text
    _refused(_upload(gw.url, secret, _data(4 * 1024 * 1024)), 507, "storage_full", "storage_headroom_bytes")
    _served(gw.url, other)
    assert _download(gw.url, secret, r.json()["id"]) == first
    assert int(rc.info("memory")["used_memory"]) < MAXMEMORY - headroom + 1024 * 1024


def test_a_batch_redis_lost_is_a_404_and_never_recreated(
    start_gateway: Any, fake_upstream: Server, redis_server: RedisServer
) -> None:
    gw = _start(start_gateway, fake_upstream)
    secret, key_id = create_key(gw.url, "lost")
    rc = redis_server.client()
    keys = KS.batch(key_id, "batch_lost")
    line_done = rc.register_script(source("line_done"))
    # a line finishing after Redis lost its batch writes nothing, so nothing is left without a TTL
    line_done(keys=keys.all(), args=[0, "o", b'{"x": 1}', MODEL_NAME, 10**9, 0, "[]"])
    assert rc.exists(*keys.all()) == 0
    rc.hset(keys.meta, mapping={"completed": 3, "d:x": 1})  # what the old line_done left behind
    rc.pexpire(keys.meta, 60_000)
    r = httpx.get(gw.url + "/v1/batches/batch_lost", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "batch_not_found"


def test_uploads_past_the_concurrency_bound_get_429() -> None:
    quotas = Quotas(store=None, settings=GatewaySettings(files_max_concurrent=2))  # type: ignore[arg-type]

    async def run() -> OpenAIError:
        async with quotas.slot(), quotas.slot():
            with pytest.raises(OpenAIError) as caught:
                async with quotas.slot():
                    pass
        async with quotas.slot(), quotas.slot():  # both given back
            pass
        return caught.value

    err = asyncio.run(run())
    assert err.status == 429
    assert err.headers["Retry-After"] == "1"
    assert "files_max_concurrent" in err.message


def test_enqueued_lines_per_model_are_capped_before_lines_are_copied_in(
    start_gateway: Any, fake_upstream: Server, redis_server: RedisServer
) -> None:
    gw = _start(start_gateway, fake_upstream, "--batch-queue-max-lines", "2")
    secret, _ = create_key(gw.url, "queue")
    headers = {"Authorization": f"Bearer {secret}"}
    three = _upload(gw.url, secret, jsonl(chat_line(f"q{i}", model=MODEL_NAME) for i in range(3))).json()["id"]
    body = {"input_file_id": three, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    r = httpx.post(gw.url + "/v1/batches", json=body, headers=headers, timeout=30)
    _refused(r, 429, "quota_exceeded", "--batch-queue-max-lines 2", MODEL_NAME)
    listed = httpx.get(gw.url + "/v1/batches", headers=headers).json()["data"]
    assert listed == []  # nothing was created, no line copied in
    two = _upload(gw.url, secret, jsonl(chat_line(f"t{i}", model=MODEL_NAME) for i in range(2))).json()["id"]
    r = httpx.post(gw.url + "/v1/batches", json=body | {"input_file_id": two}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text


def test_the_batch_room_script_sums_batches_in_progress_and_drops_ended_ones(redis_server: RedisServer) -> None:
    rc = redis_server.client()
    room = rc.register_script(source("batch_room"))
    active, queued = KS.active_batches_of("room"), KS.queued_lines_of("room")
    rc.delete(active, queued)
    far = 2**50
    rc.zadd(active, {"b1": far, "b2": far})
    rc.hset(queued, mapping={"b1|m": 3, "b2|m": 4, "b2|n": 1, "gone|m": 100})  # 'gone' has ended
    rc.pexpire(queued, 60_000)
    rc.pexpire(active, 60_000)
    assert room(keys=[active, queued], args=[10, 10, "m", 3]) == [0]  # 7 + 3: at the cap, not past it
    assert rc.hexists(queued, "gone|m") == 0  # the ended batch's lines no longer count
    assert room(keys=[active, queued], args=[10, 10, "n", 1, "m", 4]) == [2, b"m"]
    assert room(keys=[active, queued], args=[2, 10, "x", 1]) == [1]  # two batches in progress already
    assert room(keys=[active, queued], args=[10, 0, "m", 10**6]) == [0]  # 0: no queue cap
    rc.zrem(active, "b2")
    assert room(keys=[active, queued], args=[10, 10, "m", 7]) == [0]


def test_unset_storage_bounds_are_derived_from_maxmemory() -> None:
    """Headroom a quarter of maxmemory (at most 256 MiB), the files of all keys 6/7 of the rest, one
    key's a third of those; what an operator sets stands."""
    mib = 1024 * 1024
    unset = GatewaySettings()
    assert storage_bounds(unset, 2048 * mib) == StorageBounds(256 * mib, 1536 * mib, 512 * mib)  # the shipped Redis
    small = storage_bounds(unset, 256 * mib)
    assert small.headroom == 64 * mib
    assert small.total == 192 * mib * 6 // 7
    assert small.per_key == small.total // 3
    assert small.headroom + small.total < 256 * mib
    assert storage_bounds(unset, 0) == StorageBounds(0, 1536 * mib, 512 * mib)  # no maxmemory: no budget check
    chosen = GatewaySettings(storage_headroom_bytes=mib, files_total_max_bytes=0, files_key_max_bytes=5 * mib)
    assert storage_bounds(chosen, 256 * mib) == StorageBounds(mib, 0, 5 * mib)


def test_default_bounds_fit_a_small_redis(start_gateway: Any, fake_upstream: Server, redis_server: RedisServer) -> None:
    """On this module's 96 MiB Redis with no storage flag, uploads are served (a fixed 256 MiB headroom
    refused every one with 507) and one key's quota is its derived share (20.6 MiB), a 413 past it."""
    gw = start_gateway({MODEL_NAME: model_config(fake_upstream.url)}, "--auth", "on")
    secret, _ = create_key(gw.url, "derived")
    data = _data(1024 * 1024)
    r = _upload(gw.url, secret, data)
    assert r.status_code == 200, r.text
    per_key = storage_bounds(GatewaySettings(), MAXMEMORY).per_key
    _refused(_upload(gw.url, secret, _data(per_key)), 413, "quota_exceeded", "files_key_max_bytes", str(per_key))
    assert _download(gw.url, secret, r.json()["id"]) == data
