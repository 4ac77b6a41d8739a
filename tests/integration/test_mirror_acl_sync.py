"""Topic ACL sync between two brokers with ACLs on, judged by librdkafka's admin client: the
source's topic ACLs appear at the target converted as MirrorMaker 2 converts them (Allow Write
dropped, Allow All made Read, Deny kept, prefixed ones and unselected topics left out), and an
ACL added at the source follows at the next round; a target without an authorizer has nothing to
sync. The mirror logs in to the clusters with ACLs as a super user."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from deploy.broker_process import BrokerProcess
from tests.integration.mirror_process import start_mirror
from tests.support.polling import wait_until
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, deny, grant

TOPIC_ACLS = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    source = acl_broker(tmp_path_factory.mktemp("east") / "data")
    target = acl_broker(tmp_path_factory.mktemp("west") / "data")
    source.start()
    try:
        target.start()
        try:
            yield source, target
        finally:
            target.stop()
    finally:
        source.stop()


# The mirror's `properties` for both clusters: the super user (the brokers check every request).
AS_ADMIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                'username="admin" password="admin-secret";'}


def _create_topic(broker: BrokerProcess, name: str) -> None:
    client = admin(broker)  # held: librdkafka fails the futures of a handle that is gone
    client.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=TIMEOUT_S)


def _topic_acls(broker: BrokerProcess, names: set[str]) -> set[str]:
    """The broker's topic ACLs on `names`, one line each."""
    client = admin(broker)
    found: list[AclBinding] = client.describe_acls(TOPIC_ACLS, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return {f"{b.resource_pattern_type.name}:{b.name} {b.permission_type.name} {b.principal} {b.operation.name} "
            f"{b.host}" for b in found if b.name in names}


def _endpoint(alias: str, broker: BrokerProcess) -> dict[str, object]:
    if "SASL_PLAINTEXT" in broker.listeners:
        return {"alias": alias, "bootstrap": broker.listeners["SASL_PLAINTEXT"], "properties": AS_ADMIN}
    return {"alias": alias, "bootstrap": broker.bootstrap}


@contextmanager
def _mirror(tmp_path: Path, source: BrokerProcess, target: BrokerProcess, **settings: object) -> Iterator[None]:
    """A mirror from `source` to `target` (ACLs synced every 0.5 s) while the block runs, then
    stopped cleanly."""
    config = tmp_path / "mirror.json"
    config.write_text(json.dumps({
        "source": _endpoint("east", source), "target": _endpoint("west", target),
        "refresh.topics.interval.seconds": 0.5, "sync.topic.acls.interval.seconds": 0.5, **settings}))
    mirror = start_mirror(config, tmp_path / "mirror.log", tmp_path / "status.json")
    try:
        yield
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(60) == 0


def test_mm2_mode_syncs_the_source_topic_acls_as_mm2_converts_them(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    source, target = clusters
    _create_topic(source, "orders")
    grant(source, [
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE),
        allow("User:bob", ResourceType.TOPIC, "orders", AclOperation.ALL),
        deny("User:bob", ResourceType.TOPIC, "orders", AclOperation.READ, host="10.0.0.1"),
        allow("User:alice", ResourceType.TOPIC, "ord", AclOperation.READ, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TOPIC, "unselected", AclOperation.READ),
    ])
    names = {"east.orders", "east.ord", "east.unselected", "ord", "orders", "unselected"}
    with _mirror(tmp_path, source, target, topics={"include": ["orders", "later"]}):
        # One round creates everything it copies in one request: once alice's Read is there,
        # the rest of what the round copies is too.
        wait_until(lambda: "LITERAL:east.orders ALLOW User:alice READ *" in _topic_acls(target, names),
                   what="alice's Read on east.orders at the target")
        assert _topic_acls(target, names) == {
            "LITERAL:east.orders ALLOW User:alice READ *",  # her Write is not copied
            "LITERAL:east.orders ALLOW User:bob READ *",  # All became Read
            "LITERAL:east.orders DENY User:bob READ 10.0.0.1",  # a Deny is copied as it is
        }
        # A new source ACL, on a selected topic the source does not have yet, follows at the next round.
        grant(source, [allow("User:alice", ResourceType.TOPIC, "later", AclOperation.DESCRIBE)])
        wait_until(lambda: "LITERAL:east.later ALLOW User:alice DESCRIBE *" in _topic_acls(target, {"east.later"}),
                   what="a new source ACL at the target")
    log = (tmp_path / "mirror.log").read_text()
    assert "topic ACLs synced from east to west" in log and "admin-secret" not in log
    assert "topic ACL sync" not in (tmp_path / "status.json").read_text()


def test_link_mode_syncs_the_acls_of_the_mirror_topics_it_writes(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    source, target = clusters
    _create_topic(source, "ledger")
    grant(source, [
        allow("User:alice", ResourceType.TOPIC, "ledger", AclOperation.ALL),
        allow("User:bob", ResourceType.TOPIC, "ledger", AclOperation.WRITE),
        # Selected by the filters, but not a topic the source has, so no mirror topic.
        allow("User:alice", ResourceType.TOPIC, "ledger-2", AclOperation.READ),
    ])
    with _mirror(tmp_path, source, target, mode="link", name="ledger-link", topics={"include": ["ledger.*"]}):
        wait_until(lambda: bool(_topic_acls(target, {"ledger"})), what="an ACL on the mirror topic ledger")
        assert _topic_acls(target, {"ledger", "ledger-2"}) == {"LITERAL:ledger ALLOW User:alice READ *"}


def test_a_target_without_an_authorizer_means_nothing_to_sync(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    source, _ = clusters
    _create_topic(source, "notes")
    grant(source, [allow("User:alice", ResourceType.TOPIC, "notes", AclOperation.READ)])
    # No authorizer: the ACL APIs answer SECURITY_DISABLED, which is said in the log (once: the
    # unit tests count the rounds), not reported as a failure. The source has ACLs to copy, so
    # the target is asked.
    plain = BrokerProcess(tmp_path / "plain")
    plain.start()
    try:
        with _mirror(tmp_path, source, plain, topics={"include": ["notes"]}):
            wait_until(lambda: "no ACL authorizer is configured at the target cluster west" in
                       (tmp_path / "mirror.log").read_text(), what="the mirror saying the target has no authorizer")
    finally:
        plain.stop()
    log = (tmp_path / "mirror.log").read_text()
    assert log.count("no ACL authorizer is configured") == 1 and "topic ACL sync from" not in log
    assert "topic ACL sync" not in (tmp_path / "status.json").read_text()
