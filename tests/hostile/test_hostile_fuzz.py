"""Property-based requests (schemathesis, from each hop's own OpenAPI document): valid and invalid
bodies for every POST operation, sent to that hop. No 5xx; every 4xx OpenAI error JSON < 4 KB."""

from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from support.hostile import FULL, Hop, count, judge

EXAMPLES = 200 if FULL else 5  # per operation and generation mode
HOPS = ("engine", "microservice", "gateway")


def _hop(hostile: object, name: str) -> Hop:
    return next(h for h in hostile.hops() if h.name == name)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
@pytest.mark.parametrize("hop_name", HOPS)
def test_property_based_requests_get_no_5xx(hostile: object, hop_name: str, mode: GenerationMode) -> None:
    hop = _hop(hostile, hop_name)
    schema = schemathesis.openapi.from_url(hop.url + "/openapi.json", headers=hop.headers, timeout=30)
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if result.ok().method.upper() == "POST" and not result.ok().path.startswith("/admin")
    ]
    assert {"/v1/chat/completions", "/v1/completions"} <= {op.path for op in operations}, hop.name
    if mode is GenerationMode.NEGATIVE:
        # Invalid bodies need a JSON body to break: an operation without one (a batch's cancel, the
        # multipart file upload) has no invalid case to generate (tests/gateway covers its bad input).
        operations = [op for op in operations if any(b.media_type == "application/json" for b in op.body)]
    problems: list[str] = []
    with httpx.Client(timeout=60) as client:
        for operation in operations:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=not FULL,
                suppress_health_check=list(HealthCheck),
                phases=tuple(Phase) if FULL else [p for p in Phase if p is not Phase.shrink],
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def send(case: schemathesis.Case) -> None:
                body = case.body
                raw = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
                headers = {"content-type": "application/json", **hop.headers}
                headers.update({k: str(v) for k, v in (case.headers or {}).items() if k.lower() != "authorization"})
                r = client.request("POST", hop.url + case.formatted_path, content=raw, headers=headers)
                verdict = judge(r)
                count(hop.name, verdict)
                if verdict.problem is not None:
                    problems.append(f"{case.formatted_path} {str(body)[:200]}: {verdict.problem}")

            send()
        assert not problems, "\n".join(problems[:10])
        assert client.get(hop.url + hop.health, headers=hop.headers).status_code == 200
