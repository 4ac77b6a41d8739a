"""The transaction coordinator on a ZooKeeper cluster: markers reach leaders on other brokers, and
the coordinator moves with the leader of its `__transaction_state` partition.

Three brokers. A confluent-kafka transactional producer writes to a topic whose partitions are
led by every broker (so markers go over WriteTxnMarkers to the other brokers) and a read_committed
reader sees exactly the committed records. Then a transaction is decided while the only replica
of one of its partitions is down (its marker cannot be written: the transaction stays
PrepareCommit), and the coordinator is SIGKILLed: the new leader of the id's partition reloads it
from `__transaction_state`, and once the partition's broker is back it completes the commit, so
the record becomes visible to read_committed readers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client.connection import open_connection
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import FindCoordinatorRequest
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

TXN_ID = "mover"
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "transaction.state.log.num.partitions=3",
             "replica.lag.time.max.ms=4000", "leader.imbalance.check.interval.seconds=1",
             "controlled.shutdown.retry.backoff.ms=500", "transaction.state.log.min.isr=1")
TIMEOUT_S = 60


@pytest.fixture
def brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    running = ZkCluster(zookeeper, tmp_path, OVERRIDES)
    try:
        yield running.start()
    finally:
        running.close()


def _coordinator(brokers: ZkCluster) -> int:
    """The node id FindCoordinator names for TXN_ID (-1 while none serves)."""
    async def ask() -> int:
        host, port = brokers.bootstrap().split(",")[0].rsplit(":", 1)
        async with open_connection(host, int(port)) as conn:
            found = await conn.request(FindCoordinatorRequest(key_type=1, key=TXN_ID, coordinator_keys=[TXN_ID]),
                                       version=3)
        return int(found.node_id) if found.error_code == ErrorCode.NONE else -1
    return trio.run(ask)


def _read_committed(bootstrap: str, topic: str, partitions: int, count: int) -> list[list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[list[bytes]] = [[] for _ in range(partitions)]
    try:
        for _ in range(120):
            if sum(map(len, seen)) >= count:
                break
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    seen[msg.partition()].append(msg.value())
        for msg in consumer.consume(100, 1.0):
            if msg.error() is None:
                seen[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return seen


def test_a_moved_coordinator_completes_a_prepared_commit(brokers: ZkCluster) -> None:
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap()})
    # "spread": one partition led by each broker.
    admin.create_topics([NewTopic("spread", 3, replica_assignment=[[1, 2], [2, 3], [3, 1]])])["spread"].result(
        TIMEOUT_S)
    producer = Producer({"bootstrap.servers": brokers.bootstrap(), "transactional.id": TXN_ID})
    producer.init_transactions(TIMEOUT_S)
    coordinator = _coordinator(brokers)
    assert coordinator in (1, 2, 3)
    # "lone": one replica, on a broker that is not the coordinator.
    lone = min(set(brokers.brokers) - {coordinator})
    admin.create_topics([NewTopic("lone", 1, replica_assignment=[[lone]])])["lone"].result(TIMEOUT_S)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce("spread", f"one-{partition}".encode(), partition=partition)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce("spread", f"aborted-{partition}".encode(), partition=partition)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    assert _read_committed(brokers.bootstrap(), "spread", 3, 3) == [[f"one-{p}".encode()] for p in range(3)]

    producer.begin_transaction()
    producer.produce("lone", b"decided", partition=0)
    producer.flush(TIMEOUT_S)
    brokers.brokers[lone].kill()
    producer.commit_transaction(TIMEOUT_S)  # PrepareCommit written; the marker to "lone" waits
    brokers.brokers[coordinator].kill()
    wait_until(lambda: _coordinator(brokers) not in (-1, coordinator), timeout_s=TIMEOUT_S,
               what="a new transaction coordinator")
    successor = _coordinator(brokers)
    # It found the commit decided in the log, not complete (its marker had nowhere to go).
    wait_until(lambda: "completing 1 decided transactions" in brokers.brokers[successor].log_path.read_text(),
               timeout_s=TIMEOUT_S, what="the new coordinator loading the prepared commit")
    brokers.brokers[lone].restart()
    assert _read_committed(brokers.bootstrap(), "lone", 1, 1) == [[b"decided"]]
    # The commit completed: the id takes a new producer (InitProducerId is refused with
    # CONCURRENT_TRANSACTIONS, which the client retries, until then).
    successor_producer = Producer({"bootstrap.servers": brokers.bootstrap(), "transactional.id": TXN_ID})
    successor_producer.init_transactions(TIMEOUT_S)
