"""The microservice's Prometheus metrics, in a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import Histogram

from genmesh.protocol.server.metrics import Family, Metrics, counter, gauge, histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def _timing(name: str, doc: str) -> Family[Histogram]:
    """A latency histogram by endpoint."""
    return histogram(name, doc, "endpoint", buckets=_LATENCY_BUCKETS)


class MicroserviceMetrics(Metrics):
    requests = counter("genmesh_microservice_requests", "Finished API requests", "endpoint", "status")
    latency = _timing(
        "genmesh_microservice_request_duration_seconds",
        "Time from request to the end of the response (whole stream included)",
    )
    first_token = _timing(
        "genmesh_microservice_time_to_first_token_seconds",
        "Time from request to the first generated text relayed to the client (streams)",
    )
    in_flight = gauge("genmesh_microservice_requests_in_flight", "API requests being served")
    stream_errors = counter("genmesh_microservice_stream_errors", "Streams ended by an error event", "endpoint")
    readiness_checks = counter(
        "genmesh_microservice_readiness_checks", "Engine /health calls made for readiness", "result"
    )
