"""Kafka's ACL znodes through a broker's ZooKeeper session (broker/controller/zk/acls.py) and the
store above them (broker/server/zk_acl_store.py), against a real ZooKeeper: a write that loses a
race is read again and retried, notifications there before the watch are handed over and expired
ones purged, and what cannot be read is skipped (a damaged pattern failing closed)."""

from __future__ import annotations

import pytest
import trio
from kazoo.client import KazooClient

from broker.controller.base import AclZnode
from broker.controller.zk import acls as zk_acls
from broker.controller.zk.acls import ZkAclZnodes
from broker.controller.zk.client import open_zk_client
from broker.server.zk_acl_store import ZkAclStore
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    decode_entries,
    encode_entries,
)
from security.authorizer import Authorizer
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

ORDERS = AclZnode("LITERAL", "Topic", "orders")


def _entry(principal: str, operation: Operation = Operation.READ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", operation, Permission.ALLOW)


async def test_an_update_that_loses_a_race_reads_again_and_keeps_both_writes(zookeeper: ZooKeeperServer) -> None:
    other = KazooClient(hosts=zookeeper.connect)
    other.start(timeout=15)
    try:
        async with open_zk_client(zookeeper.connect, session_timeout_ms=6000) as zk:
            znodes = ZkAclZnodes(zk)
            await znodes.prepare(["Topic"])
            seen: list[bytes | None] = []

            def add_alice(data: bytes | None) -> bytes | None:
                seen.append(data)
                if len(seen) == 1:  # another writer (kafka-acls, another broker) gets in between
                    other.create("/kafka-acl/Topic/orders", encode_entries({_entry("User:bob")}))
                current = decode_entries(data) if data is not None else frozenset()
                return encode_entries(current | {_entry("User:alice")})

            before, after = await znodes.update(ORDERS, add_alice)
            assert seen[0] is None and seen[1] is not None and before == seen[1]
            assert after is not None and decode_entries(after) == {_entry("User:alice"), _entry("User:bob")}
            assert decode_entries(other.get("/kafka-acl/Topic/orders")[0]) == decode_entries(after)
            # No entries left: the znode goes, as Kafka's AclAuthorizer deletes it.
            await znodes.update(ORDERS, lambda data: None)
            assert other.exists("/kafka-acl/Topic/orders") is None
    finally:
        other.stop()
        other.close()


async def test_notifications_already_there_are_handed_over_and_expired_ones_purged(
        zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_zk_client(zookeeper.connect, session_timeout_ms=6000) as zk:
        znodes = ZkAclZnodes(zk)
        await znodes.prepare(["Topic"])
        await znodes.announce("LITERAL", b"TOPIC:early")
        batches: list[tuple[str, list[bytes]]] = []

        async def record(path: str, payloads: object) -> None:
            batches.append((path, list(payloads)))  # type: ignore[call-overload]

        monkeypatch.setattr(zk_acls, "ACL_CHANGE_EXPIRY_MS", 0)  # every handled one has expired
        async with trio.open_nursery() as nursery:
            await nursery.start(znodes.follow, record)
            assert batches == [("/kafka-acl-changes", [b"TOPIC:early"])]
            await znodes.announce("PREFIXED", b'{"version":1}')
            await wait_for(lambda: len(batches) == 2, what="the extended notification")
            assert batches[1] == ("/kafka-acl-extended-changes", [b'{"version":1}'])
            await znodes.announce("LITERAL", b"TOPIC:late")
            await wait_for(lambda: len(batches) == 3, what="the second literal notification")
            assert batches[2] == ("/kafka-acl-changes", [b"TOPIC:late"])
            # The batch after it purged the one handled before (expired).
            assert len(await zk.get_children("/kafka-acl-changes")) == 1
            nursery.cancel_scope.cancel()


async def test_the_store_skips_what_it_cannot_read_and_a_damaged_pattern_denies_what_it_covers(
        zookeeper: ZooKeeperServer) -> None:
    other = KazooClient(hosts=zookeeper.connect)
    other.start(timeout=15)
    try:
        other.create("/kafka-acl/Topic/orders", encode_entries({_entry("User:alice")}), makepath=True)
        other.create("/kafka-acl/Topic/*", encode_entries({_entry("User:*", Operation.DESCRIBE)}), makepath=True)
        other.create("/kafka-acl/Topic/broken", b'{"version":1,"acls":[{"principal":"User:x"}]}')
        other.create("/kafka-acl/NoSuchType/x", b"{}", makepath=True)
        async with open_zk_client(zookeeper.connect, session_timeout_ms=6000) as zk:
            authorizer = Authorizer()
            store = ZkAclStore(ZkAclZnodes(zk), authorizer)
            await store.load()
            assert [str(b) for b in authorizer.bindings()] == [
                "Topic:LITERAL:* Allow User:* Describe from *", "Topic:LITERAL:orders Allow User:alice Read from *"]
            # The wildcard lets everyone describe any topic, but not the damaged one's.
            assert authorizer.authorize("User:bob", "h", Operation.DESCRIBE, ResourceType.TOPIC, "other")
            assert not authorizer.authorize("User:bob", "h", Operation.DESCRIBE, ResourceType.TOPIC, "broken")
            async with trio.open_nursery() as nursery:
                await nursery.start(store.follow)
                for garbage in (b"", b"no colon", b"\xff\xfe", b"ANY:x", b"TOPIC:", b"Martian:x", b"TOPIC:a/b",
                                b"TOPIC:.."):
                    other.create("/kafka-acl-changes/acl_changes_", garbage, sequence=True)
                for garbage in (b"[]", b'{"version":2,"resourceType":"TOPIC","name":"a","patternType":"PREFIXED"}',
                                b'{"version":1,"resourceType":"TOPIC","name":"a","patternType":"MATCH"}', b"{"):
                    other.create("/kafka-acl-extended-changes/acl_changes_", garbage, sequence=True)
                # Repaired by a write of the store's own: in force, readable, announced.
                other.delete("/kafka-acl/Topic/broken")
                await store.create([AclBinding(ResourcePattern(ResourceType.TOPIC, "broken", PatternType.LITERAL),
                                               _entry("User:carol"))])
                assert authorizer.authorize("User:bob", "h", Operation.DESCRIBE, ResourceType.TOPIC, "broken")
                # A prefixed ACL another writer adds is followed.
                other.create("/kafka-acl-extended/prefixed/Topic/pay-", encode_entries({_entry("User:dave")}),
                             makepath=True)
                other.create("/kafka-acl-extended-changes/acl_changes_",
                             b'{"version":1,"resourceType":"TOPIC","name":"pay-","patternType":"PREFIXED"}',
                             sequence=True)
                await wait_for(lambda: authorizer.authorize("User:dave", "h", Operation.READ, ResourceType.TOPIC,
                                                            "pay-1"), what="the prefixed ACL in force")
                removed = await store.delete([AclBindingFilter(principal="User:alice"), AclBindingFilter()])
                assert [[str(b) for b in found] for found in removed][0] == [
                    "Topic:LITERAL:orders Allow User:alice Read from *"]
                assert "User:alice" not in str(removed[1])  # each deletion is reported once
                assert list(authorizer.bindings()) == []
                nursery.cancel_scope.cancel()
    finally:
        other.stop()
        other.close()
