"""A link-mode mirror from an Apache Kafka 4.x *cluster* whose partition leaders move while it
copies: three KRaft nodes (bench/peers/kraft_cluster.py) hold `orders` (3 partitions,
replication factor 3, min.insync.replicas 2) under a steady idempotent acks=all producer, and a
`causeway mirror` in link mode copies it into a Causeway broker. Meanwhile the leader of
partition 0 is SIGKILLed (its partition moves to a follower; the node comes back and truncates
what it alone held), then partition 1 is reassigned to another preferred leader and a preferred
election moves partitions 0 and 1 (partition 0 back to the restarted node).

Checked once the producer is done: the copy holds every acknowledged record at Kafka's offset,
and is Kafka's log batch for batch (but for the leader epoch each cluster stamps), so nothing is
duplicated, reordered or copied that Kafka later cut (the mirror reads up to the high watermark
only, which a clean leader change never cuts); the mirror's status shows no gap, no FAILED
partition and a lag of 0; its log has no traceback. What the leader changes cost the copy (how
long after the kill the copy grew again, beside how long Kafka's own producer waited) is printed
(`pytest -s`), never asserted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.error import KafkaException

from bench.peers import run_tool
from bench.peers.kraft_cluster import KafkaCluster
from broker.client import TopicPartition, open_client
from deploy.broker_process import BrokerProcess
from deploy.wan.client import WanClient
from deploy.wan.process import WanProcess
from tests.compat.partitions import TIMEOUT_S, log_end
from tests.integration.mirror_process import read_status, start_mirror
from tests.integration.partition_reads import read_whole_batches
from tests.integration.test_mirror_link import without_epochs
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
TOPIC, PARTITIONS, MIRROR = "orders", 3, "kafka-to-causeway"
RATE = 300  # records/s over the three partitions
# A killed node is fenced after broker.session.timeout.ms without a heartbeat (Kafka's default
# 9 s): shorter here, so the leader change comes sooner, and still many heartbeats long.
KAFKA = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500",
         # Only this test's elections move leaders.
         "auto.leader.rebalance.enable": "false", "group.initial.rebalance.delay.ms": "0"}


@dataclass
class SteadyProducer:
    """An idempotent acks=all producer writing RATE records/s, round robin over the partitions,
    each record's value its sequence number; every acknowledgement kept with its time."""

    bootstrap: str
    acked: list[tuple[int, int, int, float]] = field(default_factory=list)  # partition, offset, seq, when
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5})

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                # librdkafka reports no offset (None) for a batch it sent again that the new
                # leader already had (DUPLICATE_SEQUENCE_NUMBER): acknowledged, offset unknown.
                offset = msg.offset()
                self.acked.append((int(msg.partition() or 0), -1 if offset is None else offset,
                                   int(msg.value() or b"-1"), time.monotonic()))

        began = time.monotonic()
        while not self.stop.is_set():
            producer.produce(TOPIC, key=b"k%d" % self.sent, value=b"%d" % self.sent, partition=self.sent % PARTITIONS,
                             on_delivery=delivered)
            self.sent += 1
            producer.poll(0)
            self.stop.wait(max(0.0, began + self.sent / RATE - time.monotonic()))  # the pace, not a wait for state
        if producer.flush(TIMEOUT_S):
            self.errors.append("records still unacknowledged")

    def acked_after(self, partition: int, moment: float) -> list[int]:
        return [offset for p, offset, _, when in list(self.acked) if p == partition and when > moment and offset >= 0]


def produce_acks_1(bootstrap: str, count: int) -> list[int]:
    """`count` records to partition 0 with acks=1 (the leader's acknowledgement alone): their
    offsets. Their values start with "cut-"."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False, "linger.ms": 0})
    offsets: list[int] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        offsets.append(int(msg.offset() or -1))

    for i in range(count):
        producer.produce(TOPIC, key=b"cut", value=b"cut-%d" % i, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0 and len(offsets) == count
    return offsets


@pytest.fixture
def clusters(tmp_path: Path, kafka_jars: None) -> Iterator[tuple[KafkaCluster, BrokerProcess]]:
    with (WanProcess(log_path=tmp_path / "wan.log") as wan,
          KafkaCluster(tmp_path / "kafka", size=3, overrides=KAFKA, replication_links=WanClient(wan.api)) as kafka):
        causeway = BrokerProcess(tmp_path / "causeway").start()
        try:
            yield kafka, causeway
        finally:
            assert causeway.stop() == 0, causeway.log_tail()


def partitions_of(admin: AdminClient) -> dict[int, tuple[int, list[int], list[int]]]:
    """Each partition's leader (-1: none), replicas and ISR, from a fresh Metadata request."""
    try:
        topic = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
    except KafkaException:
        return {}
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in topic.partitions.values()}


def copy_end(causeway: BrokerProcess, partition: int) -> int:
    return log_end(causeway.bootstrap, TOPIC, partition)


def log_of(bootstrap: str, partition: int) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Offset -> (key, value) of every record of one partition, up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "leader-change-reader",
                         "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(KafkaTopicPartition(TOPIC, partition), timeout=TIMEOUT_S)
        consumer.assign([KafkaTopicPartition(TOPIC, partition, OFFSET_BEGINNING)])
        found: dict[int, tuple[bytes | None, bytes | None]] = {}
        deadline = time.monotonic() + TIMEOUT_S
        while (not found or max(found) < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found[int(msg.offset() or 0)] = (msg.key(), msg.value())
        return found
    finally:
        consumer.close()


async def batches(bootstrap: str, partition: int) -> list[bytes]:
    async with open_client(bootstrap) as client:
        return without_epochs(await read_whole_batches(client, TopicPartition(TOPIC, partition), 0))


def reassign(kafka: KafkaCluster, tmp_path: Path, partition: int, replicas: list[int]) -> None:
    """Kafka's own kafka-reassign-partitions: `partition`'s replicas in a new order (the same
    nodes, so nothing is copied and it completes at once)."""
    plan = tmp_path / "reassignment.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": partition, "replicas": replicas}]}))
    run_tool("kafka-reassign-partitions", "--bootstrap-server", kafka.bootstrap, "--reassignment-json-file",
             str(plan), "--execute").check()


def test_link_mirror_follows_kafka_leader_changes(clusters: tuple[KafkaCluster, BrokerProcess], tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    kafka, causeway = clusters
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]).values():
        future.result(timeout=TIMEOUT_S)
    wait_until(lambda: len(partitions_of(admin)) == PARTITIONS and all(
        leader >= 0 and len(isr) == 3 for leader, _, isr in partitions_of(admin).values()),
        what="every partition led, with three in sync", timeout_s=TIMEOUT_S)

    config = tmp_path / "mirror.yaml"
    config.write_text(json.dumps({"name": MIRROR, "mode": "link",
                                  "source": {"alias": "kafka", "bootstrap": kafka.bootstrap},
                                  "target": {"alias": "causeway", "bootstrap": causeway.bootstrap},
                                  "refresh.topics.interval.seconds": 0.5}))
    log, status = tmp_path / "mirror.log", tmp_path / "status.json"
    mirror = start_mirror(config, log, status)
    request.addfinalizer(lambda: mirror.stop(TIMEOUT_S))  # whatever fails (a no-op once stopped below)
    producer = SteadyProducer(kafka.bootstrap)
    writer = threading.Thread(target=producer.run, name="steady producer")
    writer.start()
    figures: list[str] = []
    try:
        wait_until(lambda: all(copy_end(causeway, p) >= 200 for p in range(PARTITIONS)),
                   what="the copy under way", timeout_s=TIMEOUT_S)

        # 1. The leader of partition 0 crashes holding records its followers never got: its
        # replication listener is cut (its proxy disabled) while the producer's batches and a
        # few acks=1 records reach it, so its high watermark stays below them; then it is
        # SIGKILLed. A follower takes over without them (the idempotent producer sends its
        # batches again; the acks=1 records are lost, as Kafka's acks=1 allows), and the node
        # cuts them when it comes back. The mirror reads up to the high watermark only: it
        # must never copy them.
        leader, _, _ = partitions_of(admin)[0]
        killed = kafka.node(leader)
        assert killed.replication_proxy is not None
        killed.replication_proxy.disable()
        try:
            high_watermark = log_end(killed.bootstrap, TOPIC, 0)
            cut = produce_acks_1(kafka.bootstrap, 20)
            assert min(cut) >= high_watermark == log_end(killed.bootstrap, TOPIC, 0), (cut, high_watermark)
            written_ms = int(time.time() * 1000)
            # The mirror fetches partition 0 all along (long polls of 0.5 s): two status reports
            # later it has read the leader with the records past its high watermark there.
            wait_until(lambda: (read_status(status) or {}).get("updated_ms", 0) > written_ms + 2000,
                       what="the mirror reading the lone leader", timeout_s=TIMEOUT_S)
            at_kill = copy_end(causeway, 0)
            killed.kill()
            kill_at = time.monotonic()
        finally:
            killed.replication_proxy.enable()
        assert at_kill <= high_watermark
        # Meanwhile the other partitions' leaders answer: the mirror's status never calls the
        # source unavailable (a dead broker is not a dead cluster), whatever it says of orders-0.
        states: set[str] = set()

        def new_leader() -> bool:
            states.add(((read_status(status) or {}).get("topic_states", {}).get(TOPIC) or {}).get("state", "-"))
            return partitions_of(admin).get(0, (-1, [], []))[0] not in (-1, leader)

        wait_until(new_leader, what="a new leader of partition 0", timeout_s=TIMEOUT_S)
        elected_s = time.monotonic() - kill_at
        wait_until(lambda: producer.acked_after(0, kill_at), what="the producer writing to the new leader",
                   timeout_s=TIMEOUT_S)
        first_new = min(producer.acked_after(0, kill_at))
        producer_s = time.monotonic() - kill_at
        wait_until(lambda: copy_end(causeway, 0) > first_new, what="the copy of partition 0 past the leader change",
                   timeout_s=TIMEOUT_S)
        assert states <= {"ACTIVE", "-"}, states
        figures.append(f"kill -9 of node {leader} (leader of {TOPIC}-0, high watermark {high_watermark}, acks=1 "
                       f"records at {min(cut)}..{max(cut)} above it, copy at {at_kill}): Kafka's new leader "
                       f"{partitions_of(admin)[0][0]} seen after {elected_s:.1f}s, first acknowledgement from it "
                       f"after <= {producer_s:.1f}s (offset {first_new}), copied at Causeway after "
                       f"<= {time.monotonic() - kill_at:.1f}s")

        # 2. The node comes back (cutting what it alone held) and catches up into every ISR.
        killed.restart()
        wait_until(lambda: all(leader in isr for _, _, isr in partitions_of(admin).values()),
                   what=f"node {leader} back in every ISR", timeout_s=TIMEOUT_S)

        # 3. Partition 1 gets another preferred leader, and a preferred election moves partitions
        # 0 (back to the restarted node) and 1 to theirs.
        _, order, _ = partitions_of(admin)[1]
        new_order = [*order[1:], order[0]]
        reassign(kafka, tmp_path, 1, new_order)
        wait_until(lambda: partitions_of(admin)[1][1] == new_order,
                   what="the reassignment of partition 1", timeout_s=TIMEOUT_S)
        before = {p: leader for p, (leader, _, _) in partitions_of(admin).items()}
        ends_before = {p: log_end(kafka.bootstrap, TOPIC, p) for p in range(PARTITIONS)}
        elect_at = time.monotonic()
        run_tool("kafka-leader-election", "--bootstrap-server", kafka.bootstrap, "--election-type", "PREFERRED",
                 "--all-topic-partitions").check()
        wait_until(lambda: all(leader == replicas[0] for leader, replicas, _ in partitions_of(admin).values()),
                   what="every partition led by its preferred replica", timeout_s=TIMEOUT_S)
        after = {p: leader for p, (leader, _, _) in partitions_of(admin).items()}
        moved = sorted(p for p in before if before[p] != after[p])
        assert {0, 1} <= set(moved), (before, after)
        wait_until(lambda: all(copy_end(causeway, p) > ends_before[p] for p in moved),
                   what="the copy past the preferred election", timeout_s=TIMEOUT_S)
        figures.append(f"preferred election moved {', '.join(f'{TOPIC}-{p} {before[p]}->{after[p]}' for p in moved)}: "
                       f"copy past Kafka's ends at the election after <= {time.monotonic() - elect_at:.1f}s "
                       f"(including the election tool's JVM)")
    finally:
        producer.stop.set()
        writer.join(TIMEOUT_S)
    assert not writer.is_alive() and not producer.errors, producer.errors[:5]

    ends = {p: log_end(kafka.bootstrap, TOPIC, p) for p in range(PARTITIONS)}
    caught_up = time.monotonic()

    def lag_zero() -> bool:
        report = read_status(status)
        return report is not None and report["lag"] == 0 and all(
            (q["source_end"], q["target_end"]) == (ends[q["partition"]],) * 2 for q in report["partitions"])

    try:
        wait_until(lambda: {p: copy_end(causeway, p) for p in range(PARTITIONS)} == ends,
                   what="the copy ending where Kafka's log does", timeout_s=TIMEOUT_S)
        wait_until(lag_zero, what="the mirror's lag back to 0", timeout_s=TIMEOUT_S)
        figures.append(f"{len(producer.acked)} records acknowledged ({producer.sent} sent); the copy caught up "
                       f"{time.monotonic() - caught_up:.1f}s after the producer's last acknowledgement")
        report = read_status(status)
        assert report is not None
    finally:
        code = mirror.stop(TIMEOUT_S)
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    for q in report["partitions"]:
        assert (q["failed"], q["lost"], q["gaps"], q["parked"]) == (None, None, [], False), q
    assert report["topic_states"][TOPIC]["state"] == "ACTIVE", report["topic_states"]

    # Every acknowledged record at Kafka's offset, in the copy as in Kafka; nothing twice, in order.
    for p in range(PARTITIONS):
        at_kafka, copied = log_of(kafka.bootstrap, p), log_of(causeway.bootstrap, p)
        assert len(at_kafka) == ends[p] and copied == at_kafka, f"partition {p}"
        # Kafka cut the acks=1 records with the dead leader's tail; the copy never had them.
        assert not [value for _, value in copied.values() if (value or b"").startswith(b"cut-")], f"partition {p}"
        seqs = [int(value or b"-1") for _, value in (copied[o] for o in sorted(copied))]
        acked = [(offset, seq) for q, offset, seq, _ in producer.acked if q == p]
        assert {seq for _, seq in acked} <= set(seqs), f"partition {p}: acknowledged records missing"
        for offset, seq in acked:
            assert offset < 0 or copied[offset][1] == b"%d" % seq, (p, offset, seq)
        assert seqs == sorted(set(seqs)), f"partition {p}: duplicated or reordered"
        # Kafka's batches (producer ids, sequences, timestamps) byte for byte, but the epoch.
        assert trio.run(batches, causeway.bootstrap, p) == trio.run(batches, kafka.bootstrap, p), f"partition {p}"
    print("\n".join(figures))
