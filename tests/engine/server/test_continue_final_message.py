"""``continue_final_message`` (vLLM's chat parameter, which the gateway's mid-stream failover sends):
the last assistant message is continued, not answered; misuse is a 400."""

from __future__ import annotations

import httpx

from genmesh.engine.openai.prompts import PromptTokenizer
from genmesh.protocol import ChatMessage
from support.servers import GENMESH_ENGINE_ONLY

ASK = [{"role": "user", "content": "Name three colours."}]


def _chat(url: str, **body: object) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"max_tokens": 6, "temperature": 0, **body}, timeout=120)


@GENMESH_ENGINE_ONLY
def test_the_final_assistant_message_is_continued(engine_url: str, engine_tokenizer: PromptTokenizer) -> None:
    head = "The three colours are red,"
    r = _chat(
        engine_url,
        messages=[*ASK, {"role": "assistant", "content": head}],
        continue_final_message=True,
        add_generation_prompt=False,
    )
    assert r.status_code == 200, r.text
    # the prompt is the question's, with the generation prompt, and the prefill: the assistant's
    # turn left open (no end-of-turn after it)
    opened = engine_tokenizer.chat_prompt([ChatMessage.model_validate(m) for m in ASK], True) + head
    assert r.json()["usage"]["prompt_tokens"] == len(engine_tokenizer.encode(opened, add_special_tokens=False))
    text = r.json()["choices"][0]["message"]["content"]
    assert not text.startswith(head)  # a continuation, not the prefill repeated
    assert "<|im_start|>" not in text


@GENMESH_ENGINE_ONLY
def test_misuse_is_a_400_naming_the_parameter(engine_url: str) -> None:
    both = _chat(engine_url, messages=[*ASK, {"role": "assistant", "content": "Red"}], continue_final_message=True)
    assert both.status_code == 400  # add_generation_prompt defaults to true
    assert both.json()["error"]["param"] == "continue_final_message"
    user_last = _chat(engine_url, messages=ASK, continue_final_message=True, add_generation_prompt=False)
    assert user_last.status_code == 400
    assert user_last.json()["error"]["param"] == "continue_final_message"
