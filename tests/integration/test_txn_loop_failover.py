"""A consume-transform-produce loop stays exactly-once across a SIGKILL of its group coordinator.

Three ZooKeeper-mode brokers, one `__consumer_offsets` and one `__transaction_state` partition
(so one broker is the group coordinator, one the transaction coordinator). confluent-kafka's
transactional loop copies each keyed, sequence-numbered input record (deploy.chaos.payload) to
the same partition of the output. In its third transaction, after send_offsets_to_transaction
and before commit_transaction, the broker leading `__consumer_offsets` is SIGKILLed and a new
leader takes the group; the loop then commits, and restarts (a new consumer reads the committed
offsets; a new producer on the same transactional.id fences the old one). A coordinator that
lost the transaction's offsets would have the restarted loop copy those records again. The
chaos checker compares the output, read with read_committed, with the input: every record once,
in order per partition.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.clock import now_ms
from deploy.chaos.checker import check
from deploy.chaos.payload import make_record
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

IN, OUT, GROUP, TXN_ID = "loop-in", "loop-out", "loop", "loop-txn"
PARTITIONS, PER_PARTITION, BATCH = 3, 40, 10
PAUSED_TXN = 3  # the transaction in which the group coordinator is killed
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "replica.lag.time.max.ms=4000", "min.insync.replicas=2",
             "offsets.topic.num.partitions=1", "transaction.state.log.num.partitions=1")


@dataclass(frozen=True, slots=True)
class Read:
    """A message as the checker reads records."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


class Loop:
    """The transactional loop (in a thread): consume a batch, copy it, commit records and offsets
    in one transaction. Any failure, and the pause's end, restarts it with a new consumer and
    producer (the restart of a crashed loop process)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.paused, self.resume = threading.Event(), threading.Event()
        self.transactions = self.restarts = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._run_once():
                self.restarts += 1
        except BaseException as exc:  # the test thread reports it
            self.failure = exc

    def _run_once(self) -> bool:
        """One life of the loop; True when the input is all copied and committed."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000})
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID,
                             "transaction.timeout.ms": 30000})
        try:
            producer.init_transactions(60)
            consumer.subscribe([IN])
            while True:
                messages = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
                if not messages:
                    if self._done(consumer):
                        return True
                    continue
                producer.begin_transaction()
                for m in messages:
                    producer.produce(OUT, m.value(), m.key(), partition=m.partition(), headers=m.headers(),
                                     timestamp=m.timestamp()[1])
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 60)
                self.transactions += 1
                pause = self.transactions == PAUSED_TXN
                if pause:
                    self.paused.set()
                    self.resume.wait()
                producer.commit_transaction(60)
                if pause:
                    return False  # a restart reads the offsets the new coordinator holds
        except KafkaException:
            return False  # a new producer on the id fences this one and resolves its transaction
        finally:
            consumer.close()

    def _done(self, consumer: Consumer) -> bool:
        """Every input partition's committed offset is at its end."""
        wanted = [TopicPartition(IN, p) for p in range(PARTITIONS)]
        return all(tp.offset == PER_PARTITION for tp in consumer.committed(wanted, 30))


def test_a_transactional_loop_is_exactly_once_across_a_group_coordinator_sigkill(cluster: ZkCluster) -> None:
    bootstrap = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (IN, OUT)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for seq in range(PER_PARTITION):
        for p in range(PARTITIONS):
            r = make_record("loop", p, seq, timestamp_ms=now_ms())
            producer.produce(IN, r.value, r.key, partition=p, headers=list(r.headers), timestamp=r.timestamp)
    assert producer.flush(60) == 0

    loop = Loop(bootstrap)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        assert loop.paused.wait(120), f"the loop did not reach transaction {PAUSED_TXN}: {loop.failure!r}"
        coordinator = cluster.leader("__consumer_offsets")
        cluster.brokers[coordinator].kill()
        wait_until(lambda: cluster.leader("__consumer_offsets") not in (-1, coordinator),
                   what="a new leader of __consumer_offsets-0", timeout_s=60)
    finally:
        loop.resume.set()
    thread.join(180)
    assert not thread.is_alive() and loop.failure is None, loop.failure
    assert loop.restarts >= 1 and loop.transactions > PAUSED_TXN

    alive = cluster.bootstrap()
    source = {p: [_read(m) for m in read_partition(alive, IN, p)] for p in range(PARTITIONS)}
    target = {p: [_read(m) for m in read_partition(alive, OUT, p)] for p in range(PARTITIONS)}
    assert all(len(source[p]) == PER_PARTITION for p in source)
    report = check(source, target)
    assert report.ok and report.total("duplicated") == 0, report.summary()


def _read(m: Message) -> Read:
    return Read(m.offset() or 0, m.timestamp()[1], m.key(), m.value(), list(m.headers() or []))
