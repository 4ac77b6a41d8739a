"""What a request handler sees: the broker's parts and the request's origin."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.protocol.headers import RequestHeader

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.controller.standalone import StandaloneController
    from broker.coordinator.coordinator import GroupCoordinator
    from broker.replication.replica_manager import ReplicaManager
    from broker.server.connection import ConnectionInfo

__all__ = ["BrokerServices", "RequestContext", "now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class BrokerServices:
    """The long-lived parts of a running broker that handlers use."""

    config: BrokerConfig
    controller: StandaloneController
    replicas: ReplicaManager
    groups: GroupCoordinator | None = None


@dataclass(frozen=True, slots=True)
class RequestContext:
    services: BrokerServices
    header: RequestHeader
    connection: ConnectionInfo

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def config(self) -> BrokerConfig:
        return self.services.config
