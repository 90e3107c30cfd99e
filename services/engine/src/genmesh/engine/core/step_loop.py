"""The engine-core process: owns the ContinuousBatchingPipeline and runs the step loop.

``ContinuousBatchingPipeline.step()`` holds the GIL for the whole step, so it runs here, in a
process of its own, and never in the HTTP process. The loop steps while any request is
unfinished and otherwise blocks on its input socket (as OVMS's LLM executor does). Each step
sends one ``StepOutputs`` message with the new tokens of every request.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from genmesh.protocol.server.logs import configure_logging

from . import ipc as m
from .config import ISA_ENV, CoreConfig
from .draft_model import pipeline_draft
from .model_loading import prepare_model, start_scorer
from .pipeline_config import generation_config, pipeline_properties, scheduler_config
from .scorer import Scorer

log = logging.getLogger("genmesh.engine.core.step_loop")

IDLE_POLL_MS = 1000  # while idle, wake this often to notice an orphaned core

WARMUP_REQUEST_ID = 2**62  # above any id the API process gives out


def _warm_up(ov_genai: Any, ov: Any, np: Any, pipe: Any, grammars: tuple[str, ...], config: CoreConfig) -> None:
    # A pipeline with a draft (prompt lookup or a draft model) takes only requests that draft.
    lookup = 1 if config.prompt_lookup or config.draft_model else 0
    ngram = 1 if config.prompt_lookup else 0
    for i, grammar in enumerate(grammars):
        constraint = m.Constraint(grammar=grammar)
        params = m.SamplingParams(1, 0.0, constraint=constraint, num_assistant_tokens=lookup, max_ngram_size=ngram)
        # Keep the handle: OpenVINO drops a request whose handle is gone, grammar unused.
        ids = ov.Tensor(np.asarray([[1]], dtype=np.int64))
        handle = pipe.add_request(WARMUP_REQUEST_ID + i, ids, generation_config(ov_genai, params))
        while pipe.has_non_finished_requests():
            pipe.step()
        handle.read_all()


@dataclass
class _Live:
    handle: Any
    logprobs: bool
    beams: int  # 0: stream tokens as they come; else return this many beam-search sequences at the end
    drafts: int = 0  # draft tokens proposed per step (num_assistant_tokens; 0: none or by confidence)


@dataclass(eq=False)
class _Loop:
    ov_genai: Any
    ov: Any
    np: Any
    pipe: Any
    inbox: zmq.Socket[bytes]
    outbox: zmq.Socket[bytes]
    scorer: Scorer | None = None
    assistant_confidence: float | None = None  # a draft model's confidence threshold (None: token counts)
    handles: dict[int, _Live] = field(default_factory=dict)
    pending: list[m.RequestOutput] = field(default_factory=list)
    parent: int = field(default_factory=os.getppid)
    stopping: bool = False
    failed: bool = False
    steps: int = 0  # progress, reported with every step's stats
    tokens: int = 0
    token_steps: int = 0  # request-steps that gave tokens (tokens - token_steps: accepted draft tokens)
    drafted: int = 0  # draft tokens proposed (known for num_assistant_tokens drafts)
    scored: list[m.ScoreOutput] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = self.ov_genai.GenerationStatus
        self.finish = {
            self.ov_genai.GenerationFinishReason.STOP: "stop",
            self.ov_genai.GenerationFinishReason.LENGTH: "length",
        }

    # -- input -------------------------------------------------------------------------
    def _handle(self, msg: m.ToCore) -> None:
        if isinstance(msg, m.AddRequest):
            try:
                ids = self.np.asarray([msg.prompt_ids], dtype=self.np.int64)
                handle = self.pipe.add_request(
                    msg.request_id,
                    self.ov.Tensor(ids),
                    generation_config(self.ov_genai, msg.params, self.assistant_confidence),
                )
            except Exception as exc:  # a bad request must not kill the core
                rejected = m.RequestError("rejected", f"engine rejected the request: {exc}")
                self.pending.append(m.RequestOutput(msg.request_id, [], None, rejected))
            else:
                p = msg.params
                beams = p.num_return_sequences if p.beam_search else 0
                self.handles[msg.request_id] = _Live(handle, p.logprobs, beams, p.num_assistant_tokens)
        elif isinstance(msg, m.Abort):
            for rid in msg.request_ids:
                live = self.handles.pop(rid, None)
                if live is not None:
                    live.handle.cancel()
        elif isinstance(msg, m.Shutdown):
            self.stopping = True
        elif self.scorer is not None:
            self.scorer.handle(msg)
        elif isinstance(msg, m.ScoreOpen | m.ScoreAppend):
            self.scored.append(m.ScoreOutput(msg.session_id, [], True, "scoring is off on this engine"))

    def _drain(self, block: bool) -> None:
        if os.getppid() != self.parent:  # checked busy or idle: an orphan must not keep stepping
            log.warning("API process is gone; engine core exits")
            self.stopping = True
            return
        if block and not self.inbox.poll(IDLE_POLL_MS):
            self.outbox.send(m.encode(m.Heartbeat()))
            return
        while True:
            try:
                data = self.inbox.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._handle(m.decode_to_core(data))

    # -- output ------------------------------------------------------------------------
    def _collect(self) -> list[m.RequestOutput]:
        outputs, self.pending = self.pending, []
        done: list[int] = []
        for rid, live in self.handles.items():
            handle = live.handle
            status = handle.get_status()
            running = status == self.status.RUNNING
            if live.beams:
                if not running:
                    done.append(rid)
                    outputs.append(self._beams(rid, live, status))
                continue
            tokens: list[int] = []
            logprobs: list[float] | None = [] if live.logprobs else None
            reason: str | None = None
            if handle.can_read():
                for out in handle.read().values():
                    tokens.extend(out.generated_ids)
                    if logprobs is not None:
                        logprobs.extend(out.generated_log_probs)
                    reason = self.finish.get(out.finish_reason, reason)
            error: m.RequestError | None = None
            if not running:
                done.append(rid)
                if reason is None:
                    reason, error = self._end_without_reason(status)
            if tokens:
                self.token_steps += 1
                self.drafted += live.drafts
            if tokens or reason is not None or error is not None:
                self.tokens += len(tokens)
                outputs.append(m.RequestOutput(rid, tokens, reason, error, logprobs))
        for rid in done:
            del self.handles[rid]
        return outputs

    def _end_without_reason(self, status: Any) -> tuple[str | None, m.RequestError | None]:
        if status == self.status.IGNORED:
            why = "the request does not fit in this server's KV cache (raise --cache-size or shorten it)"
            return None, m.RequestError("rejected", why)
        if status == self.status.FINISHED:
            return "stop", None
        return "abort", None

    def _beams(self, rid: int, live: _Live, status: Any) -> m.RequestOutput:
        if status != self.status.FINISHED:
            reason, error = self._end_without_reason(status)
            return m.RequestOutput(rid, [], reason, error)
        seqs = sorted(live.handle.read_all(), key=lambda out: float(out.score), reverse=True)[: live.beams]
        found = [
            m.Sequence(
                list(out.generated_ids),
                list(out.generated_log_probs) if live.logprobs else [],
                float(out.score),
                self.finish.get(out.finish_reason, "stop"),
            )
            for out in seqs
        ]
        return m.RequestOutput(rid, [], "stop", None, None, found)

    def _stats(self) -> m.Stats:
        metrics = self.pipe.get_metrics()
        live = len(self.handles)
        running = min(int(metrics.scheduled_requests), live)
        usage = float(metrics.cache_usage) / 100.0
        return m.Stats(running, live - running, usage, self.steps, self.tokens, self.token_steps, self.drafted)

    def _score(self) -> list[m.ScoreOutput]:
        """One scoring chunk between engine steps (scorer.py); counts as progress for the watchdog."""
        out, self.scored = self.scored, []
        if self.scorer is not None and self.scorer.has_work():
            more, ran = self.scorer.work()
            out.extend(more)
            if ran:
                self.steps += 1
        return out

    def _scoring_busy(self) -> bool:
        return bool(self.scored) or (self.scorer is not None and self.scorer.has_work())

    def run(self) -> None:
        busy = False
        while not self.stopping:
            self._drain(block=not busy and not self.pending and not self._scoring_busy())
            if self.stopping:
                break
            if self.pipe.has_non_finished_requests():
                try:
                    self.pipe.step()
                except Exception as exc:
                    # The pipeline is not usable after a failed step (its block tables leak and
                    # every later step fails), so end every request and exit: the API process
                    # sees the core die and reports the engine unavailable instead of limping on.
                    log.exception("engine step failed; engine core exits")
                    for rid in list(self.handles):
                        failed = m.RequestError("engine", f"engine step failed: {exc}")
                        self.pending.append(m.RequestOutput(rid, [], None, failed))
                    self.handles.clear()
                    self.outbox.send(m.encode(m.StepOutputs(self.pending, m.Stats(0, 0, 0.0))))
                    self.failed = True
                    return
                self.steps += 1
            scored = self._score()
            outputs = self._collect()
            now_busy = self.pipe.has_non_finished_requests() or bool(self.handles) or self._scoring_busy()
            if outputs or scored or now_busy or busy:
                self.outbox.send(m.encode(m.StepOutputs(outputs, self._stats(), scored)), copy=False)
            busy = now_busy


def run_core(config: CoreConfig, input_addr: str, output_addr: str, log_level: str = "info") -> None:
    """Entry point of the engine-core process (multiprocessing, spawn)."""
    # Ctrl-C reaches the whole process group; the API process decides when the core stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(log_level)
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.PULL)
    inbox.connect(input_addr)
    outbox = ctx.socket(zmq.PUSH)
    outbox.connect(output_addr)
    if config.max_cpu_isa is not None:
        # oneDNN reads it once, when OpenVINO's CPU plugin first asks: nothing here imported OpenVINO yet
        # (tests/engine/unit/test_core_imports.py).
        os.environ[ISA_ENV] = config.max_cpu_isa
    try:
        import numpy as np
        import openvino as ov
        import openvino_genai as ov_genai

        sc = scheduler_config(ov_genai, config, config.num_kv_blocks)
        served = prepare_model(config)
        properties = pipeline_properties(config.plugin_config, config.prompt_lookup, config.int8_extension)
        if served.save_ir:
            properties["enable_save_ov_model"] = True  # OpenVINO GenAI writes the IR it builds beside the GGUF
        if config.draft_model is not None:
            properties["draft_model"] = pipeline_draft(ov_genai, config)
        log.info("loading %s on %s", served.path, config.device)
        if served.tokenizer_gguf is not None:  # the exact compressed IR, with the GGUF's own tokenizer
            tokenizer = ov_genai.Tokenizer(str(served.tokenizer_gguf))
            pipe = ov_genai.ContinuousBatchingPipeline(str(served.path), tokenizer, sc, config.device, **properties)
        else:
            pipe = ov_genai.ContinuousBatchingPipeline(str(served.path), sc, config.device, properties)
        started = time.monotonic()
        _warm_up(ov_genai, ov, np, pipe, config.warmup_grammars, config)
        if config.warmup_grammars:
            log.info("compiled %d grammar(s) in %.1f s", len(config.warmup_grammars), time.monotonic() - started)
        scorer = start_scorer(ov, np, config, served)
    except Exception as exc:
        log.exception("model load failed")
        outbox.send(m.encode(m.LoadFailed(error=str(exc))))
        outbox.close(linger=2000)
        inbox.close(linger=0)
        ctx.term()
        return
    outbox.send(m.encode(m.Ready(pid=os.getpid())))
    log.info("model loaded; engine loop running")
    loop = _Loop(ov_genai, ov, np, pipe, inbox, outbox, scorer, config.assistant_confidence_threshold)
    try:
        loop.run()
    finally:
        inbox.close(linger=0)
        outbox.close(linger=2000 if loop.failed else 0)
        ctx.term()
        log.info("engine core stopped")
    if loop.failed:
        sys.exit(3)
