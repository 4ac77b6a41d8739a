"""kafka-python against a real broker process."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: topics keep them apart."""
    return module_broker


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, compression: str | None) -> None:
    topic = f"kp-{compression}"  # one per case: the module shares its broker
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=compression, acks="all")
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(300)]
    producer.flush(30)
    assert [f.get(30).offset for f in futures] == list(range(300))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=10_000, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = []
    for msg in consumer:
        values.append((msg.offset, msg.key, msg.value))
        if len(values) == 300:
            break
    consumer.close()
    assert values == [(i, b"k%d" % i, b"v%d" % i) for i in range(300)]


def test_admin(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kpa", num_partitions=2, replication_factor=1,
                                  topic_configs={"cleanup.policy": "delete", "retention.bytes": "1048576"})])
    assert "kpa" in admin.list_topics()
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kpa")])
    text = repr(described)
    assert "retention.bytes" in text and "1048576" in text
    admin.delete_topics(["kpa"])
    assert "kpa" not in admin.list_topics()
    admin.close()
