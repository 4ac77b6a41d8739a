"""What a request handler sees: the broker's parts and the request's origin.

This module sits below everything else in the server: the connection loop, the dispatcher and
the handlers all import it, and it imports none of them, so they never import each other in a
circle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.log_limits import RepeatLimiter
from broker.protocol.api import ApiKey
from broker.protocol.headers import RequestHeader
from security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType
from security.authorizer import OPERATIONS_NOT_REQUESTED

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.controller.base import Controller
    from broker.coordinator.coordinator import GroupCoordinator
    from broker.coordinator.txn_coordinator import TransactionCoordinator
    from broker.replication.replica_manager import ReplicaManager
    from broker.server.acl_store import AclStore
    from broker.server.fetch_sessions import FetchSessionCache
    from broker.server.txn_verification import TxnVerifier
    from broker.server.user_configs import UserConfigs

__all__ = ["CLUSTER_DENIED", "BrokerServices", "ConnectionInfo", "RequestContext"]


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """Where a request came from: the listener it arrived on, the peer's address, and who the
    peer authenticated as (Kafka's principal: ``User:ANONYMOUS`` on a plaintext listener)."""

    listener_name: str
    peer: str
    security_protocol: str
    principal: str = "User:ANONYMOUS"

    @property
    def host(self) -> str:
        """The peer's address without its port, as ACL host filters name it."""
        host = self.peer.rpartition(":")[0] or self.peer
        return host[1:-1] if host.startswith("[") else host


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
    acls: AclStore | None = None  # None: no authorizer.class.name, every request is allowed
    users: UserConfigs | None = None  # users' configs (SCRAM credentials): ZooKeeper's, or the data dir's
    transactions: TransactionCoordinator | None = None  # None: transactional ids are refused
    # Asks the coordinators before a transactional write (KIP-890); None: no verification.
    txn_verifier: TxnVerifier | None = None


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

    # -- authorization (Kafka's KafkaApis.authorize helpers) ----------------------------------------

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
        """May this request's principal do ``operation`` on the resource? Always, without an
        authorizer. A denial is logged (rate-limited), as Kafka's authorizer logger does, unless
        ``log_denied`` is false (Kafka's ``logIfDenied``) for a check that only filters what is
        listed, or that has another way in (Create on the cluster before Create on the topic)."""
        acls = self.services.acls
        if acls is None:
            return True
        allowed = acls.authorizer.authorize(self.connection.principal, self.connection.host, operation,
                                            resource_type, name)
        if not allowed and log_denied:
            _denials.info(f"denied {operation.name}",
                          "Principal = %s is Denied operation = %s from host = %s on resource = %s:%s for "
                          "request = %s", self.connection.principal, operation.title, self.connection.host,
                          resource_type.title, name, _api_name(self.header.api_key))
        return allowed

    def authorize_cluster(self, operation: Operation, *, log_denied: bool = True) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def authorize_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on some resource of the type (KIP-679)?"""
        acls = self.services.acls
        return acls is None or acls.authorizer.authorize_any(self.connection.principal, self.connection.host,
                                                             operation, resource_type)

    def authorized_operations(self, requested: bool, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations field: Kafka's INT_MIN when not ``requested``; every
        operation of the type when there is no authorizer."""
        if not requested:
            return OPERATIONS_NOT_REQUESTED
        acls = self.services.acls
        if acls is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        return acls.authorizer.authorized_operations(self.connection.principal, self.connection.host,
                                                     resource_type, name)


# Kafka's message for CLUSTER_AUTHORIZATION_FAILED, in every answer that carries one.
CLUSTER_DENIED = "Cluster authorization failed."
_denials = RepeatLimiter(logging.getLogger("kafka.authorizer.logger"))


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
