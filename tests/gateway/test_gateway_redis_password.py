"""Redis with a password, as compose runs it: the gateway takes it from REDIS_URL; a wrong one is a
503 with Retry-After (the store is unavailable to it), never a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from support.servers import free_port


def test_the_gateway_uses_the_password_in_redis_url(
    helpers: Any, tmp_path: Path, fake: Any, start_gateway: Any
) -> None:
    redis = helpers.RedisServer(free_port(), tmp_path, password="s3cret:pass/word")
    redis.start()
    try:
        models = {"m": helpers.model_config(fake.url)}
        good = start_gateway(models, "--auth", "off", redis_url=redis.url)
        r = httpx.post(good.url + "/v1/chat/completions", json=helpers.chat("m"), timeout=30)
        assert r.status_code == 200, r.text
        assert httpx.get(good.url + "/ready", timeout=10).json()["redis"] is True
        wrong = redis.url.replace("s3cret", "wrong")
        bad = start_gateway(models, "--auth", "off", redis_url=wrong)
        r = httpx.post(bad.url + "/v1/chat/completions", json=helpers.chat("m"), timeout=30)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"]
        assert r.json()["error"]["code"] == "queue_store_unavailable"
        assert "s3cret" not in r.text
        assert "wrong" not in r.text
    finally:
        redis.stop()
