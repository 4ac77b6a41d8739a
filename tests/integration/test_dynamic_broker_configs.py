"""Dynamic broker configs in a three-broker ZooKeeper-mode cluster, as Kafka's.

A broker's own config and the cluster-wide default are changed with confluent-kafka's
AdminClient and Kafka's kafka-configs tool; they land in /config/brokers/<id> and
/config/brokers/<default> with a /config/changes notification, every broker applies them (a
producer's oversized record is refused by whichever broker leads), DescribeConfigs reports their
source and synonyms, a broker restarted after SIGKILL comes back with them, and keys Kafka cannot
change at run time are refused with Kafka's message. A standalone broker keeps refusing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError as ClientKafkaError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from bench.peers import run_tool
from broker.protocol.messages import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask
from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.polling import wait_until

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1", "log.segment.bytes=2097152")
TIMEOUT_S = 30


class Cluster(ZkCluster):
    def admin(self, broker_id: int | None = None) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap(*(() if broker_id is None else (broker_id,)))})

    def znode(self, path: str) -> dict[str, object]:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def notifications(self) -> list[str]:
        return [str(self.znode(f"/config/changes/{c}")["entity_path"])
                for c in sorted(self.zk.get_children("/config/changes"))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("dynamic-broker-configs")
    with own_zookeeper_cluster(Cluster, root, OVERRIDES, TIMEOUT_S) as running:
        yield running


def describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.BROKER, name)
    return admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)


def alter(admin: AdminClient, name: str, *ops: tuple[str, str | None]) -> None:
    entries = [ConfigEntry(key, value, incremental_operation=(AlterConfigOpType.SET if value is not None
                                                              else AlterConfigOpType.DELETE))
               for key, value in ops]
    resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)


def alter_default(broker: BrokerProcess, key: str, value: str | None) -> None:
    """IncrementalAlterConfigs on the cluster-wide default (the empty name, which confluent-kafka
    does not take), sent as Kafka's admin client sends it."""
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=ConfigResource.Type.BROKER.value, resource_name="",
        configs=[IncrementalAlterConfigsRequest.AlterableConfig(name=key, config_operation=op.value, value=value)])])
    (answer,) = ask(broker.bootstrap, request, 1, timeout_s=TIMEOUT_S).responses
    assert answer.error_code == 0, answer.error_message


def describe_default(broker: BrokerProcess) -> dict[str, tuple[str, str]]:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=ConfigResource.Type.BROKER.value, resource_name="", configuration_keys=None)],
        include_synonyms=True)
    (result,) = ask(broker.bootstrap, request, 4, timeout_s=TIMEOUT_S).results
    return {c.name: (c.value, ConfigSource(c.config_source).name) for c in result.configs}


def synonyms(broker: BrokerProcess, name: str, key: str) -> list[tuple[str, str, str]]:
    """The synonyms of one broker config, in order (confluent-kafka keys them by name: a key
    set at several levels would show once)."""
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=ConfigResource.Type.BROKER.value, resource_name=name, configuration_keys=[key])],
        include_synonyms=True)
    (entry,) = ask(broker.bootstrap, request, 4, timeout_s=TIMEOUT_S).results[0].configs
    return [(s.name, s.value, ConfigSource(s.source).name) for s in entry.synonyms]


def test_a_brokers_own_config_is_stored_announced_applied_and_described(cluster: Cluster) -> None:
    admin = cluster.admin(1)
    alter(admin, "1", ("log.segment.bytes", "1048576"), ("log.cleaner.backoff.ms", "20000"))
    assert cluster.znode("/config/brokers/1") == {
        "version": 1, "config": {"log.segment.bytes": "1048576", "log.cleaner.backoff.ms": "20000"}}
    assert "brokers/1" in cluster.notifications()
    entry = describe(admin, "1")["log.segment.bytes"]
    assert (entry.value, ConfigSource(entry.source).name, entry.is_read_only) == (
        "1048576", "DYNAMIC_BROKER_CONFIG", False)
    assert synonyms(cluster.brokers[1], "1", "log.segment.bytes") == [
                               ("log.segment.bytes", "1048576", "DYNAMIC_BROKER_CONFIG"),
                               ("log.segment.bytes", "2097152", "STATIC_BROKER_CONFIG"),
                               ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")]
    # Static-only keys are read-only; broker 2 is untouched.
    assert describe(admin, "1")["log.dirs"].is_read_only
    other = describe(cluster.admin(2), "2")["log.segment.bytes"]
    assert (other.value, ConfigSource(other.source).name) == ("2097152", "STATIC_BROKER_CONFIG")
    # Deleting the key restores the static value.
    alter(admin, "1", ("log.segment.bytes", None), ("log.cleaner.backoff.ms", None))
    entry = describe(admin, "1")["log.segment.bytes"]
    assert (entry.value, ConfigSource(entry.source).name) == ("2097152", "STATIC_BROKER_CONFIG")


def test_the_cluster_default_reaches_every_broker_and_a_restarted_one(cluster: Cluster) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic("dyn-orders", 3, 3)], operation_timeout=TIMEOUT_S)["dyn-orders"].result(
        timeout=60)
    alter_default(cluster.brokers[2], "message.max.bytes", "2000")
    assert cluster.znode("/config/brokers/<default>") == {"version": 1, "config": {"message.max.bytes": "2000"}}
    assert "brokers/<default>" in cluster.notifications()
    for broker_id in (1, 2, 3):
        wait_until(lambda b=broker_id: describe(cluster.admin(b), str(b))["message.max.bytes"].value == "2000",
                   what=f"broker {broker_id} applying message.max.bytes=2000", timeout_s=TIMEOUT_S)
    entry = describe(cluster.admin(2), "2")["message.max.bytes"]
    assert ConfigSource(entry.source).name == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert synonyms(cluster.brokers[2], "2", "message.max.bytes") == [
                               ("message.max.bytes", "2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                               ("message.max.bytes", "1048588", "DEFAULT_CONFIG")]
    assert describe_default(cluster.brokers[1]) == {"message.max.bytes": ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    topic = ConfigResource(ConfigResource.Type.TOPIC, "dyn-orders")
    max_message = admin.describe_configs([topic])[topic].result(timeout=TIMEOUT_S)["max.message.bytes"]
    assert (max_message.value, ConfigSource(max_message.source).name) == ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")

    # Applied, not only described: every leader refuses a record larger than the new bound.
    def refused(partition: int) -> int | None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "retries": 0,
                             "message.max.bytes": 1000000, "message.timeout.ms": 20000})
        errors: list[int] = []
        producer.produce("dyn-orders", b"x" * 5000, partition=partition,
                         on_delivery=lambda err, _msg: errors.append(0 if err is None else err.code()))
        producer.flush(30)
        return errors[0] if errors else None

    for partition in range(3):
        assert refused(partition) == ClientKafkaError.MSG_SIZE_TOO_LARGE

    # A broker killed and started again reads both layers before it serves.
    cluster.brokers[3].kill()
    cluster.brokers[3].start()
    wait_until(lambda: describe(cluster.admin(3), "3")["message.max.bytes"].value == "2000",
               what="the restarted broker's message.max.bytes", timeout_s=TIMEOUT_S)
    alter_default(cluster.brokers[1], "message.max.bytes", None)
    for broker_id in (1, 2, 3):
        wait_until(lambda b=broker_id: describe(cluster.admin(b), str(b))["message.max.bytes"].value == "1048588",
                   what=f"broker {broker_id} back at Kafka's default", timeout_s=TIMEOUT_S)


def test_static_keys_are_refused_with_kafkas_message(cluster: Cluster) -> None:
    admin = cluster.admin(1)
    with pytest.raises(KafkaException) as refused:
        alter(admin, "1", ("log.dirs", "/elsewhere"), ("zookeeper.connect", "127.0.0.1:1"))
    error = refused.value.args[0]
    assert error.code() == ClientKafkaError.INVALID_REQUEST
    assert error.str().endswith("Cannot update these configs dynamically: Set(log.dirs, zookeeper.connect)")
    with pytest.raises(KafkaException) as bad:
        alter(admin, "1", ("min.insync.replicas", "zero"))
    assert bad.value.args[0].code() == ClientKafkaError.INVALID_REQUEST
    assert "min.insync.replicas" in bad.value.args[0].str()
    with pytest.raises(KafkaException) as unknown:
        alter(admin, "1", ("no.such.key", "1"))
    assert unknown.value.args[0].code() == ClientKafkaError.INVALID_CONFIG
    # Nothing was written by the refused requests.
    assert "log.dirs" not in cluster.znode("/config/brokers/1")["config"]  # type: ignore[operator]


def test_kafka_configs_tool_alters_a_broker_and_the_default(cluster: Cluster, kafka_jars: None) -> None:
    bootstrap = ("--bootstrap-server", cluster.bootstrap(1))
    run_tool("kafka-configs", *bootstrap, "--entity-type", "brokers", "--entity-name", "1", "--alter",
             "--add-config", "log.retention.ms=3600000").check()
    run_tool("kafka-configs", *bootstrap, "--entity-type", "brokers", "--entity-default", "--alter",
             "--add-config", "log.retention.bytes=1000000").check()
    lines = [line.strip() for line in run_tool("kafka-configs", *bootstrap, "--entity-type", "brokers",
                                               "--entity-name", "1", "--describe").check().lines]
    assert lines[0] == "Dynamic configs for broker 1 are:"
    assert ("log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
            "DEFAULT_CONFIG:log.retention.hours=168}") in lines
    default = [line.strip() for line in run_tool("kafka-configs", *bootstrap, "--entity-type", "brokers",
                                                 "--entity-default", "--describe").check().lines]
    assert default == ["Default configs for brokers in the cluster are:",
                       "log.retention.bytes=1000000 sensitive=false "
                       "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=1000000, "
                       "DEFAULT_CONFIG:log.retention.bytes=-1}"]
    refused = run_tool("kafka-configs", *bootstrap, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                       "--add-config", "listeners=PLAINTEXT://:1")
    assert refused.returncode != 0
    assert "Cannot update these configs dynamically: Set(listeners)" in refused.stdout + refused.stderr


def test_a_standalone_broker_keeps_refusing(broker: BrokerProcess) -> None:
    with pytest.raises(KafkaException) as refused:
        alter(AdminClient({"bootstrap.servers": broker.bootstrap}), "0", ("log.retention.ms", "1000"))
    assert "Broker configs are static in Causeway" in refused.value.args[0].str()
