"""Two OPEA megaservices built with OPEA's own orchestrator (opea-comps 1.5: ``ServiceOrchestrator``,
``MicroService``), whose remote services are the mesh's microservice hop. Run by .venv-opea's Python
(tests/opea/test_opea_orchestrator.py; not a test module itself), it writes one JSON object to ``--out``:
what each node answered, for the test to judge.

- ChatQnA, the GenAIComps microservice flow: embedding (``/v1/embeddings``, a ``TextDoc``) → an
  in-memory retriever (an OPEA microservice of this program's own, ``EmbedDoc`` → ``SearchedDoc``, by
  cosine over a few documents embedded through the mesh) → reranking (``/v1/reranking``) → LLM
  (``/v1/chat/completions``, the ``LLMParamsDoc``), streamed.
- AudioQnA: ASR (``/v1/asr``) → LLM (``/v1/chat/completions``, OpenAI chat) → TTS (``/v1/tts``).

``--serve``: each megaservice is also served over HTTP by OPEA's ``MicroService`` (the megaservice
role, as GenAIExamples' ChatQnA and AudioQnA gateways are) and asked through it; without it the
orchestrator's ``schedule`` is called in process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import sys
import time
from typing import Any

import numpy as np
import requests
from comps import (
    EmbedDoc,
    MicroService,
    SearchedDoc,
    ServiceOrchestrator,
    ServiceRoleType,
    ServiceType,
    TextDoc,
    register_microservice,
)
from comps.cores.proto.docarray import LLMParams
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

DOCS = [
    "Paris is the capital and largest city of France.",
    "The Nile is the longest river in Africa.",
    "Bananas are rich in potassium.",
    "Mount Everest is the highest mountain on Earth.",
    "France borders Spain, Italy, Belgium and Germany.",
]
QUESTION = "What is the capital of France?"
# the in-memory retriever's corpus: the documents and their vectors (set before its process forks)
CORPUS: dict[str, Any] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, deadline_s: float = 60.0) -> None:
    """Poll ``url`` until it answers (any status), within the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            requests.get(url, timeout=2)
            return
        except requests.ConnectionError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return host, int(port)


async def retrieve(doc: EmbedDoc) -> SearchedDoc:
    """Cosine over the corpus: the ``k`` nearest documents to the query's vector."""
    query = np.asarray(doc.embedding, dtype=np.float64)
    vectors = CORPUS["vectors"]
    scores = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    best = np.argsort(-scores)[: doc.k]
    return SearchedDoc(retrieved_docs=[TextDoc(text=CORPUS["texts"][i]) for i in best], initial_query=doc.text)


def start_retriever(ms_url: str) -> tuple[MicroService, multiprocessing.Process]:
    """The corpus embedded through the mesh (the TextDoc shape), then the retriever served by OPEA's
    own microservice machinery in a child process (as GenAIComps' tests run theirs)."""
    r = requests.post(ms_url + "/v1/embeddings", json={"text": DOCS}, timeout=120)
    r.raise_for_status()
    CORPUS["texts"], CORPUS["vectors"] = DOCS, np.asarray(r.json()["embedding"], dtype=np.float64)
    port = free_port()
    register_microservice(
        name="retriever",
        service_type=ServiceType.RETRIEVER,
        host="127.0.0.1",
        port=port,
        endpoint="/v1/retrieval",
        input_datatype=EmbedDoc,
        output_datatype=SearchedDoc,
    )(retrieve)
    from comps import opea_microservices

    service = opea_microservices["retriever"]
    process = multiprocessing.Process(target=service.start, daemon=True, name="retriever")
    process.start()
    wait_ready(f"http://127.0.0.1:{port}/v1/health_check")
    return service, process


def remote(name: str, url: str, endpoint: str, kind: ServiceType) -> MicroService:
    host, port = host_port(url)
    return MicroService(name=name, host=host, port=port, endpoint=endpoint, use_remote_service=True, service_type=kind)


def chatqna(ms_url: str, retriever: MicroService) -> ServiceOrchestrator:
    mega = ServiceOrchestrator()
    embedding = remote("embedding", ms_url, "/v1/embeddings", ServiceType.EMBEDDING)
    rerank = remote("rerank", ms_url, "/v1/reranking", ServiceType.RERANK)
    llm = remote("llm", ms_url, "/v1/chat/completions", ServiceType.LLM)
    mega.add(embedding).add(retriever).add(rerank).add(llm)
    mega.flow_to(embedding, retriever)
    mega.flow_to(retriever, rerank)
    mega.flow_to(rerank, llm)
    return mega


class AudioQnA(ServiceOrchestrator):
    """ASR → LLM → TTS, each node's input made from the one before (what AudioQnA's ``align_inputs``
    does: the transcript becomes a user message, the answer's text the speech)."""

    def align_inputs(
        self, inputs: Any, cur_node: str, runtime_graph: Any, llm_parameters_dict: Any, **kwargs: Any
    ) -> Any:
        kind = self.services[cur_node].service_type
        if kind == ServiceType.LLM:
            return {
                "messages": [{"role": "user", "content": inputs["asr_result"]}],
                "max_tokens": llm_parameters_dict["max_tokens"],
                "temperature": llm_parameters_dict["temperature"],
                "top_p": llm_parameters_dict["top_p"],
                "stream": False,
            }
        if kind == ServiceType.TTS:
            return {"text": inputs["choices"][0]["message"]["content"], "voice": kwargs.get("voice", "default")}
        return inputs


def audioqna(ms_url: str) -> ServiceOrchestrator:
    mega = AudioQnA()
    asr = remote("asr", ms_url, "/v1/asr", ServiceType.ASR)
    llm = remote("llm", ms_url, "/v1/chat/completions", ServiceType.LLM)
    tts = remote("tts", ms_url, "/v1/tts", ServiceType.TTS)
    mega.add(asr).add(llm).add(tts)
    mega.flow_to(asr, llm)
    mega.flow_to(llm, tts)
    return mega


def node(result: dict[str, Any], name: str) -> Any:
    """A node's answer in ``schedule``'s result (keyed by the node's id, ``<name>/MicroService``)."""
    return next(v for k, v in result.items() if k.split("/")[0] == name)


def sse_text(chunks: list[bytes]) -> tuple[str, bool, int]:
    """The streamed answer: its text, whether ``[DONE]`` ended it, and how many events carried text."""
    text, done, events = "", False, 0
    for line in b"".join(chunks).decode().splitlines():
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        choice = json.loads(data)["choices"]
        if choice and choice[0].get("text"):
            text += choice[0]["text"]
            events += 1
    return text, done, events


async def ask_chatqna(mega: ServiceOrchestrator, question: str, max_tokens: int) -> dict[str, Any]:
    params = LLMParams(max_tokens=max_tokens, stream=True)
    result, _graph = await mega.schedule(initial_inputs={"text": question}, llm_parameters=params)
    stream = node(result, "llm")
    assert isinstance(stream, StreamingResponse), type(stream)
    chunks = [c if isinstance(c, bytes) else c.encode() async for c in stream.body_iterator]
    answer, done, events = sse_text(chunks)
    return {
        "embedding_dim": len(node(result, "embedding")["embedding"]),
        "retrieved": [d["text"] for d in node(result, "retriever")["retrieved_docs"]],
        "reranked": node(result, "rerank")["documents"],
        "answer": answer,
        "done": done,
        "text_events": events,
    }


async def ask_audioqna(mega: ServiceOrchestrator, audio_b64: str, max_tokens: int) -> dict[str, Any]:
    params = LLMParams(max_tokens=max_tokens, stream=False, temperature=0.01)
    result, _graph = await mega.schedule(initial_inputs={"audio": audio_b64}, llm_parameters=params, voice="default")
    heard, answer, spoken = node(result, "asr"), node(result, "llm"), node(result, "tts")
    if "tts_result" not in spoken:
        raise RuntimeError(f"the TTS node answered {spoken} for the LLM's {answer}")
    return {
        "heard": heard["asr_result"],
        "answer": answer["choices"][0]["message"]["content"],
        "spoken_b64": spoken["tts_result"],
    }


def serve(name: str, endpoint: str, handler: Any) -> tuple[str, multiprocessing.Process]:
    """A megaservice's HTTP gateway: OPEA's MicroService in the megaservice role, in a child process."""
    port = free_port()
    gateway = MicroService(
        name, service_role=ServiceRoleType.MEGASERVICE, host="127.0.0.1", port=port, endpoint=endpoint
    )
    gateway.add_route(endpoint, handler, methods=["POST"])
    process = multiprocessing.Process(target=gateway.start, daemon=True, name=name)
    process.start()
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/v1/health_check")
    return url + endpoint, process


def run(chat_ms: str, audio_ms: str, questions: list[str], max_tokens: int, http: bool) -> dict[str, Any]:
    retriever, retriever_process = start_retriever(chat_ms)
    chat, audio = chatqna(chat_ms, retriever), audioqna(audio_ms)
    out: dict[str, Any] = {"chatqna": [], "audioqna": []}
    spoken = []
    for q in questions:
        r = requests.post(audio_ms + "/v1/tts", json={"text": q}, timeout=300)
        r.raise_for_status()
        spoken.append(r.json()["tts_result"])
    processes = [retriever_process]
    try:
        if not http:
            for q, wav in zip(questions, spoken, strict=True):
                out["chatqna"].append(asyncio.run(ask_chatqna(chat, q, max_tokens)))
                out["audioqna"].append(asyncio.run(ask_audioqna(audio, wav, max_tokens)))
            return out

        async def chat_handler(request: Request) -> StreamingResponse:
            body = await request.json()
            params = LLMParams(max_tokens=body.get("max_tokens", max_tokens), stream=True)
            result, _ = await chat.schedule(initial_inputs={"text": body["messages"]}, llm_parameters=params)
            stream: StreamingResponse = node(result, "llm")
            return stream

        async def audio_handler(request: Request) -> JSONResponse:
            body = await request.json()
            answer = await ask_audioqna(audio, body["audio"], body.get("max_tokens", max_tokens))
            return JSONResponse(answer)

        chat_url, p1 = serve("ChatQnA", "/v1/chatqna", chat_handler)
        audio_url, p2 = serve("AudioQnA", "/v1/audioqna", audio_handler)
        processes += [p1, p2]
        for q, wav in zip(questions, spoken, strict=True):
            with requests.post(chat_url, json={"messages": q, "max_tokens": max_tokens}, stream=True, timeout=600) as r:
                r.raise_for_status()
                answer, done, events = sse_text(list(r.iter_content(chunk_size=None)))
            out["chatqna"].append({"answer": answer, "done": done, "text_events": events})
            r = requests.post(audio_url, json={"audio": wav, "max_tokens": max_tokens}, timeout=600)
            r.raise_for_status()
            out["audioqna"].append(r.json())
        return out
    finally:
        for p in processes:
            p.terminate()
            p.join(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chat-microservice", required=True, help="a microservice over the chat and embedding models")
    parser.add_argument("--audio-microservice", required=True, help="a microservice over the chat and audio models")
    parser.add_argument("--question", action="append", help="asked of both megaservices (repeatable)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--serve", action="store_true", help="ask through each megaservice's own HTTP gateway")
    parser.add_argument("--out", required=True, help="where to write the answers (JSON)")
    args = parser.parse_args()
    multiprocessing.set_start_method("fork")
    out = run(args.chat_microservice, args.audio_microservice, args.question or [QUESTION], args.max_tokens, args.serve)
    out["docs"] = DOCS
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
