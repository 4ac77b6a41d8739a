"""The group coordinator moves with the leader of its `__consumer_offsets` partition.

Three ZooKeeper-mode brokers: `__consumer_offsets` gets offsets.topic.replication.factor (3)
replicas, every broker's FindCoordinator names the leader of the group's partition, and only
that broker answers for the group (the others: NOT_COORDINATOR). The coordinator's broker is
SIGKILLed; the new leader loads the partition, so a consumer of the same group resumes at the
offset committed before the kill (a commit is acknowledged only once the ISR has it). When the
killed broker comes back and takes its preferred leadership again, it loads the group and the
interim coordinator lets it go.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoNodeError

from broker.client.connection import open_connection
from broker.coordinator.offsets_records import partition_for
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import FindCoordinatorRequest, OffsetFetchRequest
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

OFFSETS = "__consumer_offsets"
PARTITIONS = 3
GROUP = "orders-readers"
OVERRIDES = ("zookeeper.session.timeout.ms=6000", f"offsets.topic.num.partitions={PARTITIONS}",
             "replica.lag.time.max.ms=4000", "min.insync.replicas=2", "group.initial.rebalance.delay.ms=0",
             "leader.imbalance.check.interval.seconds=1", "controlled.shutdown.retry.backoff.ms=500")


class Brokers(ZkCluster):
    def offsets_state(self, partition: int) -> dict[str, object] | None:
        try:
            return self.state(OFFSETS, partition)
        except NoNodeError:
            return None

    def leader(self, partition: int) -> int:
        state = self.offsets_state(partition)
        return int(state["leader"]) if state is not None else -1  # type: ignore[call-overload]


@pytest.fixture
def brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Brokers]:
    running = Brokers(zookeeper, tmp_path, OVERRIDES)
    try:
        yield running.start()
    finally:
        running.close()


async def _ask(process: BrokerProcess) -> tuple[int, int]:
    """(FindCoordinator's node id, OffsetFetch's error code) for GROUP, from one broker."""
    host, port = process.bootstrap.rsplit(":", 1)
    async with open_connection(host, int(port)) as conn:
        found = await conn.request(FindCoordinatorRequest(key_type=0, key=GROUP, coordinator_keys=[GROUP]),
                                   version=3)
        fetched = await conn.request(OffsetFetchRequest(group_id=GROUP, topics=None), version=7)
    return found.node_id, fetched.error_code


def _answers(brokers: Brokers) -> dict[int, tuple[int, int]]:
    return {b: trio.run(_ask, p) for b, p in brokers.brokers.items() if p.proc is not None}


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000})


def _committed(bootstrap: str) -> int:
    consumer = _consumer(bootstrap)
    try:
        (tp,) = consumer.committed([TopicPartition("orders", 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def test_the_coordinator_follows_its_partition_leader(brokers: Brokers) -> None:
    bootstrap = brokers.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 1, 3)], operation_timeout=30)["orders"].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(10):
        producer.produce("orders", b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    del producer, admin  # no client of ours keeps calling the broker about to be killed

    partition = partition_for(GROUP, PARTITIONS)
    wait_until(lambda: all(brokers.leader(p) >= 0 for p in range(PARTITIONS)), what=f"leaders for {OFFSETS}",
               timeout_s=60)
    state = brokers.offsets_state(partition)
    assert state is not None and len(state["isr"]) == 3  # type: ignore[arg-type]
    assignment = json.loads(brokers.zk.get(f"/brokers/topics/{OFFSETS}")[0])["partitions"]
    assert all(len(replicas) == 3 for replicas in assignment.values())  # offsets.topic.replication.factor
    coordinator = brokers.leader(partition)

    # Every broker names the leader; only the leader answers for the group.
    answers = _answers(brokers)
    assert {b: node for b, (node, _) in answers.items()} == {1: coordinator, 2: coordinator, 3: coordinator}
    assert {b: code for b, (_, code) in answers.items()} == {
        b: ErrorCode.NONE if b == coordinator else ErrorCode.NOT_COORDINATOR for b in (1, 2, 3)}

    consumer = _consumer(bootstrap)
    consumer.subscribe(["orders"])
    got: list[bytes] = []

    def poll() -> bool:
        got.extend(m.value() for m in consumer.consume(10, timeout=0.2) if m.error() is None)
        return len(got) >= 10

    try:
        wait_until(poll, what="10 records through the group", timeout_s=60)
        consumer.commit(offsets=[TopicPartition("orders", 0, 10)], asynchronous=False)
    finally:
        consumer.close()

    # The coordinator's broker dies: the new leader of the partition loads the group.
    brokers.brokers[coordinator].kill()
    wait_until(lambda: brokers.leader(partition) not in (-1, coordinator), what="a new leader for the group",
               timeout_s=60)
    successor = brokers.leader(partition)
    survivors = brokers.bootstrap()
    assert _committed(survivors) == 10
    answers = _answers(brokers)
    assert {b: node for b, (node, _) in answers.items()} == {b: successor for b in answers}
    assert answers[successor][1] == ErrorCode.NONE

    # Back again, the preferred leader takes the partition (and the group) back; the interim
    # coordinator unloads it and sends the group's clients on.
    brokers.brokers[coordinator].start()
    wait_until(lambda: brokers.leader(partition) == coordinator, what="the preferred leader to lead again",
               timeout_s=60)
    wait_until(lambda: _answers(brokers)[successor] == (coordinator, ErrorCode.NOT_COORDINATOR),
               what="the interim coordinator to let the group go", timeout_s=30)
    assert _committed(brokers.bootstrap()) == 10
