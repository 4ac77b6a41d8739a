"""What a request handler sees: the broker's parts and the request's origin.

This module sits below everything else in the server: the connection loop, the dispatcher and
the handlers all import it, and it imports none of them, so they never import each other in a
circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.protocol.headers import RequestHeader

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.controller.base import Controller
    from broker.coordinator.coordinator import GroupCoordinator
    from broker.replication.replica_manager import ReplicaManager
    from broker.server.fetch_sessions import FetchSessionCache

__all__ = ["BrokerServices", "ConnectionInfo", "RequestContext"]


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """Where a request came from: the listener it arrived on, the peer's address, and who the
    peer authenticated as (Kafka's principal: ``User:ANONYMOUS`` on a plaintext listener)."""

    listener_name: str
    peer: str
    security_protocol: str
    principal: str = "User:ANONYMOUS"


@dataclass(slots=True)
class BrokerServices:
    """The long-lived parts of a running broker that handlers use.

    ``controller`` is the :class:`~broker.controller.base.Controller` protocol, not a particular
    controller: handlers work the same whether metadata lives in the data dir or in ZooKeeper.
    What only ZooKeeper mode has, they get from ``controller.zookeeper()`` (None otherwise).
    """

    config: BrokerConfig
    controller: Controller
    replicas: ReplicaManager
    groups: GroupCoordinator | None = None
    fetch_sessions: FetchSessionCache | None = None  # None: every fetch is a full one


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
