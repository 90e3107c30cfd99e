"""The gateway's Prometheus metrics, in a registry of its own (no process-global state).

Queue depth and in-flight counts are read from Redis at scrape time, so every replica reports
the shared truth; the rest are this process's counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "genmesh_gateway_requests", "Finished requests by HTTP status", ["model", "status"], registry=r
        )
        self.queue_wait = Histogram(
            "genmesh_gateway_queue_wait_seconds",
            "Time from arrival to a granted slot",
            ["model", "priority"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "genmesh_gateway_queue_depth", "Requests waiting in Redis (all replicas)", ["model", "priority"], registry=r
        )
        self.in_flight = Gauge(
            "genmesh_gateway_upstream_in_flight",
            "Slot leases held on an upstream (all replicas)",
            ["model", "upstream"],
            registry=r,
        )
        self.healthy = Gauge(
            "genmesh_gateway_upstream_available",
            "1 when this gateway offers the upstream",
            ["model", "upstream"],
            registry=r,
        )
        self.tokens = Counter("genmesh_gateway_tokens", "Tokens by tenant", ["tenant", "kind"], registry=r)
        self.retries = Counter(
            "genmesh_gateway_upstream_retries", "Connect failures retried on another upstream", ["model"], registry=r
        )
        self.upstream_requests = Counter(
            "genmesh_gateway_upstream_requests",
            "Requests sent to an upstream (a retry or failover counts again on the next one)",
            ["model", "upstream"],
            registry=r,
        )
        self.affinity = Counter(
            "genmesh_gateway_affinity",
            "prefix-affinity decisions: hit (the prefix's upstream), fallback (imbalance guard, full or "
            "unhealthy: least-loaded instead), miss (prefix not known)",
            ["model", "result"],
            registry=r,
        )
        self.failovers = Counter(
            "genmesh_gateway_failovers",
            "Streams continued on another upstream after theirs failed mid-stream",
            ["model", "upstream"],
            registry=r,
        )
        self.redis_errors = Counter("genmesh_gateway_redis_errors", "Redis calls that failed", registry=r)
        self.peers = Gauge(
            "genmesh_gateway_peers",
            "Other gateway replicas with requests of the model, as of this gateway's last lease renewal",
            ["model"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
