"""Every class of hostile input at every hop: no 5xx, every 4xx OpenAI error JSON under 4 KB, named
parameters where the issue asks for them, and every hop healthy afterwards."""

from __future__ import annotations

import json

import httpx
import pytest

from support.hostile import CHAT, COMP, Hop, corpus, count, judge

HOPS = ("engine", "microservice", "gateway")

# (case, status, param): the answer each hop gives, since the microservice and the gateway relay
# what the engine says (or say the same themselves, earlier).
EXPECTED = {
    "surrogate in content": (400, "messages[0].content"),
    "surrogate in model": (400, "model"),
    "invalid utf-8 bytes": (400, None),
    "1100-deep array": (400, None),
    "70-deep in messages": (400, None),
    "seed past 64 bits": (400, "seed"),
    "seed 2**63": (400, "seed"),
    "stop_token_ids past 64 bits": (400, "stop_token_ids[0]"),
    "prompt ids past 64 bits": (400, None),
    "temperature NaN": (400, None),
    "top_p 1e999": (400, "top_p"),
    "prompt id out of vocabulary": (400, "prompt[0]"),
    "stop id out of vocabulary": (400, "stop_token_ids[0]"),
    "response_format 150 deep": (400, None),
    "1 MB model name": (404, "model"),
    "100 KB unknown key": (400, None),
}


def _hop(hostile: object, name: str) -> Hop:
    return next(h for h in hostile.hops() if h.name == name)  # type: ignore[attr-defined]


@pytest.mark.parametrize("hop_name", HOPS)
def test_no_5xx_and_small_openai_errors(hostile: object, hop_name: str) -> None:
    hop = _hop(hostile, hop_name)
    problems, seen = [], {}
    with httpx.Client(timeout=60) as client:
        for case in corpus():
            headers = {"content-type": case.content_type, **hop.headers}
            r = client.post(hop.url + case.path, content=case.body, headers=headers)
            verdict = judge(r)
            count(hop.name, verdict)
            seen[case.name] = r
            if verdict.problem is not None:
                problems.append(f"{case.name}: {verdict.problem}")
        assert not problems, f"{hop.name}:\n" + "\n".join(problems)
        for name, (status, param) in EXPECTED.items():
            r = seen[name]
            assert r.status_code == status, (name, r.status_code, r.text[:300])
            err = r.json()["error"]
            if param is not None:
                assert err["param"] == param, (name, err)
            assert len(err["message"]) <= 300, (name, err["message"])
        assert client.get(hop.url + hop.health, headers=hop.headers).status_code == 200


@pytest.mark.parametrize("hop_name", HOPS)
def test_valid_requests_still_work_after_the_corpus(hostile: object, hop_name: str) -> None:
    hop = _hop(hostile, hop_name)
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4, "temperature": 0}
    r = httpx.post(hop.url + CHAT, json=body, headers=hop.headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    with httpx.stream(
        "POST", hop.url + COMP, json={"prompt": "Hi", "max_tokens": 4, "stream": True}, headers=hop.headers, timeout=60
    ) as s:
        events = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert all("error" not in json.loads(e[6:]) for e in events[:-1])
