"""Upstream error bodies of any engine become OpenAI error JSON with the same status."""

from __future__ import annotations

from typing import Any

import pytest

from genmesh.protocol import normalise_upstream_error

CASES: list[tuple[str, int, Any, str, str | None, str | None]] = [
    # (case, status, upstream body, type, param, code)
    (
        "ours",
        400,
        {"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": "x"}},
        "invalid_request_error",
        "n",
        "x",
    ),
    (
        "vllm",
        400,
        {"error": {"message": "too long", "type": "BadRequestError", "param": None, "code": 400}},
        "invalid_request_error",
        None,
        None,
    ),
    (
        "vllm 404",
        404,
        {"error": {"message": "no model", "type": "NotFoundError", "code": 404}},
        "not_found_error",
        None,
        None,
    ),
    (
        "ovms string",
        400,
        {"error": "Mediapipe graph definition with requested name is not found"},
        "invalid_request_error",
        None,
        None,
    ),
    ("fastapi detail", 500, {"detail": "boom"}, "server_error", None, None),
    ("not json", 503, None, "service_unavailable_error", None, None),
]


@pytest.mark.parametrize(("case", "status", "body", "kind", "param", "code"), CASES, ids=[c[0] for c in CASES])
def test_normalise(case: str, status: int, body: Any, kind: str, param: str | None, code: str | None) -> None:
    err = normalise_upstream_error(status, body)
    out = err.body()["error"]
    assert err.status == status
    assert set(out) == {"message", "type", "param", "code"}
    assert out["message"]
    assert (out["type"], out["param"], out["code"]) == (kind, param, code)
