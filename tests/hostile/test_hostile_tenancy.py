"""One tenant can never exhaust what every tenant shares (issue 41): each abuse runs against a real
mesh (a gateway with API keys on -> microservice -> the real engine serving the chat and the
embedding model) on a real Redis under ``maxmemory`` with ``noeviction``, as the shipped ones run,
while another tenant keeps sending interactive requests. For each abuse:

- the abuse gets its 4xx (never a 5xx);
- Redis stays under its budget: it never refused a write (no ``OOM`` error) and its peak memory
  stays below ``maxmemory``;
- the gateway's peak RSS (``VmHWM``) stays under ``RSS_BOUND``;
- the other tenant is served throughout: 0 errors, 0 503s (its latency is in the summary);
- no process restarts (the gateway, microservice and Redis are the ones started).

``make test`` runs the bounded form (small files, a 5 MiB line, 256-input embeddings lines);
``make fuzz`` (``GENMESH_FUZZ=full``) the full one: twelve 100 MiB uploads on the shipped 2 GiB
budget, a 42 MB line, 2,048-input replies and a batch whose output would be about 1 GB."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.alongside import requests_alongside
from support.batches import chat_line, client, create_key, jsonl, read_lines, usage, wait_for
from support.embeddings_mesh import Mesh, both_models
from support.gateway_helpers import ADMIN_KEY, RedisServer, launch_gateway
from support.hostile import FULL, record
from support.servers import EMBEDDING_NAME, MODEL_NAME, Server, free_port
from support.unharmed import peak_rss

MIB = 1024 * 1024
MAXMEMORY = (2048 if FULL else 192) * MIB  # the shipped 2gb in the full form
HEADROOM = (256 if FULL else 48) * MIB
KEY_BYTES = (512 if FULL else 12) * MIB
TOTAL_BYTES = (1536 if FULL else 64) * MIB
OUTPUT_BYTES = (128 if FULL else 4) * MIB
UPLOAD = (100 if FULL else 2) * MIB  # one upload of the storage abuse
LINE = 42_000_000 if FULL else 5 * MIB  # the oversized batch line
WIDE = 2048 if FULL else 600  # inputs of one wide embeddings request (600 floats: about 4.8 MB of reply)
FLOOD_INPUTS, FLOOD_LINES = (2048, 64) if FULL else (256, 6)  # the output flood: ~1 GB / ~12 MB of output
RSS_BOUND = (1024 if FULL else 512) * MIB
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Tenancy:
    gateway: Server
    microservice: Server
    redis: RedisServer
    other: str  # the other tenant's key
    pids: tuple[int, ...] = ()
    latencies: dict[str, list[float]] = field(default_factory=dict)

    def auth(self, secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def key(self, tenant: str, **limits: Any) -> tuple[str, str]:
        return create_key(self.gateway.url, tenant, **limits)


@pytest.fixture(scope="module")
def tenancy(embeddings_mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    logs: Path = tmp_path_factory.mktemp("tenancy")
    extra = ("--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction")
    redis = RedisServer(free_port(), tmp_path_factory.mktemp("tenancy-redis"), extra=extra)
    redis.start()
    ms = embeddings_mesh.microservice
    config = logs / "gateway.yaml"
    config.write_text(yaml.safe_dump({"models": both_models(ms.url)}))
    flags = {
        "--files-chunk-bytes": 256 * 1024,
        "--storage-headroom-bytes": HEADROOM,
        "--files-key-max-bytes": KEY_BYTES,
        "--files-total-max-bytes": TOTAL_BYTES,
        "--files-max-concurrent": 2,
        "--batch-output-max-bytes": OUTPUT_BYTES,
        "--batch-max-active-per-key": 2,
        "--batch-queue-max-lines": 100,
        "--responses-key-max-count": 3,
        "--batch-concurrency": 2,
        "--batch-slot-share": 1,
    }
    argv = [str(x) for pair in flags.items() for x in pair]
    gateway = launch_gateway(logs, config, redis.url, "--auth", "on", *argv)
    try:
        other, _ = create_key(gateway.url, "other")
        assert redis.proc is not None
        yield Tenancy(gateway, ms, redis, other, (gateway.proc.pid, ms.proc.pid, redis.proc.pid))
    finally:
        gateway.stop()
        redis.stop()


@contextmanager
def abuse(t: Tenancy, name: str) -> Iterator[None]:
    """Run the abuse in the block while the other tenant sends interactive chat requests one after
    another; then check the bounds and record the figures."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    with requests_alongside(t.gateway.url + "/v1/chat/completions", body, t.auth(t.other), timeout_s=60) as other:
        yield
    seen = other.latencies_ms
    rc = t.redis.client()
    mem, stats = rc.info("memory"), rc.info("errorstats")
    assert "errorstat_OOM" not in stats, f"Redis refused a write during {name}: {stats}"
    assert int(mem["used_memory_peak"]) < MAXMEMORY
    rss = peak_rss(t.gateway.proc.pid)
    assert rss < RSS_BOUND, f"gateway peak RSS {rss / MIB:.0f} MiB during {name}"
    now = (t.gateway.proc.pid, t.microservice.proc.pid, t.redis.proc.pid if t.redis.proc else 0)
    assert now == t.pids
    assert all(p.poll() is None for p in (t.gateway.proc, t.microservice.proc))
    record(f"{name}: other tenant p50 ms", "gateway", statistics.median(seen))
    record(f"{name}: other tenant max ms", "gateway", max(seen), f"{len(seen)} requests, 0 errors")
    record(f"{name}: gateway peak RSS MiB", "gateway", rss / MIB, f"< {RSS_BOUND // MIB}")
    record(f"{name}: Redis peak MiB", "redis", int(mem["used_memory_peak"]) / MIB, f"< {MAXMEMORY // MIB}")


def _refused(r: httpx.Response, status: int, code: str, *named: str) -> dict[str, Any]:
    assert r.status_code == status, r.text[:500]
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == code, err
    for word in named:
        assert word in err["message"], err
    if status in (429, 503, 507):
        assert int(r.headers["retry-after"]) >= 1
    return err


def _upload(t: Tenancy, secret: str, data: bytes, timeout_s: float = 300) -> httpx.Response:
    files = {"file": ("in.jsonl", data)}
    return httpx.post(
        t.gateway.url + "/v1/files", headers=t.auth(secret), files=files, data={"purpose": "batch"}, timeout=timeout_s
    )


def _filler(size: int) -> bytes:
    line = b'{"custom_id": "x", "pad": "' + b"x" * 4000 + b'"}\n'
    return line * (size // len(line))


def _purge(t: Tenancy, key_id: str) -> None:
    r = httpx.delete(f"{t.gateway.url}/admin/keys/{key_id}/storage", headers=ADMIN, timeout=120)
    assert r.status_code == 200, r.text


def test_uploads_stop_at_the_key_quota_and_the_total_budget(tenancy: Tenancy) -> None:
    t = tenancy
    hog, hog_id = t.key("hog")
    data = _filler(UPLOAD)
    kept: list[str] = []
    with abuse(t, "uploads to the key quota"):
        for _ in range(KEY_BYTES // len(data) + 2):
            r = _upload(t, hog, data)
            if r.status_code != 200:
                break
            kept.append(r.json()["id"])
        _refused(r, 413, "quota_exceeded", "files_key_max_bytes")
    assert len(kept) == KEY_BYTES // len(data)
    # more keys of one tenant: the total quota (or, first, Redis' budget) stops them all
    extra: list[str] = []
    with abuse(t, "uploads to the total budget"):
        refused = None
        for _i in range(TOTAL_BYTES // KEY_BYTES + 2):
            secret, key_id = t.key("hog")
            extra.append(key_id)
            for _ in range(KEY_BYTES // len(data)):
                r = _upload(t, secret, data)
                if r.status_code != 200:
                    refused = r
                    break
            if refused is not None:
                break
        assert refused is not None, "nothing stopped the uploads"
        err = _refused(refused, 507, "storage_full")
        assert "files_total_max_bytes" in err["message"] or "storage_headroom_bytes" in err["message"]
    listed = httpx.get(t.gateway.url + "/v1/files", headers=t.auth(hog), timeout=30).json()["data"]
    assert {f["id"] for f in listed} == set(kept)  # nothing stored was harmed
    for key_id in (hog_id, *extra):  # the operator cleans up
        _purge(t, key_id)
    assert httpx.get(t.gateway.url + "/v1/files", headers=t.auth(hog), timeout=30).json()["data"] == []


def test_parallel_uploads_past_the_concurrency_bound_are_refused_or_served(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("burst")
    data = _filler(min(UPLOAD, KEY_BYTES // 8))
    results: list[httpx.Response] = []
    with abuse(t, "8 uploads at once"):
        threads = [threading.Thread(target=lambda: results.append(_upload(t, secret, data))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    assert len(results) == 8
    for r in results:  # each stored, or refused at once with Retry-After
        if r.status_code != 200:
            assert r.status_code == 429, r.text[:300]
            assert int(r.headers["retry-after"]) >= 1
            assert "files_max_concurrent" in r.json()["error"]["message"]
    assert any(r.status_code == 200 for r in results)
    _purge(t, key_id)


def test_an_oversized_batch_line_is_refused_at_validation_with_its_number(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("long-line")
    sdk = client(t.gateway.url, secret)
    data = jsonl([chat_line("ok"), chat_line("big", content="a" * LINE)])
    with abuse(t, f"a {LINE / 1e6:.0f} MB batch line"):
        f = sdk.files.create(file=("in.jsonl", data), purpose="batch")
        batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data
    assert [(e.line, e.code) for e in batch.errors.data] == [(2, "line_too_large")]
    _purge(t, key_id)


def test_wide_and_deep_interactive_bodies_get_their_4xx(tenancy: Tenancy) -> None:
    t = tenancy
    secret, _ = t.key("shapes")
    wide = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "x": [' % MODEL_NAME.encode()
    wide += b",".join([b"{}"] * ((4 * MIB - len(wide) - 16) // 3)) + b"]}"
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with abuse(t, "wide and deep bodies"):
        for body, why in ((wide, "arrays and objects"), (deep, "")) * 3:
            r = httpx.post(
                t.gateway.url + "/v1/chat/completions",
                content=body,
                headers={**t.auth(secret), "Content-Type": "application/json"},
                timeout=60,
            )
            assert 400 <= r.status_code < 500, r.text[:300]
            assert why in r.json()["error"]["message"]  # the wide one refused before it is parsed


def test_a_reply_of_any_size_is_charged_its_usage(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("wide")
    inputs = [f"sentence number {i} of the wide request" for i in range(WIDE)]
    with abuse(t, f"{WIDE}-input embeddings"):
        r = httpx.post(
            t.gateway.url + "/v1/embeddings",
            json={"model": EMBEDDING_NAME, "input": inputs, "encoding_format": "float"},
            headers=t.auth(secret),
            timeout=600,
        )
    assert r.status_code == 200, r.text[:300]
    assert len(r.content) > 4 * MIB  # past what the relay parses whole
    used = r.json()["usage"]["prompt_tokens"]
    assert used > WIDE
    got = usage(t.gateway.url, key_id)
    assert (got["requests"], got["prompt_tokens"]) == (1, used)


def test_an_output_flood_fails_at_its_quota_with_the_lines_done_kept(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("flood")
    sdk = client(t.gateway.url, secret)
    inputs = [f"flood sentence {i}" for i in range(FLOOD_INPUTS)]
    body = {"model": EMBEDDING_NAME, "input": inputs, "encoding_format": "float"}
    lines = [
        {"custom_id": f"f{i}", "method": "POST", "url": "/v1/embeddings", "body": body} for i in range(FLOOD_LINES)
    ]
    with abuse(t, "an output flood"):
        f = sdk.files.create(file=("flood.jsonl", jsonl(lines)), purpose="batch")
        batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
        done = wait_for(sdk, batch.id, 1800 if FULL else 300)
    assert done.status == "failed", done
    assert done.errors is not None
    assert done.errors.data
    assert done.errors.data[0].code == "quota_exceeded"
    assert "batch_output_max_bytes" in (done.errors.data[0].message or "")
    out = read_lines(sdk, done.output_file_id)
    assert 1 <= len(out) < FLOOD_LINES  # the lines done before the quota are kept
    assert sdk.files.retrieve(done.output_file_id).bytes <= OUTPUT_BYTES
    used = sum(o["response"]["body"]["usage"]["prompt_tokens"] for o in out)
    assert usage(t.gateway.url, key_id)["prompt_tokens"] >= used  # each line charged (refused ones too)
    _purge(t, key_id)


def test_unknown_models_cost_the_key_and_add_no_label(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("labels", rpm=50)
    sdk = client(t.gateway.url, secret)
    n = 2000 if FULL else 200
    lines = [
        {"custom_id": f"u{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": f"made-up-{i}"}}
        for i in range(n)
    ]
    with abuse(t, f"{n} made-up models"):
        f = sdk.files.create(file=("labels.jsonl", jsonl(lines)), purpose="batch")
        batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data[0].code == "model_not_found"
    # the refused lines filled the key's RPM window: its next request waits its turn
    r = httpx.post(
        t.gateway.url + "/v1/embeddings", json={"model": EMBEDDING_NAME, "input": "x"}, headers=t.auth(secret)
    )
    assert r.status_code == 429, r.text[:300]
    assert int(r.headers["retry-after"]) >= 1
    assert "made-up-" not in httpx.get(t.gateway.url + "/metrics", timeout=30).text  # no label of theirs
    _purge(t, key_id)


def test_batches_in_progress_and_enqueued_lines_are_capped(tenancy: Tenancy) -> None:
    t = tenancy
    secret, key_id = t.key("many-batches")
    sdk = client(t.gateway.url, secret)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 16}
    lines = [{"custom_id": f"b{i}", "method": "POST", "url": "/v1/chat/completions", "body": body} for i in range(60)]
    f = sdk.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    create = {"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    url, headers = t.gateway.url + "/v1/batches", t.auth(secret)
    with abuse(t, "batch after batch"):
        first = httpx.post(url, json=create, headers=headers, timeout=60)
        assert first.status_code == 200, first.text
        # 60 + 60 lines of one model: past --batch-queue-max-lines 100
        _refused(httpx.post(url, json=create, headers=headers, timeout=60), 429, "quota_exceeded", "queue-max-lines")
        few = sdk.files.create(file=("few.jsonl", jsonl(lines[:10])), purpose="batch")
        second = httpx.post(url, json=create | {"input_file_id": few.id}, headers=headers, timeout=60)
        assert second.status_code == 200, second.text
        third = httpx.post(url, json=create | {"input_file_id": few.id}, headers=headers, timeout=60)
        _refused(third, 429, "quota_exceeded", "--batch-max-active-per-key 2")
        for made in (first, second):
            sdk.batches.cancel(made.json()["id"])
    for made in (first, second):
        assert wait_for(sdk, made.json()["id"], 120).status == "cancelled"
    _purge(t, key_id)


def test_stored_responses_are_capped_per_key(tenancy: Tenancy) -> None:
    t = tenancy
    secret, _ = t.key("responses")
    body = {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 2, "store": True}
    with abuse(t, "stored responses"):
        made = [
            httpx.post(t.gateway.url + "/v1/responses", json=body, headers=t.auth(secret), timeout=120)
            for _ in range(4)
        ]
    assert [r.status_code for r in made[:3]] == [200, 200, 200], [r.text[:200] for r in made]
    err = made[3].json()["error"]
    assert 400 <= made[3].status_code < 500
    assert err["code"] == "quota_exceeded"
    assert "responses_key_max_count" in err["message"]
    for r in made[:3]:  # nothing stored was harmed
        got = httpx.get(f"{t.gateway.url}/v1/responses/{r.json()['id']}", headers=t.auth(secret), timeout=30)
        assert got.status_code == 200, got.text
