"""The engine's Prometheus metrics, in a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .messages import Stats

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


class EngineMetrics:
    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("genmesh_engine_requests_running", "Requests being generated", registry=r)
        self.waiting = Gauge("genmesh_engine_requests_waiting", "Requests waiting for the scheduler", registry=r)
        self.kv_cache_usage = Gauge("genmesh_engine_kv_cache_usage_ratio", "KV cache in use (0-1)", registry=r)
        self.requests = Counter(
            "genmesh_engine_requests", "Finished requests", ["endpoint", "finish_reason"], registry=r
        )
        self.prompt_tokens = Counter("genmesh_engine_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("genmesh_engine_generation_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "genmesh_engine_time_to_first_token_seconds", "Time to first token", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.tpot = Histogram(
            "genmesh_engine_time_per_output_token_seconds",
            "Time per output token after the first",
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "genmesh_engine_e2e_request_latency_seconds",
            "End-to-end request latency",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.info = Gauge("genmesh_engine_model_info", "Served model", ["model"], registry=r)
        self.info.labels(model=model).set(1)

    def set_stats(self, stats: Stats) -> None:
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.kv_cache_usage.set(stats.cache_usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)
