"""``genmesh-bench audio``: transcription's real-time factor (seconds of audio transcribed per wall
second, over all clients) and speech's characters per second, at several concurrencies (default c=1
and c=8), against the engine (``/v1/audio/transcriptions``, ``/v1/audio/speech`` over HTTP) and a peer
serving the same weights over HTTP (``scripts/speech_peer_server.py`` in ``.venv-speechpeer``:
faster-whisper on CTranslate2, Piper's own ``piper-tts`` on ONNX Runtime), started here unless
``--peer-url`` names one or ``--no-peer``. Closed loop: ``c`` clients send requests back to back for
``--duration-s``; the targets take turns in ``--rounds`` interleaved rounds and each figure is the
median round. The clips are made first by the engine's voice from :data:`PARAGRAPHS` (the same WAV
bytes to both targets); before the rounds each target transcribes each clip once (the warm-up), and
how many transcripts are equal is stated. Without ``--base-url`` a private engine serving the chat
model, Whisper tiny.en and the voice is started.

``--chat-cost``: chat output tok/s (``--chat-concurrency`` streams) in interleaved rounds on (a) a
private engine serving the chat model alone, (b) the engine serving the chat and audio models, audio
idle, and (c) that engine while ``--chat-cost-clients`` transcription clients and as many speech
clients send requests the whole time (as ``genmesh-bench embeddings --chat-cost``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from genmesh.engine.settings import DEFAULT_MODEL

from .datasets import chat_batch
from .load import Endpoint, closed_loop, form_data, measure, session
from .render import chat_cost_table, say
from .results import describe, save
from .servers import MODEL_NAME, VOICE, speech_peer, start, start_engine

# The chat-cost table's last column: its title, the row key and its decimals.
CHAT_COST_BESIDE = ("audio requests/s beside", "audio_requests_per_s", 2)

WHISPER = "whisper-tiny.en"
SPEECH = "piper-joe"
RATE = 22050  # the voice's (and /v1/audio/speech pcm's) sample rate
KINDS = {  # kind: (path, figure, its unit in the tables)
    "transcription": ("/v1/audio/transcriptions", "audio_s_per_s", "audio s / wall s"),
    "speech": ("/v1/audio/speech", "chars_per_s", "characters/s"),
}
# Two plain sentences each (written for this benchmark): the clips to transcribe and the speech inputs.
PARAGRAPHS = (
    "The ferry leaves the harbour at seven every morning. Passengers wait on the pier with their bags.",
    "A gardener trims the hedges along the quiet street. The smell of cut grass fills the warm air.",
    "The museum opens a new room for old maps next week. Visitors can see how the coast has changed.",
    "Our neighbour repairs bicycles in his small garage. He whistles a tune while he works on the wheels.",
    "The baker takes the first loaves out of the oven. Customers line up outside before the shop opens.",
    "Heavy clouds gathered over the hills in the afternoon. By evening the rain had reached the town.",
    "The students built a model bridge out of paper. It held more weight than anyone had expected.",
    "A fox crossed the field at the edge of the forest. It stopped to listen and then ran into the trees.",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="a running engine serving Whisper and the voice (default: start one)")
    p.add_argument("--whisper-model", default="models/whisper-tiny.en", help="Whisper IR folder for the private engine")
    p.add_argument("--speech-voice", default=str(VOICE), help="Piper voice for the private engine")
    p.add_argument("--peer-url", help="a running peer (default: start scripts/speech_peer_server.py)")
    p.add_argument("--no-peer", action="store_true", help="measure the engine alone")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    p.add_argument("--duration-s", type=float, default=10.0, help="seconds per target, kind and concurrency")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (throughput: the median)")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"))
    p.add_argument("--log-dir", type=Path, help="where the servers' logs go (default: a temporary folder)")
    p.add_argument("--chat-cost", action="store_true", help="also measure the cost to the chat model's throughput")
    p.add_argument("--chat-concurrency", type=int, default=8, help="chat streams in the --chat-cost rounds")
    p.add_argument("--chat-requests", type=int, default=48, help="chat requests per --chat-cost round")
    p.add_argument("--chat-max-tokens", type=int, default=64, help="tokens per chat request (ignore_eos)")
    p.add_argument("--chat-cost-clients", type=int, default=1, help="transcription and speech clients each, in (c)")


def seconds_of_pcm(pcm: bytes, rate: int = RATE) -> float:
    """The length of 16-bit mono PCM at ``rate``."""
    return len(pcm) / 2 / rate


def wav_of_pcm(pcm: bytes, rate: int = RATE) -> bytes:
    """16-bit mono PCM as a WAV file (with its length in the header)."""
    out = io.BytesIO()
    soundfile.write(out, np.frombuffer(pcm, dtype="<i2"), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median over the rounds of ours / theirs, round by round (0 where theirs is 0)."""
    return statistics.median(a / b if b else 0.0 for a, b in zip(ours, theirs, strict=True))


async def make_clips(url: str) -> list[tuple[bytes, float]]:
    """Each paragraph spoken by the engine's voice: (WAV bytes, seconds)."""
    clips = []
    async with session(url, 1) as http:
        for text in PARAGRAPHS:
            body = {"model": SPEECH, "voice": "alloy", "input": text, "response_format": "pcm"}
            async with http.post("/v1/audio/speech", json=body) as r:
                r.raise_for_status()
                pcm = await r.read()
            clips.append((wav_of_pcm(pcm), seconds_of_pcm(pcm)))
    return clips


async def transcripts(url: str, clips: list[tuple[bytes, float]]) -> list[str]:
    """Each clip transcribed once (the warm-up of a target)."""
    texts = []
    async with session(url, 1) as http:
        for wav, _ in clips:
            form = {"file": wav, "model": WHISPER}
            async with http.post("/v1/audio/transcriptions", data=form_data(form)) as r:
                r.raise_for_status()
                texts.append(str((await r.json())["text"]).strip())
    return texts


def _pick(k: int, n: int, size: int) -> int:
    """Client ``k``'s ``n``-th item: the clients start at different items."""
    return (3 * k + n) % size


def _request(kind: str, clips: list[tuple[bytes, float]], k: int, n: int) -> tuple[dict[str, Any], float]:
    """Client ``k``'s ``n``-th request of ``kind`` (a form or a JSON body) and what it carries (seconds
    of audio, or characters)."""
    if kind == "transcription":
        wav, seconds = clips[_pick(k, n, len(clips))]
        return {"file": wav, "model": WHISPER}, seconds
    text = PARAGRAPHS[_pick(k, n, len(PARAGRAPHS))]
    return {"model": SPEECH, "voice": "alloy", "input": text, "response_format": "pcm"}, float(len(text))


async def _level(url: str, kind: str, clips: list[tuple[bytes, float]], c: int, duration_s: float) -> dict[str, float]:
    path, figure, _ = KINDS[kind]
    served = await closed_loop(
        url,
        path,
        lambda k, n: _request(kind, clips, k, n)[0],
        c,
        duration_s,
        form=kind == "transcription",
        units=lambda k, n: _request(kind, clips, k, n)[1],
    )
    return served.summary("requests_per_s") | {figure: served.units / served.elapsed_s}


async def _measure(
    targets: dict[str, str], clips: list[tuple[bytes, float]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in args.kinds:
        figure = KINDS[kind][1]
        for c in args.concurrency:
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, url in targets.items():
                    rounds[name].append(await _level(url, kind, clips, c, args.duration_s))
            ours = [r[figure] for r in rounds["genmesh"]]
            for name, got in rounds.items():
                row: dict[str, Any] = {"target": name, "kind": kind, "concurrency": c}
                for key in (figure, "requests_per_s", "p50_ms", "p99_ms"):
                    row[key] = statistics.median(r[key] for r in got)
                row["genmesh_ratio"] = median_ratio(ours, [r[figure] for r in got])
                row["failed"] = sum(int(r["failed"]) for r in got)
                rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], kind: str) -> str:
    """One kind's rows; ``genmesh / this``: the median over the rounds of genmesh's figure over this target's."""
    _, figure, unit = KINDS[kind]
    head = f"| target | c | {unit} | requests/s | p50 ms | p99 ms | genmesh / this |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["kind"] == kind):
        lines.append(
            f"| {r['target']} | {r['concurrency']} | {r[figure]:.1f} | {r['requests_per_s']:.2f} | {r['p50_ms']:.0f} "
            f"| {r['p99_ms']:.0f} | {r['genmesh_ratio']:.2f} |"
        )
    return "\n".join(lines)


async def _audio_until(url: str, clips: list[tuple[bytes, float]], clients: int, stop: asyncio.Event) -> int:
    """``clients`` transcription and ``clients`` speech clients until ``stop``; the requests served."""
    served = 0
    async with session(url, 2 * clients) as http:

        async def client(kind: str, k: int) -> None:
            nonlocal served
            n = 0
            while not stop.is_set():
                body, _ = _request(kind, clips, k, n)
                sent = {"data": form_data(body)} if kind == "transcription" else {"json": body}
                async with http.post(KINDS[kind][0], **sent) as r:
                    await r.read()
                    served += r.status == 200
                n += 1

        await asyncio.gather(*(client(kind, k) for kind in KINDS for k in range(clients)))
    return served


async def _chat_round(
    url: str, args: argparse.Namespace, beside: Callable[[asyncio.Event], Coroutine[Any, Any, int]] | None
) -> dict[str, float]:
    stop = asyncio.Event()
    task = asyncio.create_task(beside(stop)) if beside is not None else None
    requests = chat_batch(args.chat_requests, args.chat_max_tokens)
    began = time.monotonic()
    try:
        result = await measure(Endpoint(url, model=MODEL_NAME), requests, max_concurrency=args.chat_concurrency)
    finally:
        stop.set()
        served = await task if task is not None else 0
    return {"tok_s": float(result["output_throughput"]), "audio_requests_per_s": served / (time.monotonic() - began)}


async def _chat_cost(
    alone_url: str, both_url: str, clips: list[tuple[bytes, float]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    n = args.chat_cost_clients

    async def audio(stop: asyncio.Event) -> int:
        return await _audio_until(both_url, clips, n, stop)

    variants: dict[str, tuple[str, Callable[[asyncio.Event], Coroutine[Any, Any, int]] | None]] = {
        "chat model alone": (alone_url, None),
        "chat + audio models, audio idle": (both_url, None),
        f"chat + audio models, {n} transcription + {n} speech clients": (both_url, audio),
    }
    for url, _ in variants.values():  # warm-up, not measured
        await measure(Endpoint(url, model=MODEL_NAME), chat_batch(4, 8), max_concurrency=4)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (url, beside) in variants.items():
            rounds[name].append(await _chat_round(url, args, beside))
    first = [r["tok_s"] for r in rounds["chat model alone"]]
    return [
        {
            "variant": name,
            "chat_tok_s": statistics.median(r["tok_s"] for r in got),
            "ratio": median_ratio([r["tok_s"] for r in got], first),
            "audio_requests_per_s": statistics.median(r["audio_requests_per_s"] for r in got),
        }
        for name, got in rounds.items()
    ]


def collect(args: argparse.Namespace, stack: contextlib.ExitStack) -> dict[str, Any]:
    """The rows (genmesh, and the peer unless ``--no-peer``), the transcripts' agreement, the peer's
    settings and, with ``--chat-cost``, the chat-cost rows."""
    logs = args.log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="genmesh-bench-audio-")))
    url = args.base_url
    if url is None:
        say("audio: starting a private engine (chat model, Whisper tiny.en, the Piper voice)")
        extra = ["--whisper-model", args.whisper_model, "--speech-voice", args.speech_voice, "--cache-size", "1"]
        url = stack.enter_context(start_engine(DEFAULT_MODEL, logs / "engine.log", timeout_s=900.0, extra=extra)).url
    targets, peer = {"genmesh": url.rstrip("/")}, None
    if args.peer_url:
        targets["peer"] = args.peer_url.rstrip("/")
    elif not args.no_peer:
        peer = speech_peer(max(args.concurrency))
        say(f"audio: {peer.note or 'starting the faster-whisper / piper-tts peer'}")
        if not peer.note:
            try:
                targets["peer"] = stack.enter_context(start(peer.key, peer.argv, logs / "peer.log", peer.timeout_s)).url
            except Exception as exc:  # a peer that fails to start is reported, not fatal
                peer.note = f"failed to start here: {exc}".splitlines()[0]
    say("audio: making the clips with the engine's voice")
    clips = asyncio.run(make_clips(targets["genmesh"]))
    texts = {name: asyncio.run(transcripts(u, clips)) for name, u in targets.items()}
    equal = sum(a == b for a, b in zip(*texts.values(), strict=True)) if len(texts) == 2 else None
    say("audio: measuring")
    rows = asyncio.run(_measure(targets, clips, args))
    for kind in args.kinds:  # at once: the chat-cost rounds take longer
        say(f"audio: {kind}\n{table(rows, kind)}")
    cost: list[dict[str, Any]] = []
    if args.chat_cost:
        say("audio: starting a private engine serving the chat model alone")
        alone = stack.enter_context(start_engine(DEFAULT_MODEL, logs / "engine-chat.log", extra=["--cache-size", "1"]))
        cost = asyncio.run(_chat_cost(alone.url, targets["genmesh"], clips, args))
    return {
        "rows": rows,
        "chat_cost": cost,
        "clips_s": [s for _, s in clips],
        "equal_transcripts": equal,
        "transcripts": texts,
        "peer": None if peer is None else {"settings": peer.settings, "version": peer.version, "note": peer.note},
    }


def markdown(got: dict[str, Any], args: argparse.Namespace) -> str:
    rows, clips = got["rows"], got["clips_s"]
    blocks = []
    if "transcription" in args.kinds:
        intro = f"Transcription: {len(clips)} clips of {min(clips):.1f}-{max(clips):.1f} s (the voice's own speech)"
        if got["equal_transcripts"] is not None:
            intro += f"; the two transcripts are equal on {got['equal_transcripts']} of {len(clips)} clips"
        blocks += [intro + ".", table(rows, "transcription")]
    if "speech" in args.kinds:
        chars = [len(p) for p in PARAGRAPHS]
        blocks += [f"Speech: inputs of two sentences, {min(chars)}-{max(chars)} characters.", table(rows, "speech")]
    return "\n\n".join(
        [*blocks, chat_cost_table(got["chat_cost"], args, *CHAT_COST_BESIDE)] if got["chat_cost"] else blocks
    )


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        got = collect(args, stack)
    host = describe()
    print(f"\nAudio ({WHISPER}, {SPEECH}), CPU: {host['cpu']} ({host['cores']} cores)\n")
    print(markdown(got, args))
    if got["peer"] and got["peer"]["note"]:
        print(f"\npeer: {got['peer']['note']}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    saved = save({"host": host, **got}, args.result_dir / f"audio-{stamp}.json")
    print(f"results: {saved}")
    return 1 if any(r["failed"] for r in got["rows"]) else 0
