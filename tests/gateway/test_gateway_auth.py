"""API keys (missing, wrong, revoked), the admin endpoints and CLI, and per-key RPM/TPM/concurrency limits."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import httpx

from support.polling import wait_until


def _chat(gw: Any, helpers: Any, headers: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("one", **kw), headers=headers, timeout=30)


def test_missing_wrong_and_revoked_keys_are_refused(gw: Any, helpers: Any) -> None:
    key = gw.create_key("acme")
    missing = _chat(gw, helpers, {})
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "authentication_error"
    wrong = _chat(gw, helpers, helpers.auth("gm-not-a-key"))
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert _chat(gw, helpers, helpers.auth(key)).status_code == 200
    kid = next(k for k in _admin_list(gw, helpers) if k["tenant"] == "acme")["key_id"]
    r = httpx.delete(f"{gw.url}/admin/keys/{kid}", headers=helpers.auth(helpers.ADMIN_KEY), timeout=5)
    assert r.status_code == 200
    revoked = _chat(gw, helpers, helpers.auth(key))
    assert revoked.status_code == 401
    assert revoked.json()["error"]["code"] == "revoked_api_key"


def _admin_list(gw: Any, helpers: Any) -> list[dict[str, Any]]:
    r = httpx.get(gw.url + "/admin/keys", headers=helpers.auth(helpers.ADMIN_KEY), timeout=5)
    assert r.status_code == 200
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def test_admin_endpoints_need_the_admin_key(gw: Any, helpers: Any) -> None:
    key = gw.create_key()
    for headers in ({}, helpers.auth("nope"), helpers.auth(key)):
        r = httpx.get(gw.url + "/admin/keys", headers=headers, timeout=5)
        assert r.status_code == 401
        assert "admin" in r.json()["error"]["message"]


def test_keys_cli_create_list_revoke(gw: Any, helpers: Any, redis_server: Any) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "genmesh.gateway.api_keys_cli", "--redis-url", redis_server.url, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    made = cli("create", "--tenant", "cli-co", "--priority", "7", "--rpm", "100")
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert created["api_key"].startswith("gm-")
    assert (created["tenant"], created["priority"], created["rpm"]) == ("cli-co", 7, 100)
    # the secret itself is stored only hashed
    assert not any(created["api_key"].encode() in (gw.redis.dump(k) or b"") for k in gw.redis.keys("*"))
    listed = [json.loads(line) for line in cli("list").stdout.splitlines()]
    assert [k["key_id"] for k in listed] == [created["key_id"]]
    assert "api_key" not in listed[0]
    assert _chat(gw, helpers, helpers.auth(created["api_key"])).status_code == 200
    revoked = cli("revoke", created["key_id"], "--purge")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["deleted"] == {"files": 0, "batches": 0, "responses": 0}
    assert _chat(gw, helpers, helpers.auth(created["api_key"])).status_code == 401
    assert cli("revoke", "000000000000").returncode == 1


def _clear_of_the_minute_edge(gw: Any) -> None:
    """Per-key limits count in fixed one-minute windows of Redis time: a test that makes a few
    requests and expects the last to be refused starts at least 10 s before the window turns."""
    wait_until(lambda: int(gw.redis.time()[0]) % 60 < 50, timeout_s=15, interval_s=0.2, what="a fresh RPM window")


def test_requests_per_minute(gw: Any, helpers: Any) -> None:
    _clear_of_the_minute_edge(gw)
    key = gw.create_key(rpm=3)
    assert [_chat(gw, helpers, helpers.auth(key)).status_code for _ in range(3)] == [200, 200, 200]
    r = _chat(gw, helpers, helpers.auth(key))
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded_rpm"
    assert 1 <= int(r.headers["retry-after"]) <= 60
    other = gw.create_key(rpm=3)
    assert _chat(gw, helpers, helpers.auth(other)).status_code == 200  # limits are per key


def test_tokens_per_minute(gw: Any, helpers: Any) -> None:
    _clear_of_the_minute_edge(gw)
    key = gw.create_key(tpm=20)
    first = _chat(gw, helpers, helpers.auth(key), max_tokens=10)  # 5 prompt + 10 completion = 15
    assert first.status_code == 200
    assert first.json()["usage"]["total_tokens"] == 15
    second = _chat(gw, helpers, helpers.auth(key), max_tokens=10)  # allowed: 15 < 20 before it ran
    assert second.status_code == 200

    def third() -> httpx.Response:
        return _chat(gw, helpers, helpers.auth(key), max_tokens=1)

    r = third()
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limit_exceeded_tpm"
    assert "retry-after" in r.headers


def test_admin_lists_and_purges_what_a_key_and_a_tenant_store(gw: Any, helpers: Any, redis_server: Any) -> None:
    admin = helpers.auth(helpers.ADMIN_KEY)
    hoarder, neighbour = gw.create_key("hoarder"), gw.create_key("neighbour")
    kid = next(k for k in _admin_list(gw, helpers) if k["tenant"] == "hoarder")["key_id"]
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": helpers.chat("one")}

    def upload(secret: str, name: str) -> str:
        files = {"file": (name, json.dumps(line).encode() + b"\n")}
        r = httpx.post(gw.url + "/v1/files", files=files, data={"purpose": "batch"}, headers=helpers.auth(secret))
        assert r.status_code == 200, r.text
        return str(r.json()["id"])

    ids = [upload(hoarder, f"in{i}.jsonl") for i in range(2)]
    kept = upload(neighbour, "theirs.jsonl")
    body = {"input_file_id": ids[0], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = httpx.post(gw.url + "/v1/batches", json=body, headers=helpers.auth(hoarder), timeout=30).json()["id"]

    def ended() -> bool:
        r = httpx.get(f"{gw.url}/v1/batches/{batch}", headers=helpers.auth(hoarder), timeout=10)
        return r.json()["status"] in ("completed", "failed")

    wait_until(ended, 60, what="the batch to end")
    # a stored /v1/responses response, seeded as the response store keeps one (the fake upstream serves no
    # /v1/responses); the key's own GET finds it, as it would a real one
    response_id = "resp_" + uuid.uuid4().hex
    record = {"response": {"id": response_id, "object": "response", "output": []}, "input": []}
    gw.redis.hset(f"genmesh:gw:resp:{response_id}", mapping={"owner": kid, "record": json.dumps(record)})
    gw.redis.pexpire(f"genmesh:gw:resp:{response_id}", 600_000)
    mine = httpx.get(f"{gw.url}/v1/responses/{response_id}", headers=helpers.auth(hoarder), timeout=10)
    assert mine.status_code == 200, mine.text

    url = f"{gw.url}/admin/keys/{kid}/storage"
    assert httpx.get(url, headers=helpers.auth(hoarder), timeout=10).status_code == 401
    listed = httpx.get(url, headers=admin, timeout=10).json()
    assert listed["files"]["count"] >= 3  # the two uploads and the batch's output
    assert set(ids) <= {f["id"] for f in listed["files"]["data"]}
    assert [b["id"] for b in listed["batches"]["data"]] == [batch]
    assert listed["responses"]["data"] == [response_id]

    revoked = httpx.delete(f"{gw.url}/admin/keys/{kid}", params={"purge": "true"}, headers=admin, timeout=30)
    assert revoked.status_code == 200, revoked.text
    deleted = revoked.json()["deleted"]
    assert (deleted["batches"], deleted["responses"]) == (1, 1)
    assert deleted["files"] == listed["files"]["count"]
    after = httpx.get(url, headers=admin, timeout=10).json()
    assert (after["files"]["count"], after["batches"]["count"], after["responses"]["count"]) == (0, 0, 0)
    assert httpx.get(f"{gw.url}/v1/responses/{response_id}", headers=admin, timeout=10).status_code in (401, 404)
    assert not gw.redis.exists(f"genmesh:gw:resp:{response_id}")
    left = [k.decode() for k in gw.redis.scan_iter(f"*{{k:{kid}}}:*", count=1000)]
    assert [k for k in left if ":file" in k or ":batch" in k] == []
    # the other tenant's file is untouched; then the tenant endpoint purges it
    assert httpx.get(f"{gw.url}/v1/files/{kept}", headers=helpers.auth(neighbour), timeout=10).status_code == 200
    tenant = httpx.delete(f"{gw.url}/admin/tenants/neighbour/storage", headers=admin, timeout=30)
    assert [d["files"] for d in tenant.json()["deleted"].values()] == [1]
    assert httpx.get(f"{gw.url}/v1/files/{kept}", headers=helpers.auth(neighbour), timeout=10).status_code == 404
    assert httpx.get(f"{gw.url}/admin/keys/bad*id/storage", headers=admin, timeout=10).status_code in (400, 422)
