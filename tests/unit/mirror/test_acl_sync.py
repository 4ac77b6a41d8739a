"""Topic ACL sync (mirror/acl_sync.py): MirrorMaker 2's conversion of a source topic ACL into the
target's, and the rounds: only what the target lacks is created, a cluster without an authorizer
is said once, a failure waits for the next round."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import pytest
import trio

import mirror.acl_sync as acl_sync
from broker.client import Client, ErrorCode, KafkaError
from mirror.acl_sync import PROBLEM, TopicAclSync, target_acl, target_acls
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

SELECTED = {"orders", "payments", "*"}


def remote(topic: str) -> str | None:
    return f"east.{topic}" if topic in SELECTED else None


def acl(name: str, operation: Operation, permission: Permission = Permission.ALLOW, *,
        pattern: PatternType = PatternType.LITERAL, resource: ResourceType = ResourceType.TOPIC,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(resource, name, pattern),
                      AccessControlEntry(principal, host, operation, permission))


@pytest.mark.parametrize(("source", "target"), [
    # Read and the other operations a reader needs are copied as they are, for the remote name.
    (acl("orders", Operation.READ), acl("east.orders", Operation.READ)),
    (acl("orders", Operation.DESCRIBE_CONFIGS, host="10.0.0.1"),
     acl("east.orders", Operation.DESCRIBE_CONFIGS, host="10.0.0.1")),
    # Only the mirror writes a copy: Allow Write is dropped, Allow All becomes Allow Read.
    (acl("orders", Operation.WRITE), None),
    (acl("orders", Operation.ALL, principal="User:bob"), acl("east.orders", Operation.READ, principal="User:bob")),
    # Deny stays Deny, whatever the operation: what the source forbids stays forbidden.
    (acl("orders", Operation.WRITE, Permission.DENY), acl("east.orders", Operation.WRITE, Permission.DENY)),
    (acl("orders", Operation.ALL, Permission.DENY), acl("east.orders", Operation.ALL, Permission.DENY)),
    # MM2 copies literal topic ACLs only, of topics the mirror selects.
    (acl("ord", Operation.READ, pattern=PatternType.PREFIXED), None),
    (acl("elsewhere", Operation.READ), None),
    (acl("orders", Operation.READ, resource=ResourceType.GROUP), None),
    # A literal `*` is a name like any other, as in MM2.
    (acl("*", Operation.READ), acl("east.*", Operation.READ)),
])
def test_a_source_topic_acl_becomes_mm2s_target_acl(source: AclBinding, target: AclBinding | None) -> None:
    assert target_acl(source, remote) == target


def test_converted_acls_are_listed_once() -> None:
    read_and_all = [acl("payments", Operation.READ), acl("payments", Operation.ALL), acl("payments", Operation.WRITE)]
    assert target_acls(read_and_all, remote) == [acl("east.payments", Operation.READ)]


class FakeClusters:
    """describe_acls and create_acls answered from memory, per client (source or target)."""

    def __init__(self) -> None:
        self.source = cast(Client, object())
        self.target = cast(Client, object())
        self.acls: dict[int, list[AclBinding]] = {id(self.source): [], id(self.target): []}
        self.disabled: set[int] = set()
        self.broken: set[int] = set()
        self.described: list[int] = []
        self.created: list[list[AclBinding]] = []

    async def describe_acls(self, client: Client, selected: AclBindingFilter) -> list[AclBinding]:
        self.described.append(id(client))
        if id(client) in self.disabled:
            raise KafkaError(ErrorCode.SECURITY_DISABLED, "describe ACLs: No Authorizer is configured.")
        if id(client) in self.broken:
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "describe ACLs")
        return [b for b in self.acls[id(client)] if selected.matches(b)]

    async def create_acls(self, client: Client, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        self.created.append(list(bindings))
        self.acls[id(client)].extend(bindings)
        return [None for _ in bindings]


@pytest.fixture
def clusters(monkeypatch: pytest.MonkeyPatch) -> FakeClusters:
    fake = FakeClusters()
    monkeypatch.setattr(acl_sync, "describe_acls", fake.describe_acls)
    monkeypatch.setattr(acl_sync, "create_acls", fake.create_acls)
    return fake


def syncer(clusters: FakeClusters, problems: dict[str, str] | None = None) -> TopicAclSync:
    return TopicAclSync(clusters.source, clusters.target, "east", "west", 10.0, remote,
                        {} if problems is None else problems, trio.Event())


async def test_a_round_creates_only_what_the_target_lacks(clusters: FakeClusters) -> None:
    clusters.acls[id(clusters.source)] += [acl("orders", Operation.READ), acl("orders", Operation.WRITE),
                                           acl("payments", Operation.ALL, principal="User:bob")]
    clusters.acls[id(clusters.target)].append(acl("east.orders", Operation.READ))
    sync = syncer(clusters)
    assert await sync.sync_once() == 1
    assert clusters.created == [[acl("east.payments", Operation.READ, principal="User:bob")]]
    assert await sync.sync_once() == 0  # nothing new: no write
    assert len(clusters.created) == 1


async def test_no_authorizer_is_said_once_and_nothing_is_created(
        clusters: FakeClusters, caplog: pytest.LogCaptureFixture) -> None:
    clusters.acls[id(clusters.source)].append(acl("orders", Operation.READ))
    clusters.disabled.add(id(clusters.target))
    sync = syncer(clusters)
    with caplog.at_level(logging.INFO, logger="mirror.acl_sync"):
        for _ in range(3):
            assert await sync.sync_once() == 0
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == ["no ACL authorizer is configured at the target cluster west, so no topic ACLs are synced; "
                    "consider setting sync.topic.acls.enabled: false"]
    assert clusters.created == []
    # A source without one: the target is not even asked.
    clusters.described.clear()
    clusters.disabled = {id(clusters.source)}
    assert await sync.sync_once() == 0
    assert clusters.described == [id(clusters.source)]


async def test_a_failed_round_waits_for_the_next_interval(clusters: FakeClusters,
                                                          autojump_clock: trio.testing.MockClock) -> None:
    clusters.acls[id(clusters.source)].append(acl("orders", Operation.READ))
    clusters.broken.add(id(clusters.source))
    problems: dict[str, str] = {}
    sync = syncer(clusters, problems)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sync.run)
        await trio.sleep(5)
        assert clusters.described == [], "the first round waits for the first topic discovery"
        sync.start_after.set()
        await trio.sleep(25)  # rounds at 5, 15 and 25 s: never sooner, however it fails
        assert len(clusters.described) == 3
        assert "CLUSTER_AUTHORIZATION_FAILED" in problems[PROBLEM]
        clusters.broken.clear()
        await trio.sleep(10)
        assert problems == {}
        assert clusters.created == [[acl("east.orders", Operation.READ)]]
        nursery.cancel_scope.cancel()
