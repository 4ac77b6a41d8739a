"""CreateAcls, DescribeAcls and DeleteAcls on a standalone broker with Kafka's authorizer on,
judged by librdkafka's admin client: only a principal with Alter (Describe) on the cluster may
change (read) them, bad ACLs are refused one by one, and the ACLs outlive a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KafkaPythonType
from kafka.errors import ClusterAuthorizationFailedError

from broker.server.acl_store import ACL_FILE
from deploy.broker_process import BrokerProcess
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, deny, grant, revoke

EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acls") / "data")
    process.start()
    yield process
    process.stop()


def _described(broker: BrokerProcess, user: str = "admin", selected: AclBindingFilter = EVERY_ACL) -> set[str]:
    client = admin(broker, user)
    found = client.describe_acls(selected, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    return {f"{b.restype.name}:{b.resource_pattern_type.name}:{b.name} {b.permission_type.name} {b.principal} "
            f"{b.operation.name} {b.host}" for b in found}


def _kafka_python_admin(broker: BrokerProcess, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=f"{user}-secret")


def test_acls_are_created_described_by_filter_and_deleted(broker: BrokerProcess) -> None:
    grant(broker, [allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
                   allow("User:alice", ResourceType.TOPIC, "pay-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
                   deny("User:bob", ResourceType.GROUP, "*", AclOperation.READ, host="10.0.0.1")])
    assert {"TOPIC:LITERAL:orders ALLOW User:alice READ *", "TOPIC:PREFIXED:pay- ALLOW User:alice WRITE *",
            "GROUP:LITERAL:* DENY User:bob READ 10.0.0.1"} <= _described(broker)
    # MATCH finds every pattern that covers a resource: the prefix covers pay-ments.
    matching = AclBindingFilter(ResourceType.TOPIC, "pay-ments", ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert _described(broker, selected=matching) == {"TOPIC:PREFIXED:pay- ALLOW User:alice WRITE *"}
    removed = revoke(broker, [AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                               AclOperation.ANY, AclPermissionType.ANY)])
    assert [(b.principal, b.name) for b in removed] == [("User:bob", "*")]
    assert not any("User:bob" in line for line in _described(broker))


def test_only_a_principal_allowed_on_the_cluster_reads_or_changes_acls(broker: BrokerProcess) -> None:
    # librdkafka's describe_acls drops a request-level error (it returns no ACLs); kafka-python
    # raises it.
    every_resource = ResourcePatternFilter(KafkaPythonType.ANY, None, ACLResourcePatternType.ANY)
    everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY, resource_pattern=every_resource)
    with pytest.raises(ClusterAuthorizationFailedError):
        _kafka_python_admin(broker, "bob").describe_acls(everything)
    bob = admin(broker, "bob")
    with pytest.raises(KafkaException) as refused:
        grant_as_bob = bob.create_acls(
            [allow("User:bob", ResourceType.TOPIC, "*", AclOperation.ALL)], request_timeout=TIMEOUT_S)
        next(iter(grant_as_bob.values())).result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert not any("User:bob" in line for line in _described(broker))
    # An ACL on the cluster lets bob read them (Describe), not change them (Alter).
    grant(broker, [allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    assert "BROKER:LITERAL:kafka-cluster ALLOW User:bob DESCRIBE *" in _described(broker, "bob")
    revoke(broker, [AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob",
                                     None, AclOperation.ANY, AclPermissionType.ANY)])


def test_a_bad_acl_is_refused_by_itself_and_the_good_ones_beside_it_are_stored(broker: BrokerProcess) -> None:
    client = admin(broker)
    futures = client.create_acls([
        allow("User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TOPIC, "good", AclOperation.DESCRIBE),
        allow("alice", ResourceType.TOPIC, "bad-principal", AclOperation.READ),
    ], request_timeout=TIMEOUT_S)
    outcomes = []
    for binding, future in futures.items():
        try:
            future.result(timeout=TIMEOUT_S)
            outcomes.append((binding.name, "ok"))
        except KafkaException as exc:
            outcomes.append((binding.name, exc.args[0].code()))
    assert sorted(outcomes) == [("bad-principal", KafkaError.INVALID_REQUEST), ("good", "ok"),
                                ("kafka-cluster", KafkaError.INVALID_REQUEST)]
    described = _described(broker)
    assert "TOPIC:LITERAL:good ALLOW User:alice DESCRIBE *" in described
    assert not any("bad-principal" in line or "PREFIXED:kafka-cluster" in line for line in described)


def test_acls_outlive_a_restart_and_a_damaged_acl_file_stops_the_start(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path / "data")
    broker.start()
    try:
        grant(broker, [allow("User:alice", ResourceType.GROUP, "g1", AclOperation.READ)])
    finally:
        assert broker.stop() == 0, broker.log_tail()
    broker.start()
    try:
        assert "GROUP:LITERAL:g1 ALLOW User:alice READ *" in _described(broker)
    finally:
        assert broker.stop() == 0, broker.log_tail()
    acl_file = tmp_path / "data" / ACL_FILE
    acl_file.write_bytes(acl_file.read_bytes()[:-20])
    damaged = acl_broker(tmp_path / "data")
    with pytest.raises(RuntimeError):
        damaged.start()
    assert f"cannot read the ACLs in {acl_file}" in damaged.log_tail()
