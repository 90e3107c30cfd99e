"""Batch API test helpers: JSONL input files, polling a batch to its end, reading its files."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import httpx
import openai

from support.gateway_helpers import ADMIN_KEY
from support.servers import MODEL_NAME

TERMINAL = ("completed", "failed", "expired", "cancelled")


def chat_line(custom_id: str, content: str = "Say hi.", max_tokens: int = 4, **body: Any) -> dict[str, Any]:
    request = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": {**request, **body}}


def jsonl(lines: Iterable[dict[str, Any] | str]) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def create_key(url: str, tenant: str, **fields: Any) -> tuple[str, str]:
    """A new API key on the gateway at ``url``: (secret, key id)."""
    r = httpx.post(
        url + "/admin/keys",
        json={"tenant": tenant, **fields},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["api_key"], r.json()["key_id"]


def usage(url: str, key_id: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/admin/keys/{key_id}/usage", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def client(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def submit(sdk: openai.OpenAI, lines: Iterable[dict[str, Any] | str]) -> Any:
    """Upload ``lines`` and start a chat batch on them: the Batch as created."""
    f = sdk.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    return sdk.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")


def wait_for(sdk: openai.OpenAI, batch_id: str, timeout_s: float, statuses: tuple[str, ...] = TERMINAL) -> Any:
    """Poll the batch until its status is one of ``statuses``; fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            batch = sdk.batches.retrieve(batch_id)
        except (openai.APIConnectionError, openai.InternalServerError):  # a replica or Redis away for a moment
            batch = None
        if batch is not None and batch.status in statuses:
            return batch
        assert time.monotonic() < deadline, f"batch {batch_id} not {statuses} after {timeout_s} s: {batch}"
        time.sleep(0.2)


def wait_done(sdk: openai.OpenAI, batch_id: str, n: int, timeout_s: float) -> Any:
    """Poll until at least ``n`` lines of the batch are done."""
    deadline = time.monotonic() + timeout_s
    while True:
        batch = sdk.batches.retrieve(batch_id)
        counts = batch.request_counts
        if counts is not None and counts.completed + counts.failed >= n:
            return batch
        assert time.monotonic() < deadline, f"batch {batch_id}: fewer than {n} lines done after {timeout_s} s: {batch}"
        time.sleep(0.1)


def read_lines(sdk: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in sdk.files.content(file_id).text.splitlines() if line.strip()]
