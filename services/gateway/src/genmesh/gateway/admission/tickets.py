"""A request's place in admission (``Ticket``) and the ways admission refuses it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..routing.config import ModelRoute

BATCH_PRIORITY = -1  # batch lines: below every interactive priority (0-9)
BATCH_CLASS = "b"  # their queue class, sorted after the interactive classes "0".."9"


class QueueFull(Exception):
    pass


class QueueTimeout(Exception):
    pass


class NoUpstream(Exception):
    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # when an upstream is probed next (None: the route's)


@dataclass
class Ticket:
    """One request's place in admission: queued, then holding a lease on ``upstream``."""

    id: str
    route: ModelRoute
    tenant: str
    priority: int
    arrived: float = field(default_factory=time.monotonic)
    upstream: int | None = None
    position: int = 0
    granted_at: float | None = None
    prefix: tuple[str, ...] = ()  # the prompt's prefix block hashes (prefix-affinity), shortest first
    affinity: str = ""  # how the prefix routed it: hit, fallback, miss ("" when queued or not affine)
    # the deadline of its first admission's Redis work (limits, the admit script): None once it is
    # queued or holds a slot (a later admission, after a wait or for a failover, has its own)
    admit_by: float | None = None

    @property
    def klass(self) -> str:
        return BATCH_CLASS if self.priority == BATCH_PRIORITY else str(9 - self.priority)

    @property
    def priority_label(self) -> str:
        return "batch" if self.priority == BATCH_PRIORITY else str(self.priority)

    def waited_s(self) -> float:
        return (self.granted_at or time.monotonic()) - self.arrived
