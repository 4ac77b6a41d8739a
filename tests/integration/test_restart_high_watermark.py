"""The high watermark a broker starts with after a crash, as Kafka's: what it checkpointed, 0
without a checkpoint, never the log end; the replica's role moves it on from there.

ZooKeeper mode: a follower killed before its first `replication-offset-checkpoint` and started
again while its partition has no leader keeps a high watermark of 0 (the old rule, the log end,
claimed its whole log committed), and takes the leader's once the leader is back. Standalone: a
broker killed before any checkpoint still serves its whole log (an ISR of one: the log end is
committed).
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.storage.checkpoints import read_offsets
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

TIMEOUT_S = 30
# No checkpoint is written while the test runs, except at a clean stop.
NO_CHECKPOINTS = "log.flush.offset.checkpoint.interval.ms=3600000"


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def _replication_checkpoint(broker: BrokerProcess) -> dict[tuple[str, int], int]:
    (path,) = broker.data_dir.rglob("replication-offset-checkpoint")
    return read_offsets(path)


def test_a_follower_restarted_after_sigkill_starts_at_the_checkpoint_not_its_log_end(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = ZkCluster(zookeeper, tmp_path, ids=(1, 2), overrides=(
        "zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1", "offsets.topic.replication.factor=1",
        "auto.leader.rebalance.enable=false", NO_CHECKPOINTS))
    brokers = cluster.brokers
    try:
        cluster.start(timeout_s=TIMEOUT_S)
        wait_until(lambda: len(cluster.zk.get_children("/brokers/ids")) == 2, what="two brokers", timeout_s=TIMEOUT_S)
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        admin.create_topics([NewTopic("hw", 1, replica_assignment=[[1, 2]])])["hw"].result(timeout=60)

        def isr() -> list[int]:
            return list(cluster.state("hw")["isr"])  # type: ignore[call-overload]

        wait_until(lambda: isr() == [1, 2], what="ISR [1, 2]", timeout_s=TIMEOUT_S)
        _produce(brokers[1].bootstrap, "hw", 20)  # acks=all: broker 2 has all 20
        brokers[2].kill()
        wait_until(lambda: isr() == [1], what="broker 2 out of the ISR", timeout_s=TIMEOUT_S)
        brokers[1].kill()
        # Broker 2 comes back alone: its partition has no live ISR member, so no leader, no fetch.
        brokers[2].start()
        brokers[2].stop()  # the clean stop writes the checkpoint: the high watermark it held
        assert _replication_checkpoint(brokers[2]).get(("hw", 0)) == 0
        # With the leader back, the follower takes the leader's high watermark.
        brokers[1].start()
        brokers[2].start()
        wait_until(lambda: isr() == [1, 2], what="broker 2 back in the ISR", timeout_s=TIMEOUT_S)
        _produce(brokers[1].bootstrap, "hw", 1)
        brokers[2].stop()
        assert _replication_checkpoint(brokers[2]).get(("hw", 0)) in (20, 21)
    finally:
        cluster.close()


def test_a_standalone_broker_killed_before_any_checkpoint_serves_its_whole_log(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "broker", overrides=(NO_CHECKPOINTS,), topics=("solo:1",)).start()
    try:
        _produce(process.bootstrap, "solo", 20)
        process.kill()
        process.start()
        consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": "hw-check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("solo", 0, 0)])
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition("solo", 0), timeout=TIMEOUT_S)
            assert high == 20
            got: list[bytes] = []

            def poll() -> int:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append(message.value())
                return len(got)

            wait_until(lambda: poll() >= 20, what="the 20 records", timeout_s=TIMEOUT_S)
        finally:
            consumer.close()
    finally:
        assert process.stop() == 0, process.log_tail()
