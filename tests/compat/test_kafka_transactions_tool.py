"""Kafka's `kafka-transactions` tool (list, describe, describe-producers, find-hanging, abort)
on a real hanging transaction, against three ZooKeeper-mode Causeway brokers.

A confluent-kafka transactional producer opens a transaction on partition 0 and is SIGKILLed long
before its transaction.timeout.ms (15 minutes). A Produce it had in flight lands afterwards on
partition 1, which its transaction never added (the race KIP-890 closes: here written by hand
with the producer's id and epoch). Both partitions now hold an open transaction, and
read_committed readers stop at its start. As Kafka's tool sees them:

- `list` and `describe` show the id Ongoing, with partition 0 only (what the coordinator knows);
- `describe-producers` shows the producer's open transaction and where it starts on each, on the
  leader and (`--broker-id`) on a follower;
- `find-hanging` reports partition 1 only: the coordinator will write partition 0's marker itself
  when the transaction times out, nobody will ever write partition 1's. It is asked by topic,
  and by broker (`--broker-id` of a follower: DescribeProducers to it for every replica it has);
- `abort --start-offset` (WriteTxnMarkers from the admin client, to the partition's leader) ends
  each of them now: read_committed readers go past it, and nothing is left hanging.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import ToolRun, run_tool
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ProduceRequest, ProduceResponse
from broker.protocol.records import Record, build_batch
from deploy.kafka_socket import call, connect
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.compat
TOPIC, TXN_ID = "hanging", "hanging-app"
TIMEOUT_S = 30.0

# The application: opens a transaction, writes one record to partition 0, says so, and waits to
# be killed.
KILLED = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                     "transaction.timeout.ms": 900000})
producer.init_transactions(30)
producer.begin_transaction()
producer.produce(sys.argv[3], b"open", partition=0)
assert producer.flush(30) == 0
print("open", flush=True)
time.sleep(600)
"""


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, kafka_jars: None) -> Iterator[ZkCluster]:
    """Three brokers, the topic (2 partitions, 3 replicas, a committed record first in each), and
    the application SIGKILLed with its transaction open on partition 0."""
    # The late write is the race KIP-890's write verification closes: it is refused where
    # verification is on (Causeway's default, as Kafka 3.6+'s), so these brokers run without it,
    # as a cluster that left a hanging transaction behind did.
    overrides = ("min.insync.replicas=2", "transaction.partition.verification.enable=false")
    with started(ZkCluster(zookeeper, tmp_path, overrides)) as running:
        bootstrap = running.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
            future.result(TIMEOUT_S)
        plain = Producer({"bootstrap.servers": bootstrap})
        for partition in (0, 1):
            plain.produce(TOPIC, b"before", partition=partition)
        assert plain.flush(TIMEOUT_S) == 0
        app = subprocess.Popen([sys.executable, "-c", KILLED, bootstrap, TXN_ID, TOPIC], stdout=subprocess.PIPE,
                               text=True)
        try:
            assert app.stdout is not None and app.stdout.readline().strip() == "open"
        finally:
            app.kill()
            app.wait()
        yield running


def transactions(cluster: ZkCluster, *args: str) -> list[list[str]]:
    """A kafka-transactions run that must succeed: its table's rows (after the header), split."""
    run: ToolRun = run_tool("kafka-transactions", "--bootstrap-server", cluster.bootstrap(), *args).check()
    lines = [line.split() for line in run.stdout.splitlines() if line.strip()]
    assert lines, run.stdout
    return lines[1:]


def abort(cluster: ZkCluster, partition: int, start_offset: int) -> None:
    """`kafka-transactions abort`, which must succeed (it prints nothing when it does)."""
    run_tool("kafka-transactions", "--bootstrap-server", cluster.bootstrap(), "abort", "--topic", TOPIC,
             "--partition", str(partition), "--start-offset", str(start_offset)).check()


def committed_values(cluster: ZkCluster, partition: int) -> list[bytes]:
    """What a read_committed librdkafka reader reads of the partition, up to its end (the LSO)."""
    messages = read_partition(cluster.bootstrap(), TOPIC, partition, security={"isolation.level": "read_committed"})
    return [m.value() for m in messages]


def late_write(cluster: ZkCluster, producer_id: int, producer_epoch: int) -> int:
    """The killed producer's in-flight Produce landing on partition 1 (its leader); its offset."""
    batch = build_batch([Record(None, b"late")], producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=0, is_transactional=True)
    request = ProduceRequest(transactional_id=TXN_ID, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=1, records=batch)])])
    leader = cluster.brokers[cluster.leader(TOPIC, 1)]
    with connect(leader.bootstrap, timeout_s=TIMEOUT_S) as sock:
        response: ProduceResponse = call(sock, request, 9, 1)
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.NONE, answer
    return int(answer.base_offset)


def test_find_hanging_finds_what_a_killed_producer_left_and_abort_ends_it(cluster: ZkCluster) -> None:
    listed = transactions(cluster, "list")
    assert [row[3] for row in listed if row[0] == TXN_ID] == ["Ongoing"], listed
    [described] = transactions(cluster, "describe", "--transactional-id", TXN_ID)
    producer_id, producer_epoch = int(described[2]), int(described[3])
    assert described[4] == "Ongoing" and described[-1] == f"{TOPIC}-0", described

    late_offset = late_write(cluster, producer_id, producer_epoch)
    after = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for partition in (0, 1):
        after.produce(TOPIC, b"after", partition=partition)
    assert after.flush(TIMEOUT_S) == 0
    assert committed_values(cluster, 0) == committed_values(cluster, 1) == [b"before"]  # stopped at the LSO

    follower = next(i for i in cluster.brokers if i != cluster.leader(TOPIC, 1))

    def open_at(partition: int, *replica: str) -> int:
        rows = transactions(cluster, "describe-producers", "--topic", TOPIC, "--partition", str(partition), *replica)
        [row] = [row for row in rows if row[0] == str(producer_id)]
        return int(row[-1]) if row[-1] != "None" else -1

    starts = {partition: open_at(partition) for partition in (0, 1)}
    assert starts == {0: 1, 1: late_offset}
    assert open_at(1, "--broker-id", str(follower)) == late_offset  # a follower's own producer state

    def hanging(*scope: str) -> list[tuple[str, str, str, str]]:
        rows = transactions(cluster, "find-hanging", *scope, "--max-transaction-timeout", "0")
        return [(row[0], row[1], row[2], row[5]) for row in rows]

    found = [(TOPIC, "1", str(producer_id), str(late_offset))]
    assert hanging("--topic", TOPIC) == found
    assert hanging("--broker-id", str(follower)) == found

    abort(cluster, 1, late_offset)
    assert committed_values(cluster, 1) == [b"before", b"after"]
    assert hanging("--topic", TOPIC) == [] and hanging("--broker-id", str(follower)) == []

    # Partition 0's transaction is not hanging, but an operator need not wait 15 minutes for it.
    abort(cluster, 0, starts[0])
    assert committed_values(cluster, 0) == [b"before", b"after"]
    assert open_at(0) == -1
