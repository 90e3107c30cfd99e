"""``/tokenize``, ``/detokenize`` (vLLM's bodies) and ``/version`` on the real engine."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from genmesh.engine.openai.prompts import PromptTokenizer
from genmesh.protocol import ChatMessage
from support.servers import GENMESH_ENGINE_ONLY, MODEL_NAME

CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is OpenVINO?"}]


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


def test_tokenize_prompt(engine_url: str, engine_tokenizer: PromptTokenizer) -> None:
    r = post(engine_url, "/tokenize", {"model": MODEL_NAME, "prompt": "Hello world, naïve café"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == engine_tokenizer.encode("Hello world, naïve café", add_special_tokens=True)
    assert body["count"] == len(body["tokens"]) > 0
    assert body["max_model_len"] == 8192
    assert body["token_strs"] is None
    strs = post(engine_url, "/tokenize", {"prompt": "Hello world, naïve café", "return_token_strs": True}).json()
    assert "".join(strs["token_strs"]) == "Hello world, naïve café"


def test_tokenize_messages_matches_chat_usage(engine_url: str, engine_tokenizer: PromptTokenizer) -> None:
    r = post(engine_url, "/tokenize", {"model": MODEL_NAME, "messages": CHAT})
    assert r.status_code == 200, r.text
    prompt = engine_tokenizer.chat_prompt([ChatMessage(**m) for m in CHAT])
    assert r.json()["tokens"] == engine_tokenizer.encode(prompt, add_special_tokens=False)
    usage = post(engine_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}).json()["usage"]
    assert usage["prompt_tokens"] == r.json()["count"]
    without = post(engine_url, "/tokenize", {"messages": CHAT, "add_generation_prompt": False}).json()
    assert without["count"] < r.json()["count"], "the generation prompt adds tokens"


def test_detokenize_round_trip(engine_url: str) -> None:
    text = "<|im_start|>user\nWhat is OpenVINO?<|im_end|>"
    ids = post(engine_url, "/tokenize", {"prompt": text, "add_special_tokens": False}).json()["tokens"]
    r = post(engine_url, "/detokenize", {"model": MODEL_NAME, "tokens": ids})
    assert r.status_code == 200, r.text
    assert r.json() == {"prompt": text}, "special tokens are kept, as vLLM does"


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "model"),
        ("/tokenize", {"prompt": "x", "messages": CHAT}, 400, "prompt"),
        ("/tokenize", {"messages": CHAT, "continue_final_message": True}, 400, "continue_final_message"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {}, 400, "prompt"),
        ("/detokenize", {"tokens": [1, 10**9]}, 400, "tokens[1]"),
        ("/detokenize", {"tokens": [-1]}, 400, "tokens[0]"),
        ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
        ("/detokenize", {"model": "nope", "tokens": [1]}, 404, "model"),
    ],
)
def test_bad_bodies_get_openai_errors(
    engine_url: str, path: str, body: dict[str, Any], status: int, param: str
) -> None:
    r = post(engine_url, path, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["message"]
    assert error["type"] == "invalid_request_error"


@GENMESH_ENGINE_ONLY
def test_version(engine_url: str) -> None:
    from importlib.metadata import version

    r = httpx.get(engine_url + "/version", timeout=10)
    assert r.status_code == 200
    assert r.json() == {"version": version("genmesh-engine"), "openvino_genai": version("openvino-genai")}
