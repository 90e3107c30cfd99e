"""What the status board reads: the gateway's parts, named by type, so the board sits below the state.

:class:`GatewayState` satisfies :class:`BoardSources` structurally; the console never imports it.
"""

from __future__ import annotations

from typing import Protocol

from redis.asyncio import Redis

from ..admission.queue import Admission
from ..redis.keys import KeySpace
from ..redis.scripts import Scripts
from ..routing.config import RoutingConfig
from ..routing.upstreams import Pool
from ..settings import GatewaySettings
from .activity import Activity


class BoardSources(Protocol):
    @property
    def settings(self) -> GatewaySettings: ...
    @property
    def redis(self) -> Redis: ...
    @property
    def keyspace(self) -> KeySpace: ...
    @property
    def scripts(self) -> Scripts: ...
    @property
    def admission(self) -> Admission: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def config(self) -> RoutingConfig: ...
    @property
    def activity(self) -> Activity: ...
    @property
    def auth_required(self) -> bool: ...
