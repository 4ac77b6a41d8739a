"""The tools that move partitions, against a three-broker ZooKeeper-mode cluster.

Kafka's own `kafka-leader-election` (org.apache.kafka.tools.LeaderElectionCommand) sends
ElectLeaders to the controller: after a broker's SIGTERM moved its leaderships away and it came
back (automatic rebalancing off, so only the tool moves them back), a preferred election over all
partitions puts the preferred replica back in the state znode, a second one finds nothing to do,
a partition whose preferred replica is down fails with PREFERRED_LEADER_NOT_AVAILABLE, and a
broker that is not the controller answers NOT_CONTROLLER. The legacy
`/admin/preferred_replica_election` znode is followed and deleted by the controller.

Kafka's `kafka-reassign-partitions` (org.apache.kafka.tools.reassign.ReassignPartitionsCommand)
moves an RF-2 partition with data from brokers {1,2} to {2,3} while an idempotent acks=all
producer writes: `--verify` says complete, broker 1's replica is deleted, broker 3's segments are
byte-identical to broker 2's, every acknowledged record is there. AlterPartitionReassignments is
refused with Kafka's errors, an unfinished move (its target broker frozen) is listed, shown in the
topic znode and cancelled; the legacy `/admin/reassign_partitions` znode works; a new controller
finishes a move its predecessor left half done.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench.peers import ToolRun, run_tool
from broker.client.connection import open_connection
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from deploy.broker_process import BrokerProcess
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=1",
             "auto.leader.rebalance.enable=false", "controlled.shutdown.retry.backoff.ms=500")
# Preferred leaders 1, 2, 3: every broker prefers one partition.
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


class Cluster:
    def __init__(self, zookeeper: ZooKeeperServer, root: Path) -> None:
        self.brokers = {b: BrokerProcess(root / f"broker-{b}", overrides=(
            f"zookeeper.connect={zookeeper.connect}", f"node.id={b}", *OVERRIDES)) for b in (1, 2, 3)}
        self.zk = KazooClient(hosts=zookeeper.connect)
        self.zk.start(timeout=15)

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.proc is not None)

    def state(self, topic: str, partition: int) -> dict[str, object]:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return dict(json.loads(data))

    def leader(self, topic: str, partition: int) -> int:
        return int(str(self.state(topic, partition)["leader"]))

    def controller(self) -> int:
        try:
            return int(json.loads(self.zk.get("/controller")[0])["brokerid"])
        except NoNodeError:
            return -1

    def tool(self, name: str, *args: str) -> ToolRun:
        return run_tool(name, "--bootstrap-server", self.bootstrap(), *args)


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, kafka_jars: None) -> Iterator[Cluster]:
    running = Cluster(zookeeper, tmp_path)
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda b: b.start(), running.brokers.values()))
        wait_until(lambda: running.controller() != -1, what="a controller", timeout_s=30)
        yield running
    finally:
        for process in running.brokers.values():
            if process.proc is not None:
                process.stop()
        running.zk.stop()
        running.zk.close()


def _create(cluster: Cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    created = admin.create_topics([NewTopic(topic, len(ASSIGNMENT), replica_assignment=list(ASSIGNMENT.values()))])
    created[topic].result(timeout=60)
    wait_until(lambda: all(cluster.leader(topic, p) == r[0] for p, r in ASSIGNMENT.items()),
               what=f"{topic} led by its preferred replicas", timeout_s=30)


def _create_one(cluster: Cluster, topic: str, replicas: list[int]) -> None:
    """`topic` with one partition on `replicas`, once the controller has written its state."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(timeout=60)
    wait_until(lambda: cluster.zk.exists(f"/brokers/topics/{topic}/partitions/0/state") is not None,
               what=f"{topic}-0 created", timeout_s=30)


def test_kafka_leader_election_moves_leaders_back_to_the_preferred_replicas(cluster: Cluster) -> None:
    _create(cluster, "moved")
    # Broker 1's SIGTERM moves its leadership of moved-0 away (controlled shutdown); back, it is
    # a follower again and, with auto.leader.rebalance.enable=false, stays one.
    assert cluster.brokers[1].stop() == 0
    assert cluster.leader("moved", 0) in (2, 3)
    cluster.brokers[1].start(port=0)
    wait_until(lambda: 1 in cluster.state("moved", 0)["isr"],  # type: ignore[operator]
               what="broker 1 back in the ISR of moved-0", timeout_s=30)
    before = cluster.state("moved", 0)
    assert before["leader"] != 1

    run = cluster.tool("kafka-leader-election", "--election-type", "preferred", "--all-topic-partitions").check()
    assert "Successfully completed leader election (PREFERRED) for partitions moved-0" in run.stdout, run.stdout
    after = cluster.state("moved", 0)
    assert after["leader"] == 1
    assert after["leader_epoch"] > before["leader_epoch"]  # type: ignore[operator]
    assert sorted(after["isr"]) == sorted(before["isr"])  # type: ignore[call-overload]
    # Every broker's metadata says so (the answer waited for the controller's UpdateMetadata).
    for process in cluster.brokers.values():
        md = AdminClient({"bootstrap.servers": process.bootstrap}).list_topics("moved", timeout=15)
        assert md.topics["moved"].partitions[0].leader == 1

    # Nothing left to do: named, the partition is reported as already led by a valid replica.
    run = cluster.tool("kafka-leader-election", "--election-type", "preferred", "--topic", "moved",
                       "--partition", "0").check()
    assert "Valid replica already elected for partitions moved-0" in run.stdout, run.stdout

    # A preferred replica that is down cannot lead: the tool fails naming the partition.
    assert cluster.brokers[3].stop() == 0
    run = cluster.tool("kafka-leader-election", "--election-type", "preferred", "--topic", "moved",
                       "--partition", "2")
    assert run.returncode != 0
    assert "Error completing leader election (PREFERRED) for partition: moved-2" in run.stdout, run.stdout
    assert "PreferredLeaderNotAvailableException" in run.stdout + run.stderr
    assert cluster.leader("moved", 2) in (1, 2)


def test_election_at_a_broker_that_is_not_the_controller_and_the_legacy_znode(cluster: Cluster) -> None:
    _create(cluster, "legacy")
    controller = cluster.controller()
    other = next(b for b in (1, 2, 3) if b != controller)
    host, port = cluster.brokers[other].bootstrap.rsplit(":", 1)

    async def ask() -> Any:
        async with open_connection(host, int(port)) as conn:
            answer = await conn.request(ElectLeadersRequest(
                election_type=0, timeout_ms=10000,
                topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="legacy", partitions=[0])]))
        return answer

    answer = trio.run(ask)
    assert answer.error_code == 0
    [result] = answer.replica_election_results
    assert [(r.partition_id, r.error_code) for r in result.partition_result] == [(0, ErrorCode.NOT_CONTROLLER)]

    # Move legacy-1's leadership away from broker 2 by its SIGTERM, bring it back, then ask through
    # the znode that kafka-preferred-replica-election --zookeeper wrote.
    assert cluster.brokers[2].stop() == 0
    cluster.brokers[2].start(port=0)
    wait_until(lambda: 2 in cluster.state("legacy", 1)["isr"],  # type: ignore[operator]
               what="broker 2 back in the ISR of legacy-1", timeout_s=30)
    assert cluster.leader("legacy", 1) != 2
    cluster.zk.create("/admin/preferred_replica_election",
                      json.dumps({"version": 1, "partitions": [{"topic": "legacy", "partition": 1}]}).encode(),
                      makepath=True)
    wait_until(lambda: cluster.leader("legacy", 1) == 2, what="broker 2 leading legacy-1 again", timeout_s=30)
    wait_until(lambda: cluster.zk.exists("/admin/preferred_replica_election") is None,
               what="the controller deleting /admin/preferred_replica_election", timeout_s=10)


def _segments(data_dir: Path, topic: str, partition: int) -> dict[str, bytes]:
    directory = data_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        return {}
    return {f.name: f.read_bytes() for f in sorted(directory.glob("*.log"))}


def _produce(bootstrap: str, topic: str, prefix: str, acked: list[bytes], *, count: int = 1000,
             until: threading.Event | None = None) -> None:
    """An idempotent acks=all producer: ``count`` records, or with ``until`` batches of 50 until
    it is set (at most 50 times ``count``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "linger.ms": 5})

    def report(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    limit = count * 50 if until is not None else count
    for i in range(limit):
        producer.produce(topic, f"{prefix}-{i}".encode(), partition=0, on_delivery=report)
        producer.poll(0)
        if i % 50 == 49:
            producer.flush(30)  # spread the records over the move
            if until is not None and until.is_set():
                break
    assert producer.flush(90) == 0, "records left unacknowledged"


def test_kafka_reassign_partitions_moves_a_replica_with_its_data(cluster: Cluster, tmp_path: Path) -> None:
    _create_one(cluster, "shift", [1, 2])
    acked: list[bytes] = []
    _produce(cluster.bootstrap(), "shift", "before", acked, count=500)

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "shift", "partition": 0, "replicas": [2, 3]}]}))
    def assignment() -> dict[str, object]:
        return dict(json.loads(cluster.zk.get("/brokers/topics/shift")[0]))

    # A producer runs all through the move, until the topic znode shows it done.
    moved = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        during = pool.submit(_produce, cluster.bootstrap(), "shift", "during", acked, until=moved)
        try:
            wait_until(lambda: len(acked) > 600, what="the producer under way", timeout_s=30)
            run = cluster.tool("kafka-reassign-partitions", "--reassignment-json-file", str(plan), "--execute").check()
            assert "Successfully started partition reassignment for shift-0" in run.stdout, run.stdout
            wait_until(lambda: assignment()["partitions"] == {"0": [2, 3]}, what="shift-0 moved to [2, 3]",
                       timeout_s=60)
        finally:
            moved.set()
        during.result(timeout=120)
    topic_znode = assignment()
    assert topic_znode["adding_replicas"] == {} and topic_znode["removing_replicas"] == {}
    state = cluster.state("shift", 0)
    assert state["leader"] in (2, 3) and sorted(state["isr"]) == [2, 3], state  # type: ignore[call-overload]
    run = cluster.tool("kafka-reassign-partitions", "--reassignment-json-file", str(plan), "--verify").check()
    assert "Reassignment of partition shift-0 is completed." in run.stdout, run.stdout

    # Broker 1's replica is deleted; broker 3 holds the same log, byte for byte, as broker 2.
    wait_until(lambda: not (cluster.brokers[1].data_dir / "shift-0").exists(), what="broker 1's replica deleted",
               timeout_s=30)
    wait_until(lambda: _segments(cluster.brokers[3].data_dir, "shift", 0)
               == _segments(cluster.brokers[2].data_dir, "shift", 0) != {},
               what="broker 3's segments equal to broker 2's", timeout_s=30)
    # Every acknowledged record is there, once.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "check-shift",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("shift", 0, 0)])
    got: list[bytes] = []

    def poll() -> int:
        got.extend(m.value() or b"" for m in consumer.consume(500, timeout=0.2) if m.error() is None)
        return len(got)

    try:
        wait_until(lambda: poll() >= len(acked), what=f"{len(acked)} records", timeout_s=60)
    finally:
        consumer.close()
    assert len(acked) > 600
    assert sorted(got) == sorted(acked)

    # Nothing in progress any more; a cancel finds nothing to cancel.
    run = cluster.tool("kafka-reassign-partitions", "--list").check()
    assert "No partition reassignments found." in run.stdout, run.stdout


def _request(process: BrokerProcess, request: Any) -> Any:
    host, port = process.bootstrap.rsplit(":", 1)

    async def send() -> Any:
        async with open_connection(host, int(port)) as conn:
            return await conn.request(request)

    return trio.run(send)


def _alter(process: BrokerProcess, topic: str, replicas: list[int] | None) -> Any:
    return _request(process, AlterPartitionReassignmentsRequest(topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=replicas)])]))


def _alter_code(process: BrokerProcess, topic: str, replicas: list[int] | None) -> tuple[int, str | None]:
    answer = _alter(process, topic, replicas)
    assert answer.error_code == 0
    [result] = answer.responses[0].partitions
    return result.error_code, result.error_message


def test_reassignment_refused_listed_cancelled_and_through_the_legacy_znode(cluster: Cluster) -> None:
    c = cluster.controller()
    kept, frozen = sorted({1, 2, 3} - {c})
    _create_one(cluster, "held", [c, kept])
    controller = cluster.brokers[c]

    # Only the controller serves it; Kafka's checks, Kafka's errors.
    assert _alter(cluster.brokers[kept], "held", [kept, frozen]).error_code == ErrorCode.NOT_CONTROLLER
    code, message = _alter_code(controller, "held", [c, 9])
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "brokers that are not alive" in (message or "")
    assert _alter_code(controller, "held", [c, c])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _alter_code(controller, "held", [])[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _alter_code(controller, "nothing", [c])[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _alter_code(controller, "held", None)[0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS

    # A target broker frozen (registered, not fetching): the move stays in progress, listed and in
    # the topic znode, until it is cancelled.
    target = cluster.brokers[frozen]
    assert target.proc is not None
    os.kill(target.proc.pid, signal.SIGSTOP)
    try:
        assert _alter_code(controller, "held", [c, frozen]) == (ErrorCode.NONE, None)
        listed = _request(controller, ListPartitionReassignmentsRequest(topics=None))
        [ongoing] = listed.topics
        [p] = ongoing.partitions
        assert (ongoing.name, p.replicas, p.adding_replicas, p.removing_replicas) == \
            ("held", [c, frozen, kept], [frozen], [kept])
        znode = json.loads(cluster.zk.get("/brokers/topics/held")[0])
        assert (znode["partitions"], znode["adding_replicas"], znode["removing_replicas"]) == \
            ({"0": [c, frozen, kept]}, {"0": [frozen]}, {"0": [kept]})
        assert _alter_code(controller, "held", None) == (ErrorCode.NONE, None)
        znode = json.loads(cluster.zk.get("/brokers/topics/held")[0])
        assert (znode["partitions"], znode["adding_replicas"], znode["removing_replicas"]) == ({"0": [c, kept]}, {}, {})
        assert _request(controller, ListPartitionReassignmentsRequest(topics=None)).topics == []
    finally:
        os.kill(target.proc.pid, signal.SIGCONT)
    # The cancelled replica is deleted once its broker runs again.
    wait_until(lambda: "deleted replica held-0" in target.log_path.read_text(), what="the cancelled replica deleted",
               timeout_s=30)

    # The legacy znode (kafka-reassign-partitions --zookeeper): moved, then the znode is gone.
    cluster.zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
        {"topic": "held", "partition": 0, "replicas": [kept, frozen], "log_dirs": ["any", "any"]}]}).encode(),
        makepath=True)
    wait_until(lambda: json.loads(cluster.zk.get("/brokers/topics/held")[0])["partitions"] == {"0": [kept, frozen]},
               what="held-0 moved through the znode", timeout_s=30)
    wait_until(lambda: cluster.zk.exists("/admin/reassign_partitions") is None,
               what="/admin/reassign_partitions deleted", timeout_s=10)
    assert cluster.leader("held", 0) == kept


def test_a_new_controller_resumes_a_reassignment_from_the_topic_znode(cluster: Cluster) -> None:
    c = cluster.controller()
    kept, frozen = sorted({1, 2, 3} - {c})
    _create_one(cluster, "resumed", [c, kept])
    acked: list[bytes] = []
    _produce(cluster.bootstrap(), "resumed", "r", acked, count=300)

    # The target's broker cannot catch up (frozen) when the controller leaves: the move is left
    # half done, in the topic znode only.
    target = cluster.brokers[frozen]
    assert target.proc is not None
    os.kill(target.proc.pid, signal.SIGSTOP)
    try:
        assert _alter_code(cluster.brokers[c], "resumed", [kept, frozen]) == (ErrorCode.NONE, None)
        assert cluster.brokers[c].stop() == 0
    finally:
        os.kill(target.proc.pid, signal.SIGCONT)
    wait_until(lambda: cluster.controller() == kept, what=f"broker {kept} the controller", timeout_s=30)
    # The new controller finishes it once the target replica has caught up.
    wait_until(lambda: json.loads(cluster.zk.get("/brokers/topics/resumed")[0])["partitions"] == {"0": [kept, frozen]},
               what="the resumed move completed", timeout_s=60)
    znode = json.loads(cluster.zk.get("/brokers/topics/resumed")[0])
    assert znode["adding_replicas"] == {} and znode["removing_replicas"] == {}
    state = cluster.state("resumed", 0)
    assert state["leader"] == kept and sorted(state["isr"]) == sorted([kept, frozen]), state  # type: ignore[call-overload]
    wait_until(lambda: _segments(target.data_dir, "resumed", 0) == _segments(cluster.brokers[kept].data_dir,
                                                                             "resumed", 0) != {},
               what="the new replica's segments equal to the leader's", timeout_s=30)
