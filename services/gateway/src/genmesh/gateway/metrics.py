"""The gateway's Prometheus metrics, in a registry of its own (no process-global state).

Queue depth and in-flight counts are read from Redis at scrape time, so every replica reports
the shared truth; the rest are this process's counters.
"""

from __future__ import annotations

from genmesh.protocol.server.metrics import Metrics, counter, gauge, histogram

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Latency buckets that suit an accelerator (tens of ms) and a CPU (seconds) alike; the engine's are the same.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
_AFFINITY = (
    "prefix-affinity decisions: hit (the prefix's upstream), fallback (imbalance guard, full or "
    "unhealthy: least-loaded instead), miss (prefix not known)"
)


class GatewayMetrics(Metrics):
    requests = counter("genmesh_gateway_requests", "Finished requests by HTTP status", "model", "status")
    queue_wait = histogram(
        "genmesh_gateway_queue_wait_seconds",
        "Time from arrival to a granted slot",
        "model",
        "priority",
        buckets=_WAIT_BUCKETS,
    )
    ttft = histogram(
        "genmesh_gateway_time_to_first_token_seconds",
        "Time from arrival at the gateway to the first generated token relayed (streams)",
        "model",
        buckets=_LATENCY_BUCKETS,
    )
    tpot = histogram(
        "genmesh_gateway_time_per_output_token_seconds",
        "Inter-token latency: a stream's time after its first token over its tokens after the first",
        "model",
        buckets=_TPOT_BUCKETS,
    )
    e2e = histogram(
        "genmesh_gateway_e2e_request_latency_seconds",
        "Time from arrival at the gateway to the end of a successful reply (queue wait included)",
        "model",
        buckets=_LATENCY_BUCKETS,
    )
    queue_depth = gauge("genmesh_gateway_queue_depth", "Requests waiting in Redis (all replicas)", "model", "priority")
    in_flight = gauge(
        "genmesh_gateway_upstream_in_flight", "Slot leases held on an upstream (all replicas)", "model", "upstream"
    )
    healthy = gauge(
        "genmesh_gateway_upstream_available", "1 when this gateway offers the upstream", "model", "upstream"
    )
    tokens = counter("genmesh_gateway_tokens", "Tokens by tenant", "tenant", "kind")
    audio_seconds = counter("genmesh_gateway_audio_seconds", "Seconds of audio transcribed, by tenant", "tenant")
    speech_characters = counter("genmesh_gateway_speech_characters", "Characters spoken, by tenant", "tenant")
    retries = counter("genmesh_gateway_upstream_retries", "Connect failures retried on another upstream", "model")
    upstream_requests = counter(
        "genmesh_gateway_upstream_requests",
        "Requests sent to an upstream (a retry or failover counts again on the next one)",
        "model",
        "upstream",
    )
    affinity = counter("genmesh_gateway_affinity", _AFFINITY, "model", "result")
    failovers = counter(
        "genmesh_gateway_failovers",
        "Streams continued on another upstream after theirs failed mid-stream",
        "model",
        "upstream",
    )
    queue_depth_kind = gauge(
        "genmesh_gateway_queue_depth_by_kind",
        "Requests waiting in Redis (all replicas): interactive, or batch lines",
        "model",
        "kind",
    )
    batch_lines = counter(
        "genmesh_gateway_batch_lines", "Batch lines this replica finished: completed or failed", "model", "outcome"
    )
    batch_preemptions = counter(
        "genmesh_gateway_batch_preemptions",
        "Batch lines aborted (and put back) to give their slot to a waiting interactive request",
        "model",
    )
    batch_running = gauge(
        "genmesh_gateway_batch_lines_running", "Batch lines holding a batch slot of the model (all replicas)", "model"
    )
    batch_queued = gauge(
        "genmesh_gateway_batch_lines_queued",
        "Lines of running batches not finished and not holding a batch slot (all replicas)",
        "model",
    )
    circuit_transitions = counter(
        "genmesh_gateway_circuit_transitions",
        "Circuit breaker transitions of an upstream: to closed, open or half-open; cause probe, "
        "request_failure, stall (the progress watch) or cooldown",
        "upstream",
        "to",
        "cause",
    )
    redis_errors = counter("genmesh_gateway_redis_errors", "Redis calls that failed")
    peers = gauge(
        "genmesh_gateway_peers",
        "Other gateway replicas with requests of the model, as of this gateway's last lease renewal",
        "model",
    )
