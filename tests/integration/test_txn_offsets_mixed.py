"""Plain and transactional offset commits of one group and partition, mixed: the later record in
`__consumer_offsets` is the committed offset, as Kafka decides it (a TxnOffsetCommit becomes the
committed offset at its COMMIT marker only if no plain OffsetCommit was written after it).

Three ZooKeeper-mode brokers, one `__consumer_offsets` partition. confluent-kafka's transactional
producer sends offsets to its transaction (TxnOffsetCommit, done when send_offsets_to_transaction
returns) and a confluent-kafka consumer of the same group commits offsets itself (OffsetCommit,
outside any generation), in a known order per partition:

- p0: transactional 5, then plain 9, then the transaction commits: 9 (the plain one is later);
- p1: plain 3, then transactional 7, commit: 7;
- p2: transactional 4, plain 8, then the group coordinator is SIGKILLed before the transaction
  commits: the broker that takes `__consumer_offsets` over loads both from the log, and the
  marker that reaches it keeps 8.

After the move, p0 and p1 are read from the new coordinator too (it replayed their markers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

TOPIC, GROUP = "mixed", "mixed-group"
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "replica.lag.time.max.ms=4000", "min.insync.replicas=2",
             "offsets.topic.num.partitions=1", "transaction.state.log.num.partitions=1")
TIMEOUT_S = 60


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


def committed(bootstrap: str, isolation: str = "read_committed") -> dict[int, int]:
    """The group's committed offsets of the topic's three partitions, by a new consumer. With
    read_committed, librdkafka asks for stable offsets only (KIP-447): it waits while a
    transaction holds an offset of one of them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "isolation.level": isolation})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], TIMEOUT_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_the_later_of_a_plain_and_a_transactional_commit_wins_also_across_a_coordinator_move(
        cluster: ZkCluster) -> None:
    bootstrap = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 3, 3)]).values():
        future.result(TIMEOUT_S)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    metadata = group.consumer_group_metadata()  # outside any generation, as a simple consumer's

    def plain(partition: int, offset: int) -> None:
        group.commit(offsets=[TopicPartition(TOPIC, partition, offset)], asynchronous=False)

    def transaction(txn_id: str) -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                             "transaction.timeout.ms": 60000})
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(TOPIC, b"in the transaction", partition=0)
        return producer

    def send(producer: Producer, partition: int, offset: int) -> None:
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, partition, offset)], metadata, TIMEOUT_S)

    try:
        first = transaction("mixed-1")
        send(first, 0, 5)
        plain(0, 9)
        plain(1, 3)
        send(first, 1, 7)
        first.commit_transaction(TIMEOUT_S)
        assert committed(bootstrap) == {0: 9, 1: 7, 2: -1001}

        second = transaction("mixed-2")
        send(second, 2, 4)
        plain(2, 8)
        assert committed(bootstrap, "read_uncommitted") == {0: 9, 1: 7, 2: 8}
    finally:
        group.close()

    coordinator = cluster.leader("__consumer_offsets")
    cluster.brokers[coordinator].kill()
    wait_until(lambda: cluster.leader("__consumer_offsets") not in (-1, coordinator),
               what="a new leader of __consumer_offsets-0", timeout_s=TIMEOUT_S)
    second.commit_transaction(TIMEOUT_S)  # its marker reaches the new coordinator, which loaded both commits
    assert committed(cluster.bootstrap()) == {0: 9, 1: 7, 2: 8}
