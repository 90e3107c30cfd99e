"""OPEA's own orchestrator drives the mesh (issue 57): GenAIComps' ``ServiceOrchestrator`` and
``MicroService`` (opea-comps 1.5, in .venv-opea: ``make opea-venv``) build a ChatQnA-style megaservice
(embedding → an in-memory retriever → reranking → LLM, streamed) and an AudioQnA-style one (ASR → LLM →
TTS) whose remote services are the mesh's microservice hop (tests/opea/megaservices.py), and each
answers a question end to end.

The bounded form (make test) asks one short question of each, in process, over the session's
embeddings and audio meshes. The whole (marker long; ``make test-opea``) serves both megaservices over
HTTP with OPEA's own gateway, on a mesh of its own serving all four models, and asks three questions
with longer answers."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile

from support.audio import VOICE, WHISPER_MODEL, wer
from support.embeddings_mesh import Mesh
from support.hostile import start_microservice
from support.servers import DEFAULT_MODEL, EMBEDDING_MODEL, ROOT, Server, free_port, start_server

pytestmark = pytest.mark.timeout(1200)
OPEA_PYTHON = ROOT / ".venv-opea" / "bin" / "python"
SCRIPT = Path(__file__).with_name("megaservices.py")
PARIS = "Paris is the capital and largest city of France."
QUESTIONS = {
    "What is the capital of France?": PARIS,
    "Which river is the longest in Africa?": "The Nile is the longest river in Africa.",
    "What is the highest mountain on Earth?": "Mount Everest is the highest mountain on Earth.",
}


def megaservices(tmp_path: Path, chat_ms: str, audio_ms: str, *args: str, timeout_s: float) -> dict[str, Any]:
    """Run the megaservices program in .venv-opea; its JSON answer."""
    assert OPEA_PYTHON.is_file(), "run 'make opea-venv' first (make test and make test-opea do it)"
    out = tmp_path / "answers.json"
    argv = [str(OPEA_PYTHON), str(SCRIPT), "--chat-microservice", chat_ms, "--audio-microservice", audio_ms]
    argv += [*args, "--out", str(out)]
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "LOGFLAG": ""}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def check_chat(answer: dict[str, Any], best_doc: str) -> None:
    assert answer["done"], answer
    assert answer["text_events"] >= 1, answer
    assert answer["answer"].strip(), answer
    if "reranked" in answer:  # in process, every node's answer is seen
        assert answer["embedding_dim"] == 384
        assert len(answer["retrieved"]) == 4  # OPEA's EmbedDoc k
        assert best_doc in answer["retrieved"]
        assert answer["reranked"] == [best_doc]  # OPEA's top_n: 1


def check_audio(ms: str, answer: dict[str, Any], question: str) -> None:
    """The question heard, an answer, and the answer spoken: audio that Whisper hears words in. (The
    answer's text is the model's, in whatever language it chose, so its words are not compared.)"""
    assert wer(question, answer["heard"]) <= 0.5, answer["heard"]  # Whisper tiny.en hears the voice
    assert answer["answer"].strip()
    wav = base64.b64decode(answer["spoken_b64"])
    assert soundfile.info(io.BytesIO(wav)).duration > 0.3
    back = httpx.post(ms + "/v1/asr", json={"audio": answer["spoken_b64"]}, timeout=300)
    assert back.status_code == 200, back.text
    assert back.json()["asr_result"].strip(), (answer["answer"], back.json())


def test_opea_megaservices_answer_a_question_over_the_mesh(
    embeddings_mesh: Mesh, audio_mesh: Mesh, tmp_path: Path
) -> None:
    chat_ms, audio_ms = embeddings_mesh.microservice.url, audio_mesh.microservice.url
    out = megaservices(tmp_path, chat_ms, audio_ms, "--max-tokens", "8", timeout_s=600)
    assert out["docs"][0] == PARIS
    check_chat(out["chatqna"][0], PARIS)
    check_audio(audio_ms, out["audioqna"][0], "What is the capital of France?")


@pytest.fixture(scope="module")
def full_microservice(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An engine serving all four models (chat, embeddings, Whisper, the voice) and its microservice."""
    logs = tmp_path_factory.mktemp("opea-mesh")
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--model", str(DEFAULT_MODEL), "--port", str(port)]
    argv += ["--cache-size", "1", "--stats-log-interval-s", "0", "--embedding-model", str(EMBEDDING_MODEL)]
    argv += ["--whisper-model", str(WHISPER_MODEL), "--speech-voice", str(VOICE)]
    engine: Server = start_server("engine", argv, port, logs, timeout_s=600)
    ms = start_microservice(logs, engine.url)
    yield ms.url
    ms.stop()
    engine.stop()


@pytest.mark.long
def test_opea_megaservices_served_by_opea_s_gateway_answer_three_questions(
    full_microservice: str, tmp_path: Path
) -> None:
    args = [arg for q in QUESTIONS for arg in ("--question", q)]
    ms = full_microservice
    out = megaservices(tmp_path, ms, ms, *args, "--max-tokens", "48", "--serve", timeout_s=1100)
    assert len(out["chatqna"]) == len(out["audioqna"]) == len(QUESTIONS)
    for (question, best), chat, audio in zip(QUESTIONS.items(), out["chatqna"], out["audioqna"], strict=True):
        check_chat(chat, best)
        check_audio(full_microservice, audio, question)
    in_process = megaservices(tmp_path, ms, ms, *args, "--max-tokens", "16", timeout_s=900)
    for (_, best), chat in zip(QUESTIONS.items(), in_process["chatqna"], strict=True):
        check_chat(chat, best)
