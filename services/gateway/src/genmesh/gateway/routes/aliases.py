"""The other paths of the gateway's endpoints, each served as its ``/v1`` form: OVMS's ``/v3`` and
``/v3/v1`` prefixes (the engine serves them, so every hop does), and rerank's and score's many paths
(``RERANK_PATHS``: Cohere v1/v2, Jina, vLLM, OVMS; ``SCORE_PATHS``), relayed upstream as
``/v1/rerank`` and ``/v1/score``. ``app.py`` rewrites the path before routing."""

from __future__ import annotations

from starlette.types import Scope

from genmesh.protocol import RERANK_PATHS, SCORE_PATHS

RERANK_PATH = "/v1/rerank"
SCORE_PATH = "/v1/score"
_V1 = ("/chat/completions", "/completions", "/responses", "/embeddings", "/models")

CANONICAL: dict[str, str] = {
    **{prefix + tail: "/v1" + tail for tail in _V1 for prefix in ("/v3", "/v3/v1")},
    **dict.fromkeys(RERANK_PATHS, RERANK_PATH),
    **dict.fromkeys(SCORE_PATHS, SCORE_PATH),
}


def canonical(scope: Scope) -> Scope:
    """``scope`` with its path as the ``/v1`` endpoint that serves it (the same scope if it is one)."""
    path = CANONICAL.get(scope["path"])
    if path is None or path == scope["path"]:
        return scope
    return {**scope, "path": path, "raw_path": path.encode("ascii")}
