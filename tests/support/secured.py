"""A broker with ACLs on, its users, and confluent-kafka configs that log in as them.

The broker serves SASL_PLAINTEXT with PLAIN users ``admin`` (a super user), ``alice``, ``bob``
and ``mirror`` (password ``<name>-secret``), Kafka's authorizer and its defaults
(``allow.everyone.if.no.acl.found=false``): a user may do only what an ACL allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from deploy.broker_process import BrokerProcess

USERS = ("admin", "alice", "bob", "mirror")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";")
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
TIMEOUT_S = 30


def acl_broker(data_dir: Path, *overrides: str) -> BrokerProcess:
    """A standalone broker (not started) with ACLs on and one SASL_PLAINTEXT listener."""
    return BrokerProcess(data_dir, overrides=(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"authorizer.class.name={AUTHORIZER}",
        "super.users=User:admin",
        "group.initial.rebalance.delay.ms=0",  # groups form at once: the ACLs are the subject
        *overrides))


def login(broker: BrokerProcess, user: str, **extra: object) -> dict[str, object]:
    """A confluent-kafka config that logs in to ``broker`` as ``user``."""
    return {"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret", **extra}


def admin(broker: BrokerProcess, user: str = "admin") -> AdminClient:
    return AdminClient(login(broker, user))


def allow(principal: str, resource_type: ResourceType, name: str, operation: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, AclPermissionType.ALLOW)


def deny(principal: str, resource_type: ResourceType, name: str, operation: AclOperation,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, AclPermissionType.DENY)


def grant(broker: BrokerProcess, bindings: Sequence[AclBinding]) -> None:
    """Create ``bindings`` as the super user; raises when one is refused."""
    client = admin(broker)  # held: librdkafka fails the futures of a handle that is gone
    for future in client.create_acls(list(bindings), request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def revoke(broker: BrokerProcess, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
    removed: list[AclBinding] = []
    client = admin(broker)
    for future in client.delete_acls(list(filters), request_timeout=TIMEOUT_S).values():
        removed.extend(future.result(timeout=TIMEOUT_S))
    return removed
