"""langchain-huggingface's endpoint classes against the mesh's hops, run in .venv-opea (its lock holds
langchain-huggingface 0.3 and huggingface-hub 1.x; the dev lock's huggingface-hub 2 cannot), by
tests/native/test_langchain_huggingface.py. Writes what each call answered as JSON to ``--out``, per hop:

- ``HuggingFaceEndpointEmbeddings(model=url)``: ``embed_query`` and ``embed_documents`` (TEI's API via
  ``InferenceClient.feature_extraction``, ``POST /``);
- ``HuggingFaceEndpoint(endpoint_url=url)``, greedy (its sampling defaults set to None, so that
  ``InferenceClient`` leaves them out): ``invoke`` and ``stream`` (TGI's ``POST /`` with and without
  ``stream``);
- the same class with its defaults (``typical_p`` 0.95, which the engine has no step for): the error
  it raises (huggingface_hub maps TGI's ``error_type`` onto its exception classes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from langchain_huggingface import HuggingFaceEndpoint, HuggingFaceEndpointEmbeddings


def ask(url: str, token: str | None, texts: list[str], prompt: str, max_new_tokens: int) -> dict[str, Any]:
    embedder = HuggingFaceEndpointEmbeddings(model=url, huggingfacehub_api_token=token)
    greedy = HuggingFaceEndpoint(  # type: ignore[call-arg]
        endpoint_url=url,
        huggingfacehub_api_token=token,
        max_new_tokens=max_new_tokens,
        temperature=None,
        top_p=None,
        typical_p=None,
        timeout=120,
    )
    defaults = HuggingFaceEndpoint(endpoint_url=url, huggingfacehub_api_token=token, max_new_tokens=2)  # type: ignore[call-arg]
    refused: dict[str, Any] | None = None
    try:
        defaults.invoke(prompt)
    except Exception as exc:  # huggingface_hub reads TGI's error_type: "validation" is its ValidationError
        refused = {"type": type(exc).__name__, "message": str(exc)}
    return {
        "query": embedder.embed_query(texts[0]),
        "documents": embedder.embed_documents(texts),
        "invoked": greedy.invoke(prompt),
        "streamed": list(greedy.stream(prompt)),
        "defaults_refused": refused,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hop", nargs=3, action="append", required=True, metavar=("NAME", "URL", "API_KEY"))
    parser.add_argument("--text", action="append", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    answers = {name: ask(url, key or None, args.text, args.prompt, args.max_new_tokens) for name, url, key in args.hop}
    args.out.write_text(json.dumps(answers))


if __name__ == "__main__":
    main()
