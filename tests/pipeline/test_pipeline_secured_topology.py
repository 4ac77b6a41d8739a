"""`causeway pipeline audit` and `lag` on a topology whose clusters are secured (`security:`
with `local: SASL_SSL` and ACLs, brought up by `causeway up -d`): the jobs log in to each cluster
as the launcher does (its admin's client file, named in the state file), so the audit of what
the mirror copied is clean and lag reads both sides. The mirror syncs no topic ACLs
(`sync_topic_acls: false`): it is not granted Alter on the target cluster, and copies anyway.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourceType
from confluent_kafka.admin import ResourcePatternType as Pattern
from pyspark.sql import SparkSession

from deploy.cli import main
from tests.integration.test_secured_launcher import launched
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat

TOPOLOGY = """\
name: secured-pipeline
datacenters: {east: {}, west: {}}
clusters:
  east:
    datacenter: east
    topics: {orders: 2}
    security: {local: SASL_SSL, wan: SASL_SSL, users: [mirror-west], acls: []}
  west:
    datacenter: west
    security: {local: SASL_SSL, users: [mirror-west], acls: []}
links:
  - between: [east, west]
mirrors:
  east-to-west: {source: east, target: west, principal: mirror-west, sync_topic_acls: false}
"""
RECORDS = 40


def _admin_login(state: Path, cluster: str, bootstrap: str) -> dict[str, Any]:
    """librdkafka's config for the launcher's admin user on the cluster's LOCAL listener."""
    secured = state / "security" / cluster
    password = json.loads((secured / "passwords.json").read_text())["admin"]
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": password, "ssl.ca.location": str(secured / "certs" / "ca.crt")}


def _ends(login: dict[str, Any], topic: str) -> dict[int, int] | None:
    consumer = Consumer({**login, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return None
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in sorted(metadata.partitions)}
    finally:
        consumer.close()


def _produce(login: dict[str, Any], topic: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({**login, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"order %d" % i, partition=i % 2,
                         on_delivery=lambda error, _msg: errors.append(error) if error else None)
    assert producer.flush(30) == 0 and not errors, errors


def _mirror_grants(login: dict[str, Any]) -> set[tuple[ResourceType, AclOperation]]:
    wanted = AclBindingFilter(ResourceType.ANY, None, Pattern.ANY, "User:mirror-west", None,
                              AclOperation.ANY, AclPermissionType.ANY)
    client = AdminClient(login)  # held: librdkafka fails the futures of a handle that is gone
    found = client.describe_acls(wanted, request_timeout=30).result(timeout=30)
    return {(b.restype, b.operation) for b in found}


def test_audit_and_lag_log_in_to_a_secured_topology_as_the_launcher_does(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with launched(tmp_path, TOPOLOGY) as run:
        clusters = run.status["clusters"]
        east = _admin_login(run.state, "east", clusters["east"]["bootstrap"])
        west = _admin_login(run.state, "west", clusters["west"]["bootstrap"])
        _produce(east, "orders")
        wait_until(lambda: _ends(west, "east.orders") == {0: RECORDS // 2, 1: RECORDS // 2},
                   what="the mirror to copy east's orders to west", timeout_s=90, interval_s=0.5)

        # No ACL sync: no Alter on west's cluster for the mirror, its grants for writing stay.
        grants = _mirror_grants(west)
        assert (ResourceType.BROKER, AclOperation.ALTER) not in grants
        assert {(ResourceType.TOPIC, AclOperation.WRITE), (ResourceType.TOPIC, AclOperation.CREATE)} <= grants
        mirror_config = json.loads((run.state / "mirrors" / "east-to-west.yaml").read_text())
        assert mirror_config["sync.topic.acls.enabled"] is False

        topology = tmp_path / "topology.yaml"  # where `launched` wrote it
        flags = [str(topology), "--mirror", "east-to-west", "--state-dir", str(run.state), "--topics", "orders"]
        code = main(["pipeline", "audit", *flags])
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.splitlines()[-1] == "clean: every record copied once, in order, unchanged", out

        code = main(["pipeline", "lag", *flags])
        out = capsys.readouterr().out
        assert code == 0, out
        # The copies keep east's create times (no append time to measure): lag says so, which it
        # can only know from west's records.
        assert "note: east.orders (partitions 0, 1) keeps the source's create times" in out, out
