"""A service's Prometheus metrics, declared on a class and made in a registry of its own.

No process-global state: each ``Metrics`` instance has its own ``CollectorRegistry``, so two
apps in one process (the tests) do not share counters. A subclass declares its families::

    class GatewayMetrics(Metrics):
        requests = counter("genmesh_gateway_requests", "Finished requests by HTTP status", "model", "status")

and ``GatewayMetrics().requests`` is that ``Counter``, made in the instance's registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from .tracing import tracing

M = TypeVar("M", bound=MetricWrapperBase)


class Family(Generic[M]):
    """One metric family declared on a ``Metrics`` class; each instance makes its own."""

    def __init__(self, kind: type[M], name: str, doc: str, labels: Sequence[str], **options: Any) -> None:
        self.kind = kind
        self.name = name
        self.doc = doc
        self.labels = tuple(labels)
        self.options = options
        self.attr = name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def make(self, registry: CollectorRegistry) -> M:
        return self.kind(self.name, self.doc, self.labels, registry=registry, **self.options)

    @overload
    def __get__(self, obj: None, owner: type) -> Family[M]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> M: ...
    def __get__(self, obj: object | None, owner: type) -> Family[M] | M:
        if obj is None:
            return self
        made: M = obj.__dict__[self.attr]  # made by Metrics.__init__; shadows this descriptor from then on
        return made


def counter(name: str, doc: str, *labels: str) -> Family[Counter]:
    return Family(Counter, name, doc, labels)


def gauge(name: str, doc: str, *labels: str) -> Family[Gauge]:
    return Family(Gauge, name, doc, labels)


def histogram(name: str, doc: str, *labels: str, buckets: Sequence[float]) -> Family[Histogram]:
    return Family(Histogram, name, doc, labels, buckets=tuple(buckets))


class DroppedSpans(Collector):
    """``genmesh_tracing_dropped_spans_total``: spans the process dropped because its export queue was
    full (a slow or absent collector); read from the process's tracing when scraped."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        doc = "Trace spans dropped because the export queue was full (collector slow or down)"
        yield CounterMetricFamily("genmesh_tracing_dropped_spans", doc, value=tracing().dropped_spans)


class Metrics:
    """The families declared on the subclass, made in a registry of this instance's own, and the
    process's dropped-spans counter."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(DroppedSpans())
        for cls in reversed(type(self).__mro__):
            for attr, value in vars(cls).items():
                if isinstance(value, Family):
                    self.__dict__[attr] = value.make(self.registry)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
