"""``/v1/embeddings`` at every hop: the OpenAI SDK through the gateway (auth, queue, per-key token
limits, metering, its own slots) and the microservice to the real engine serving all-MiniLM-L6-v2
beside the chat model. Fidelity is checked against the numpy reference at the client's end."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import openai
import pytest

from genmesh.gateway.redis.keys import KeySpace
from genmesh.gateway.redis.scripts import source
from support.batches import jsonl, read_lines, wait_for
from support.embeddings import REFERENCE, SENTENCES, check_fidelity, cosines, vectors_of
from support.embeddings_mesh import ADMIN, Mesh
from support.polling import wait_until
from support.servers import EMBEDDING_NAME, MODEL_NAME


def test_openai_sdk_through_every_hop_float_and_base64(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    client = mesh.client(mesh.key()[0])
    floats = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:96], encoding_format="float")
    check_fidelity_prefix(np.array([d.embedding for d in floats.data], dtype=np.float32))
    default = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:20])  # the SDK asks base64
    assert cosines(np.array([d.embedding for d in default.data]), REFERENCE[:20]).min() >= 0.9999
    packed = client.embeddings.create(model=EMBEDDING_NAME, input="hello", encoding_format="base64")
    assert isinstance(packed.data[0].embedding, str)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 0


def check_fidelity_prefix(vectors: np.ndarray) -> None:
    assert cosines(vectors, REFERENCE[: len(vectors)]).min() >= 0.9999


def test_the_whole_fixture_through_the_gateway_matches_the_reference(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    body = {"model": EMBEDDING_NAME, "input": SENTENCES, "truncate_prompt_tokens": -1}
    r = httpx.post(
        mesh.gateway.url + "/v1/embeddings", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=120
    )
    assert r.status_code == 200, r.text
    check_fidelity(vectors_of(r.json()))
    assert r.headers["x-upstream"]  # routed by the gateway, on the embedding model's slots


def test_the_microservice_passes_embeddings_through(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    client = openai.OpenAI(base_url=mesh.microservice.url + "/v1", api_key="unused", max_retries=0)
    reply = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:4], encoding_format="float")
    assert cosines(np.array([d.embedding for d in reply.data]), REFERENCE[:4]).min() >= 0.9999
    bad = httpx.post(mesh.microservice.url + "/v1/embeddings", json={"input": []}, timeout=30)
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "input"


def test_input_tokens_are_metered_and_rate_limited(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    wait_until(lambda: int(mesh.redis.client().time()[0]) % 60 < 50, timeout_s=15, interval_s=0.2, what="a window")
    secret, key_id = mesh.key(tpm=30)
    client = mesh.client(secret)
    first = client.embeddings.create(model=EMBEDDING_NAME, input=[SENTENCES[0], SENTENCES[1]])
    used = first.usage.prompt_tokens
    assert used > 30  # one request may pass the budget; the next is refused
    usage = httpx.get(f"{mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=5).json()
    assert usage["prompt_tokens"] == used
    assert usage["completion_tokens"] == 0
    with pytest.raises(openai.RateLimitError) as refused:
        client.embeddings.create(model=EMBEDDING_NAME, input="one more")
    assert refused.value.response.headers["retry-after"]


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("empty list", {"model": EMBEDDING_NAME, "input": []}, "input"),
    ("empty string", {"model": EMBEDDING_NAME, "input": ""}, "input"),
    ("too many inputs", {"model": EMBEDDING_NAME, "input": ["a"] * 2049}, "input"),
    ("too long", {"model": EMBEDDING_NAME, "input": ["a", " ".join(["word"] * 300)]}, "input"),
    ("ids outside the vocabulary", {"model": EMBEDDING_NAME, "input": [[9906, 1917, 100257]]}, "input"),
    ("wrong type", {"model": EMBEDDING_NAME, "input": 3}, "input"),
    ("unknown encoding_format", {"model": EMBEDDING_NAME, "input": "a", "encoding_format": "hex"}, "encoding_format"),
    ("dimensions", {"model": EMBEDDING_NAME, "input": "a", "dimensions": 64}, "dimensions"),
    ("the chat model", {"model": MODEL_NAME, "input": "a"}, "model"),
]


@pytest.mark.parametrize(("body", "param"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_through_the_gateway_names_its_param(embeddings_mesh: Mesh, body: dict[str, Any], param: str) -> None:
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    r = httpx.post(
        mesh.gateway.url + "/v1/embeddings", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=60
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_a_chat_request_to_the_embedding_model_is_a_400_at_the_gateway(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    body = {"model": EMBEDDING_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(
        mesh.gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=60
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "model"


def test_embeddings_need_a_key(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    r = httpx.post(mesh.gateway.url + "/v1/embeddings", json={"model": EMBEDDING_NAME, "input": "a"}, timeout=10)
    assert r.status_code == 401


def test_models_lists_both(embeddings_mesh: Mesh) -> None:
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    ids = [m.id for m in mesh.client(secret).models.list().data]
    assert sorted(ids) == sorted([MODEL_NAME, EMBEDDING_NAME])


def test_a_batch_file_of_embeddings_lines(embeddings_mesh: Mesh) -> None:
    """The Batch API with endpoint /v1/embeddings: each line served as a client's request would be
    (the vectors equal the reference's); a line naming the chat model fails alone, a 400 naming model."""
    mesh = embeddings_mesh
    secret, _ = mesh.key()
    sdk = mesh.client(secret)
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": EMBEDDING_NAME, "input": s}}
        for i, s in enumerate(SENTENCES[:12])
    ]
    wrong = {"model": MODEL_NAME, "input": "a chat model cannot embed"}
    lines.append({"custom_id": "wrong", "method": "POST", "url": "/v1/embeddings", "body": wrong})
    f = sdk.files.create(file=("embeddings.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
    done = wait_for(sdk, batch.id, 300)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (12, 1)
    out = {o["custom_id"]: o for o in read_lines(sdk, done.output_file_id) + read_lines(sdk, done.error_file_id)}
    vectors = np.array([out[f"e{i}"]["response"]["body"]["data"][0]["embedding"] for i in range(12)])
    assert cosines(vectors, REFERENCE[:12]).min() >= 0.9999
    assert out["wrong"]["response"]["status_code"] == 400
    assert out["wrong"]["response"]["body"]["error"]["param"] == "model"


def _rate_tokens(mesh: Mesh, key_id: str) -> int:
    """This minute's tokens in the key's TPM window (0 when the window is another minute's)."""
    rate = KeySpace().key_id(key_id).rate
    window, tokens = mesh.redis.client().hmget(rate, "w", "tok")
    now = str(int(mesh.redis.client().time()[0]) // 60)
    return int(tokens or 0) if window is not None and window.decode() == now else 0


def _usage(mesh: Mesh, key_id: str) -> dict[str, int]:
    r = httpx.get(f"{mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=5)
    assert r.status_code == 200, r.text
    return {k: v for k, v in r.json().items() if k != "key_id"}


WIDE_INPUTS = [f"sentence number {i} of the wide request" for i in range(2048)]


def test_a_reply_of_any_size_is_metered_by_its_usage(embeddings_mesh: Mesh) -> None:
    """2,048 inputs as floats: a reply of about 16 MB (past what the relay parses whole) is still
    charged its own ``usage``: the key's usage and its TPM window move by exactly that."""
    mesh = embeddings_mesh
    wait_until(lambda: int(mesh.redis.client().time()[0]) % 60 < 30, timeout_s=40, interval_s=0.2, what="a window")
    secret, key_id = mesh.key()
    body = {"model": EMBEDDING_NAME, "input": WIDE_INPUTS, "encoding_format": "float"}
    r = httpx.post(
        f"{mesh.gateway.url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=300
    )
    assert r.status_code == 200, r.text[:300]
    assert len(r.content) > 8 * 1024 * 1024
    used = r.json()["usage"]["prompt_tokens"]
    assert used > 2048
    assert _usage(mesh, key_id) == {"requests": 1, "prompt_tokens": used, "completion_tokens": 0}
    assert _rate_tokens(mesh, key_id) == used


def test_a_batch_of_wide_lines_is_charged_each_line_once(embeddings_mesh: Mesh) -> None:
    """Batch lines are metered as interactive requests, each reply past 4 MiB: the key is charged
    the sum of the lines' ``usage``; a line charged already is not charged again (``account_once``)."""
    mesh = embeddings_mesh
    secret, key_id = mesh.key()
    sdk = mesh.client(secret)
    inputs = WIDE_INPUTS[:600]  # 600 vectors as floats: about 4.8 MB a reply
    lines = [
        {
            "custom_id": f"w{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": EMBEDDING_NAME, "input": inputs, "encoding_format": "float"},
        }
        for i in range(2)
    ]
    f = sdk.files.create(file=("wide.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
    done = wait_for(sdk, batch.id, 300)
    assert done.status == "completed", done
    out = read_lines(sdk, done.output_file_id)
    used = [o["response"]["body"]["usage"]["prompt_tokens"] for o in out]
    assert len(used) == 2
    assert min(used) > 600
    assert _usage(mesh, key_id) == {"requests": 2, "prompt_tokens": sum(used), "completion_tokens": 0}
    # a run of line 0 again (its lease lapsed meanwhile): the batch says it was charged, nothing moves
    charged = KeySpace().batch(key_id, batch.id).charged
    assert mesh.redis.client().smembers(charged) == {b"0", b"1"}
    assert mesh.redis.client().pttl(charged) > 0
    k = KeySpace().key_id(key_id)
    again = mesh.redis.client().register_script(source("account_once"))
    assert again(keys=[k.rate, k.usage, charged], args=[used[0], 0, 3600, 0, 60_000]) == -1
    assert _usage(mesh, key_id)["prompt_tokens"] == sum(used)


def test_a_model_not_served_costs_its_key_a_request(embeddings_mesh: Mesh) -> None:
    """An unknown model is a 404 (inline) or a line refused at the batch's creation, and costs the
    key one request of its RPM window each, as any refused request does."""
    mesh = embeddings_mesh
    wait_until(lambda: int(mesh.redis.client().time()[0]) % 60 < 45, timeout_s=20, interval_s=0.2, what="a window")
    secret, key_id = mesh.key()
    auth = {"Authorization": f"Bearer {secret}"}
    r = httpx.post(f"{mesh.gateway.url}/v1/embeddings", json={"model": "nope", "input": "x"}, headers=auth, timeout=30)
    assert r.status_code == 404, r.text
    rate = KeySpace().key_id(key_id).rate
    assert mesh.redis.client().hget(rate, "req") == b"1"
    sdk = mesh.client(secret)
    lines = [
        {"custom_id": f"n{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": f"nope-{i}", "input": "x"}}
        for i in range(2)
    ]
    f = sdk.files.create(file=("nope.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
    assert batch.status == "failed"
    assert batch.errors is not None
    assert [(e.line, e.code, e.param) for e in batch.errors.data] == [
        (1, "model_not_found", "body.model"),
        (2, "model_not_found", "body.model"),
    ]
    assert mesh.redis.client().hget(rate, "req") == b"3"
