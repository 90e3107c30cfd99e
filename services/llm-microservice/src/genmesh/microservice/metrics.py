"""The microservice's Prometheus metrics, in a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class MicroserviceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "genmesh_microservice_requests", "Finished API requests", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "genmesh_microservice_request_duration_seconds",
            "Time from request to the end of the response (whole stream included)",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "genmesh_microservice_time_to_first_token_seconds",
            "Time from request to the first generated text relayed to the client (streams)",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("genmesh_microservice_requests_in_flight", "API requests being served", registry=r)
        self.stream_errors = Counter(
            "genmesh_microservice_stream_errors", "Streams ended by an error event", ["endpoint"], registry=r
        )
        self.readiness_checks = Counter(
            "genmesh_microservice_readiness_checks", "Engine /health calls made for readiness", ["result"], registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
