"""The engine-core process: owns the ContinuousBatchingPipeline and runs the step loop.

``ContinuousBatchingPipeline.step()`` holds the GIL for the whole step, so it runs here, in a
process of its own, and never in the HTTP process. The loop steps while any request is
unfinished and otherwise blocks on its input socket (as OVMS's LLM executor does). Each step
sends one ``StepOutputs`` message with the new tokens of every request.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from dataclasses import dataclass, field
from typing import Any

import zmq

from genmesh.protocol.logs import configure_logging

from . import messages as m

log = logging.getLogger("genmesh.engine.core")

IDLE_POLL_MS = 1000  # while idle, wake this often to notice an orphaned core


@dataclass(frozen=True)
class CoreConfig:
    model_path: str
    device: str
    cache_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dynamic_split_fuse: bool
    enable_prefix_caching: bool
    plugin_config: dict[str, Any] = field(default_factory=dict)


def _generation_config(ov_genai: Any, params: m.SamplingParams) -> Any:
    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens = params.max_new_tokens
    gc.ignore_eos = params.ignore_eos
    if params.temperature > 0.0:
        gc.do_sample = True
        gc.temperature = params.temperature
        gc.top_p = params.top_p
        if params.top_k > 0:
            gc.top_k = params.top_k
        gc.rng_seed = params.seed if params.seed is not None else random.getrandbits(31)
    else:
        gc.do_sample = False
    return gc


class _Loop:
    def __init__(
        self, ov_genai: Any, ov: Any, np: Any, pipe: Any, inbox: zmq.Socket[bytes], outbox: zmq.Socket[bytes]
    ) -> None:
        self.ov_genai = ov_genai
        self.ov = ov
        self.np = np
        self.pipe = pipe
        self.inbox = inbox
        self.outbox = outbox
        self.handles: dict[int, Any] = {}
        self.pending: list[m.RequestOutput] = []
        self.status = ov_genai.GenerationStatus
        self.finish = {
            ov_genai.GenerationFinishReason.STOP: "stop",
            ov_genai.GenerationFinishReason.LENGTH: "length",
        }
        self.parent = os.getppid()
        self.stopping = False

    # -- input -------------------------------------------------------------------------
    def _handle(self, msg: m.ToCore) -> None:
        if isinstance(msg, m.AddRequest):
            try:
                ids = self.np.asarray([msg.prompt_ids], dtype=self.np.int64)
                handle = self.pipe.add_request(
                    msg.request_id, self.ov.Tensor(ids), _generation_config(self.ov_genai, msg.params)
                )
            except Exception as exc:  # a bad request must not kill the core
                self.pending.append(m.RequestOutput(msg.request_id, [], "error", f"engine rejected the request: {exc}"))
            else:
                self.handles[msg.request_id] = handle
        elif isinstance(msg, m.Abort):
            for rid in msg.request_ids:
                handle = self.handles.pop(rid, None)
                if handle is not None:
                    handle.cancel()
        elif isinstance(msg, m.Shutdown):
            self.stopping = True

    def _drain(self, block: bool) -> None:
        if block and not self.inbox.poll(IDLE_POLL_MS):
            if os.getppid() != self.parent:
                log.warning("API process is gone; engine core exits")
                self.stopping = True
            else:
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
        for rid, handle in self.handles.items():
            tokens: list[int] = []
            reason: str | None = None
            if handle.can_read():
                for out in handle.read().values():
                    tokens.extend(out.generated_ids)
                    reason = self.finish.get(out.finish_reason, reason)
            status = handle.get_status()
            error: str | None = None
            if status != self.status.RUNNING:
                done.append(rid)
                if reason is None:
                    if status == self.status.IGNORED:
                        reason, error = "error", "the scheduler dropped the request: KV cache too small for it"
                    elif status == self.status.FINISHED:
                        reason = "stop"
                    else:
                        reason = "abort"
            if tokens or reason is not None:
                outputs.append(m.RequestOutput(rid, tokens, reason, error))
        for rid in done:
            del self.handles[rid]
        return outputs

    def _stats(self) -> m.Stats:
        metrics = self.pipe.get_metrics()
        live = len(self.handles)
        running = min(int(metrics.scheduled_requests), live)
        return m.Stats(running=running, waiting=live - running, cache_usage=float(metrics.cache_usage) / 100.0)

    def run(self) -> None:
        busy = False
        while not self.stopping:
            self._drain(block=not busy and not self.pending)
            if self.stopping:
                break
            if self.pipe.has_non_finished_requests():
                try:
                    self.pipe.step()
                except Exception as exc:
                    log.exception("engine step failed")
                    for rid in list(self.handles):
                        self.pending.append(m.RequestOutput(rid, [], "error", f"engine step failed: {exc}"))
                    self.handles.clear()
            outputs = self._collect()
            now_busy = self.pipe.has_non_finished_requests() or bool(self.handles)
            if outputs or now_busy or busy:
                self.outbox.send(m.encode(m.StepOutputs(outputs, self._stats())), copy=False)
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
    try:
        import numpy as np
        import openvino as ov
        import openvino_genai as ov_genai

        sc = ov_genai.SchedulerConfig()
        sc.cache_size = config.cache_size
        sc.max_num_seqs = config.max_num_seqs
        sc.max_num_batched_tokens = config.max_num_batched_tokens
        sc.dynamic_split_fuse = config.dynamic_split_fuse
        sc.enable_prefix_caching = config.enable_prefix_caching
        log.info("loading %s on %s", config.model_path, config.device)
        pipe = ov_genai.ContinuousBatchingPipeline(config.model_path, sc, config.device, config.plugin_config)
    except Exception as exc:
        log.exception("model load failed")
        outbox.send(m.encode(m.LoadFailed(error=str(exc))))
        outbox.close(linger=2000)
        inbox.close(linger=0)
        ctx.term()
        return
    outbox.send(m.encode(m.Ready(pid=os.getpid())))
    log.info("model loaded; engine loop running")
    try:
        _Loop(ov_genai, ov, np, pipe, inbox, outbox).run()
    finally:
        inbox.close(linger=0)
        outbox.close(linger=0)
        ctx.term()
        log.info("engine core stopped")
