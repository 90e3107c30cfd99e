"""The engine's Prometheus metrics, in a registry of its own (no process-global state).

Every series carries a ``model`` label, so one ``/metrics`` page serves several models;
``EngineMetrics`` is one model's view with that label bound.
"""

from __future__ import annotations

from prometheus_client import Counter

from genmesh.protocol.server.metrics import Metrics, counter, gauge, histogram

from .core.ipc import Stats

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Why a core is replaced (supervisor.py): each series exists at 0 from the start, so that
# increase() sees the first restart (a counter series born at 1 reads as no increase).
CORE_RESTART_CAUSES = ("exited", "hung", "start_failed")
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


class MetricFamilies(Metrics):
    """The metric families of one engine server, shared by its models."""

    running = gauge("genmesh_engine_requests_running", "Requests being generated", "model")
    waiting = gauge("genmesh_engine_requests_waiting", "Requests waiting for the scheduler", "model")
    kv_cache_usage = gauge("genmesh_engine_kv_cache_usage_ratio", "KV cache in use (0-1)", "model")
    requests = counter("genmesh_engine_requests", "Finished requests", "model", "endpoint", "finish_reason")
    prompt_tokens = counter("genmesh_engine_prompt_tokens", "Prompt tokens processed", "model")
    generation_tokens = counter("genmesh_engine_generation_tokens", "Tokens generated", "model")
    ttft = histogram(
        "genmesh_engine_time_to_first_token_seconds", "Time to first token", "model", buckets=_LATENCY_BUCKETS
    )
    tpot = histogram(
        "genmesh_engine_time_per_output_token_seconds",
        "Time per output token after the first",
        "model",
        buckets=_TPOT_BUCKETS,
    )
    e2e = histogram(
        "genmesh_engine_e2e_request_latency_seconds", "End-to-end request latency", "model", buckets=_LATENCY_BUCKETS
    )
    info = gauge("genmesh_engine_model_info", "Served model", "model")
    # embedding models (embeddings/): inputs embedded and the batches they ran in (inputs / batches: batch size)
    embedding_inputs = counter("genmesh_embedding_inputs", "Inputs embedded", "model")
    embedding_batches = counter("genmesh_embedding_batches", "Embedding batches run", "model")
    core_restarts = counter(
        "genmesh_engine_core_restarts",
        "Engine cores started to replace one that died (cause: exited, hung, start_failed)",
        "model",
        "cause",
    )
    # Drafting (speculative decoding with --draft-model, or prompt lookup): each request-step gives the
    # served model's token plus the draft tokens it accepted. Accepted per step: accepted / steps;
    # acceptance rate: accepted / drafted (drafted counts num_assistant_tokens drafts only).
    draft_steps = counter("genmesh_engine_spec_decode_steps", "Request-steps that gave tokens", "model")
    draft_accepted = counter("genmesh_engine_spec_decode_accepted_tokens", "Draft tokens accepted", "model")
    draft_proposed = counter("genmesh_engine_spec_decode_draft_tokens", "Draft tokens proposed", "model")
    # every servable of every kind (openai/model_status.py): the gateway's console shows a failed one
    model_ready = gauge(
        "genmesh_engine_model_ready",
        "1 while the model serves; 0 while it loads, its core restarts, or after it failed to load (why: /v1/config)",
        "model",
        "kind",
    )
    model_load_failed = gauge(
        "genmesh_engine_model_load_failed",
        "1 for a model that failed to load and is skipped while the others serve (why: /v1/config)",
        "model",
        "kind",
    )
    core_uptime = gauge(
        "genmesh_engine_core_uptime_seconds", "Seconds the serving engine core has been up (0: none)", "model"
    )


class _RequestCounter:
    """``requests.labels(endpoint=..., finish_reason=...)`` with the model label already set."""

    def __init__(self, family: Counter, model: str) -> None:
        self._family = family
        self._model = model

    def labels(self, *, endpoint: str, finish_reason: str) -> Counter:
        return self._family.labels(model=self._model, endpoint=endpoint, finish_reason=finish_reason)


class EngineMetrics:
    """One model's metrics."""

    def __init__(self, model: str, families: MetricFamilies | None = None) -> None:
        f = families if families is not None else MetricFamilies()
        self.families = f
        self.running = f.running.labels(model=model)
        self.waiting = f.waiting.labels(model=model)
        self.kv_cache_usage = f.kv_cache_usage.labels(model=model)
        self.requests = _RequestCounter(f.requests, model)
        self.prompt_tokens = f.prompt_tokens.labels(model=model)
        self.generation_tokens = f.generation_tokens.labels(model=model)
        self.ttft = f.ttft.labels(model=model)
        self.tpot = f.tpot.labels(model=model)
        self.e2e = f.e2e.labels(model=model)
        self.core_uptime = f.core_uptime.labels(model=model)
        self._drafting = (f.draft_steps.labels(model=model), f.draft_accepted.labels(model=model))
        self._draft_proposed = f.draft_proposed.labels(model=model)
        self._last_draft = (0, 0, 0)  # the core's cumulative (steps, accepted, proposed) last seen
        self._model = model
        self.model = model
        self.last_waiting = 0  # the core's last report, for traces (client/request_trace.py)
        f.info.labels(model=model).set(1)
        for cause in CORE_RESTART_CAUSES:
            f.core_restarts.labels(model=model, cause=cause)

    def core_restarted(self, cause: str) -> None:
        self.families.core_restarts.labels(model=self._model, cause=cause).inc()

    def set_stats(self, stats: Stats) -> None:
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.last_waiting = stats.waiting
        self.kv_cache_usage.set(stats.cache_usage)
        now = (stats.token_steps, stats.tokens - stats.token_steps, stats.drafted)
        # A new core counts from zero again: then all of its counts are new.
        last = self._last_draft if all(n >= p for n, p in zip(now, self._last_draft, strict=True)) else (0, 0, 0)
        steps, accepted = self._drafting
        steps.inc(now[0] - last[0])
        accepted.inc(now[1] - last[1])
        self._draft_proposed.inc(now[2] - last[2])
        self._last_draft = now

    def render(self) -> bytes:
        return self.families.render()
