"""Real clients against a three-broker ZooKeeper-mode cluster: confluent-kafka, kafka-python,
aiokafka and kcat.

Each lists all three brokers in its metadata, produces with acks=all, and reads with an
assign-mode consumer; then the partition's leader is SIGKILLed and the client carries on at the
new leader after a metadata refresh: every acknowledged record is read back, in order, none lost.
A confluent-kafka consumer group survives the SIGKILL of its coordinator's broker (the leader of
its `__consumer_offsets` partition): the group carries on at the new coordinator with its
committed offsets.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat

TIMEOUT_S = 60
SESSION_TIMEOUT_MS = 6000
OVERRIDES = (f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}", "offsets.topic.num.partitions=1",
             "min.insync.replicas=2", "auto.leader.rebalance.enable=false")
BATCH = 50


class Cluster(ZkCluster):
    def create(self, topic: str) -> int:
        """A one-partition topic on all three brokers with the whole ISR; returns its leader."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap()})
        admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=TIMEOUT_S)
        wait_until(lambda: len(self.state(topic)["isr"]) == 3, what=f"{topic}: ISR of 3",  # type: ignore[arg-type]
                   timeout_s=TIMEOUT_S)
        return int(self.state(topic)["leader"])  # type: ignore[call-overload]

    def kill_leader(self, topic: str) -> int:
        """SIGKILL the partition's leader; returns once ZooKeeper shows another leader."""
        leader = int(self.state(topic)["leader"])  # type: ignore[call-overload]
        self.brokers[leader].kill()
        wait_until(lambda: self.state(topic)["leader"] not in (leader, -1), what=f"{topic}: a new leader",
                   timeout_s=TIMEOUT_S)
        return leader

    def revive(self, broker_id: int) -> None:
        """Start a killed broker again on its old port (clients keep its address)."""
        process = self.brokers[broker_id]
        port = process.port
        process.start(port=port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_zookeeper_cluster(Cluster, tmp_path_factory.mktemp("cluster-clients"), OVERRIDES, TIMEOUT_S) as running:
        yield running


@pytest.fixture
def revive(cluster: Cluster) -> Iterator[list[int]]:
    """Brokers a test killed, started again after it (the next test has three again)."""
    killed: list[int] = []
    yield killed
    for broker_id in killed:
        cluster.revive(broker_id)
    wait_until(lambda: len(cluster.zk.get_children("/brokers/ids")) == 3, what="three brokers", timeout_s=TIMEOUT_S)


def values(first: int, count: int) -> list[bytes]:
    return [b"v%d" % i for i in range(first, first + count)]


def check_read_back(acked: list[bytes], read: list[bytes]) -> None:
    """Nothing acknowledged is lost, and the records keep their order."""
    assert set(acked) <= set(read), f"lost: {sorted(set(acked) - set(read))[:10]}"
    order = [read.index(v) for v in acked]
    assert order == sorted(order)


# --- confluent-kafka ------------------------------------------------------------------------------------------


def test_confluent_kafka_follows_a_moved_leader(cluster: Cluster, revive: list[int]) -> None:
    topic = "moves-confluent"
    cluster.create(topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    assert set(admin.list_topics(timeout=15).brokers) == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120000})
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "unused", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    acked: list[bytes] = []
    read: list[bytes] = []

    def report(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    def poll() -> int:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            read.append(message.value())
        return len(read)

    try:
        for value in values(0, BATCH):
            producer.produce(topic, value, partition=0, on_delivery=report)
        assert producer.flush(TIMEOUT_S) == 0
        wait_until(lambda: poll() >= BATCH, what="the first batch", timeout_s=TIMEOUT_S)
        revive.append(cluster.kill_leader(topic))
        for value in values(BATCH, BATCH):
            producer.produce(topic, value, partition=0, on_delivery=report)
        assert producer.flush(TIMEOUT_S * 2) == 0
        assert len(acked) == 2 * BATCH
        wait_until(lambda: poll() >= 2 * BATCH, what="both batches", timeout_s=TIMEOUT_S)
    finally:
        consumer.close()
    check_read_back(acked, read)
    assert read == acked  # idempotent: no duplicates either


def test_confluent_kafka_group_survives_its_coordinators_sigkill(cluster: Cluster, revive: list[int]) -> None:
    topic, group = "moves-group", "cluster-group"
    cluster.create(topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True})
    for value in values(0, 2 * BATCH):
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([topic])
    read: list[bytes] = []

    def poll_until(count: int) -> None:
        def poll() -> int:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message.value())
            return len(read)
        wait_until(lambda: poll() >= count, what=f"{count} records of {topic} in group {group}", timeout_s=TIMEOUT_S)

    partition = TopicPartition(topic, 0)
    try:
        poll_until(BATCH)
        consumer.commit(offsets=[TopicPartition(topic, 0, BATCH)], asynchronous=False)
        # The coordinator is the leader of the group's __consumer_offsets partition (one here).
        revive.append(cluster.kill_leader("__consumer_offsets"))
        poll_until(2 * BATCH)
        # Committing again reaches the new coordinator (librdkafka finds it and retries).
        wait_until(lambda: _commits(consumer, TopicPartition(topic, 0, 2 * BATCH)), what="a commit at the new "
                   "coordinator", timeout_s=TIMEOUT_S)
        assert consumer.committed([partition], timeout=TIMEOUT_S)[0].offset == 2 * BATCH
    finally:
        consumer.close()
    assert read[:2 * BATCH] == values(0, 2 * BATCH)  # nothing lost, nothing out of order
    # A new member of the group starts from the commit made at the new coordinator.
    fresh = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group})
    try:
        assert fresh.committed([partition], timeout=TIMEOUT_S)[0].offset == 2 * BATCH
    finally:
        fresh.close()


def _commits(consumer: Consumer, offset: TopicPartition) -> bool:
    try:
        consumer.commit(offsets=[offset], asynchronous=False)
    except KafkaException:
        return False
    return True


# --- kafka-python ---------------------------------------------------------------------------------------------


def test_kafka_python_follows_a_moved_leader(cluster: Cluster, revive: list[int]) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = "moves-kafka-python"
    cluster.create(topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", retries=50, retry_backoff_ms=500,
                             request_timeout_ms=30000, max_block_ms=60000, metadata_max_age_ms=1000)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False,
                             metadata_max_age_ms=1000, consumer_timeout_ms=1000)
    partition = KTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    read: list[bytes] = []

    def poll() -> int:
        for records in consumer.poll(timeout_ms=500).values():
            read.extend(r.value for r in records)
        return len(read)

    try:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap())
        try:
            assert {b["broker_id"] for b in admin.describe_cluster()["brokers"]} == {1, 2, 3}
        finally:
            admin.close()
        acked = [f.get(timeout=TIMEOUT_S).offset for f in [producer.send(topic, v, partition=0)
                                                            for v in values(0, BATCH)]]
        assert acked == list(range(BATCH))
        wait_until(lambda: poll() >= BATCH, what="the first batch", timeout_s=TIMEOUT_S)
        revive.append(cluster.kill_leader(topic))
        futures = [producer.send(topic, v, partition=0) for v in values(BATCH, BATCH)]
        for future in futures:
            future.get(timeout=TIMEOUT_S * 2)
        wait_until(lambda: poll() >= 2 * BATCH, what="both batches", timeout_s=TIMEOUT_S)
    finally:
        producer.close(timeout=10)
        consumer.close()
    check_read_back(values(0, 2 * BATCH), read)


# --- aiokafka -------------------------------------------------------------------------------------------------


def test_aiokafka_follows_a_moved_leader(cluster: Cluster, revive: list[int]) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    topic = "moves-aiokafka"
    cluster.create(topic)

    async def run(kill: Callable[[], None]) -> tuple[set[int], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", enable_idempotence=True,
                                    request_timeout_ms=60000, metadata_max_age_ms=1000)
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False,
                                    metadata_max_age_ms=1000)
        await producer.start()
        await consumer.start()
        read: list[bytes] = []

        async def read_until(count: int) -> None:
            for _ in range(TIMEOUT_S):  # bounded: at most one poll of a second each
                if len(read) >= count:
                    return
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), TIMEOUT_S)
                for messages in batch.values():
                    read.extend(m.value for m in messages if m.value is not None)

        try:
            brokers = {b.nodeId for b in consumer._client.cluster.brokers()}  # noqa: SLF001
            consumer.assign([ATopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            for value in values(0, BATCH):
                await producer.send_and_wait(topic, value, partition=0)
            await read_until(BATCH)
            await asyncio.get_running_loop().run_in_executor(None, kill)
            sends = [await producer.send(topic, v, partition=0) for v in values(BATCH, BATCH)]
            await asyncio.wait_for(asyncio.gather(*sends), TIMEOUT_S * 2)
            await read_until(2 * BATCH)
        finally:
            await producer.stop()
            await consumer.stop()
        return brokers, read

    brokers, read = asyncio.run(run(lambda: revive.append(cluster.kill_leader(topic))))
    assert brokers == {1, 2, 3}
    check_read_back(values(0, 2 * BATCH), read)
    assert read == values(0, 2 * BATCH)


# --- kcat -----------------------------------------------------------------------------------------------------


def kcat(*args: str, stdin: str | None = None) -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed: `make test` installs it as root (make system-deps)"
    done = subprocess.run([path, *args], input=stdin, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_kcat_lists_all_brokers_and_follows_a_moved_leader(cluster: Cluster, revive: list[int]) -> None:
    topic = "moves-kcat"
    cluster.create(topic)
    listing = kcat("-b", cluster.bootstrap(), "-L", "-t", topic)
    assert " 3 brokers:" in listing
    for broker_id, process in cluster.brokers.items():
        assert f"broker {broker_id} at {process.bootstrap}" in listing
    first = [v.decode() for v in values(0, BATCH)]
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-p", "0", "-X", "acks=all", stdin="\n".join(first) + "\n")
    revive.append(cluster.kill_leader(topic))
    second = [v.decode() for v in values(BATCH, BATCH)]
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-p", "0", "-X", "acks=all", "-X", "enable.idempotence=true",
         stdin="\n".join(second) + "\n")
    out = kcat("-b", cluster.bootstrap(), "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%s\n")
    assert out.splitlines() == first + second
