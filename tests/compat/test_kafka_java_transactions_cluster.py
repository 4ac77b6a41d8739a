"""Kafka's own Java transactional producer and read_committed consumer against three
ZooKeeper-mode Causeway brokers (issue 23): the transaction coordinator and the partitions'
leaders on different brokers, every partition replicated three times.

First a librdkafka transaction is aborted, so a reader that ignored the markers would see its
records. Then `kafka-producer-perf-test --transactional-id` (Kafka's Java producer: init, begin,
send, commit every --transaction-duration-ms) writes across both partitions, and Kafka's Java
console consumer reads the topic read_committed: every record the Java producer committed and
none of the aborted ones; read_uncommitted it reads both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import run_tool
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.compat
TOPIC = "java-txn"
ABORTED, COMMITTED = 5, 2_000
TIMEOUT_S = 30.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, kafka_jars: None) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, ("min.insync.replicas=2",))) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap()})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
            future.result(TIMEOUT_S)
        yield running


def console_consumer(cluster: ZkCluster, isolation: str, count: int) -> list[str]:
    """Kafka's Java console consumer from the start of both partitions: what it printed before
    `count` records or 15 s without one."""
    run = run_tool("kafka-console-consumer", "--bootstrap-server", cluster.bootstrap(), "--topic", TOPIC,
                   "--from-beginning", "--max-messages", str(count), "--timeout-ms", "15000",
                   "--group", f"java-txn-{isolation}", "--command-property", f"isolation.level={isolation}")
    return run.lines


def test_kafkas_java_producer_and_read_committed_consumer_on_three_brokers(cluster: ZkCluster) -> None:
    aborting = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": "java-txn-aborted"})
    aborting.init_transactions(TIMEOUT_S)
    aborting.begin_transaction()
    for i in range(ABORTED):
        aborting.produce(TOPIC, f"aborted-{i}".encode(), partition=i % 2)
    assert aborting.flush(TIMEOUT_S) == 0
    aborting.abort_transaction(TIMEOUT_S)

    produced = run_tool("kafka-producer-perf-test", "--topic", TOPIC, "--num-records", str(COMMITTED),
                        "--record-size", "20", "--throughput", "-1", "--transactional-id", "java-txn-app",
                        "--transaction-duration-ms", "100", "--command-property", "acks=all",
                        "--command-property", f"bootstrap.servers={cluster.bootstrap()}")
    assert produced.returncode == 0, produced.stdout + produced.stderr

    committed = console_consumer(cluster, "read_committed", COMMITTED + ABORTED)
    assert len(committed) == COMMITTED, committed[-5:]
    assert not [line for line in committed if line.startswith("aborted-")]
    everything = console_consumer(cluster, "read_uncommitted", COMMITTED + ABORTED)
    aborted = sorted(line for line in everything if line.startswith("aborted-"))
    assert aborted == [f"aborted-{i}" for i in range(ABORTED)]
    assert len(everything) == COMMITTED + ABORTED
