"""Deleting a topic while one of its partitions is being reassigned, in ZooKeeper mode.

Kafka's controller marks such a topic ineligible for deletion (TopicDeletionManager): it stays
queued under ``/admin/delete_topics`` and fully served until the reassignment finishes or is
cancelled, then the deletion runs; a new reassignment of a topic queued for deletion is refused
with UNKNOWN_TOPIC_OR_PARTITION. Against three real brokers, with the reassignment's target broker
frozen (SIGSTOP: registered, not fetching) so the move cannot finish:

* the live controller keeps the move listed and the replicas on disk while the deletion waits;
  a cancel lets the deletion run; nothing is left (znodes, partition directories), the
  controller is the same one, in the same epoch, and a topic of the same name works again;
* a new controller (the old one SIGKILLed with the deletion queued behind a move asked through
  the legacy ``/admin/reassign_partitions`` znode) resumes both: the move finishes once its
  target runs again, then the deletion, which also waits for the killed broker's removed replica
  and deletes it when that broker comes back.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ListPartitionReassignmentsRequest
from deploy.broker_process import BrokerProcess
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.reassignment import alter_reassignment as _alter
from tests.support.reassignment import send as _request
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=1", "auto.leader.rebalance.enable=false")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        try:
            yield running
        finally:
            for process in running.brokers.values():
                if process.proc is not None:
                    os.kill(process.proc.pid, signal.SIGCONT)  # a failed test may leave one frozen


def _listed(process: BrokerProcess) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    answer = _request(process, ListPartitionReassignmentsRequest(topics=None))
    assert answer.error_code == 0, answer
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


def _create(cluster: ZkCluster, topic: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(timeout=60)
    wait_until(lambda: cluster.zk.exists(f"/brokers/topics/{topic}/partitions/0/state") is not None,
               what=f"{topic}-0 created", timeout_s=30)


def _produce(cluster: BrokerProcess | ZkCluster, topic: str, count: int = 20) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap() if isinstance(cluster, ZkCluster)
                         else cluster.bootstrap, "acks": "all", "message.timeout.ms": 30000})
    for i in range(count):
        producer.produce(topic, f"{topic}-{i}".encode(), partition=0)
    assert producer.flush(60) == 0, f"records to {topic} left unacknowledged"


def _dirs(process: BrokerProcess, topic: str) -> list[str]:
    """The topic's partition directories in the broker's data dir (those being deleted too)."""
    return sorted(p.name for p in process.data_dir.iterdir() if p.name.startswith(f"{topic}-"))


def _znodes_left(cluster: ZkCluster, topic: str) -> list[str]:
    left = [path for path in (f"/brokers/topics/{topic}", f"/admin/delete_topics/{topic}", f"/config/topics/{topic}")
            if cluster.zk.exists(path) is not None]
    if cluster.zk.exists("/admin/reassign_partitions") is not None:
        moves = json.loads(cluster.zk.get("/admin/reassign_partitions")[0])["partitions"]
        left += [f"/admin/reassign_partitions: {m}" for m in moves if m["topic"] == topic]
    return left


def _on_the_controller_and_one_more(cluster: ZkCluster, topic: str) -> tuple[int, int, int, int]:
    """`topic` created with records on the controller and one more broker: (the controller, its
    epoch, that broker, the third broker)."""
    c, epoch = cluster.controller()
    kept, third = sorted({1, 2, 3} - {c})
    _create(cluster, topic, [c, kept])
    _produce(cluster, topic)
    return c, epoch, kept, third


@contextmanager
def _frozen(process: BrokerProcess) -> Iterator[None]:
    """`process` stopped (SIGSTOP) for the block: alive and connected, answering nothing."""
    assert process.proc is not None
    os.kill(process.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.proc.pid, signal.SIGCONT)


def test_deletion_waits_for_the_reassignment_and_runs_once_it_is_cancelled(cluster: ZkCluster) -> None:
    c, epoch, kept, frozen = _on_the_controller_and_one_more(cluster, "moving")
    controller = cluster.brokers[c]
    target = cluster.brokers[frozen]

    with _frozen(target):
        assert _alter(controller, "moving", [kept, frozen]) == ErrorCode.NONE
        # kafka-topics --delete; its answer comes once the broker stops waiting for the deletion.
        admin = AdminClient({"bootstrap.servers": controller.bootstrap})
        admin.delete_topics(["moving"], operation_timeout=1)
        # Once the controller has the deletion queued, a move of the topic is refused (Kafka's
        # isTopicQueuedUpForDeletion; polled with the move's own target, which changes nothing)...
        wait_until(lambda: _alter(controller, "moving", [kept, frozen]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   what="a move of a topic queued for deletion refused", timeout_s=30)
        assert _alter(controller, "moving", [c, kept, frozen]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # ...but the deletion waits for the move under way: listed, in the znodes, on disk.
        assert _listed(controller) == {("moving", 0): ([kept, frozen, c], [frozen], [c])}
        assert cluster.zk.exists("/admin/delete_topics/moving") is not None
        assert json.loads(cluster.zk.get("/brokers/topics/moving")[0])["adding_replicas"] == {"0": [frozen]}
        assert _dirs(controller, "moving") == ["moving-0"] and _dirs(cluster.brokers[kept], "moving") == ["moving-0"]
        # A cancel is the operator's way out: the deletion runs, on the brokers of the original
        # replicas at once; it also waits for the frozen broker to delete the replica it was
        # being given.
        assert _alter(controller, "moving", None) == ErrorCode.NONE
        wait_until(lambda: not _dirs(controller, "moving") and not _dirs(cluster.brokers[kept], "moving"),
                   what="the original replicas of moving deleted", timeout_s=30)
        assert cluster.zk.exists("/admin/delete_topics/moving") is not None

    wait_until(lambda: not _znodes_left(cluster, "moving"), what="the znodes of moving deleted", timeout_s=30)
    wait_until(lambda: not any(_dirs(b, "moving") for b in cluster.brokers.values()),
               what="no directory of moving left", timeout_s=30)
    assert controller.proc is not None and controller.proc.poll() is None
    assert cluster.controller() == (c, epoch), "the controller resigned or was replaced"
    assert "an event failed" not in controller.log_path.read_text()
    # The name is free again: a new topic of that name, on every broker, takes writes.
    _create(cluster, "moving", [frozen, c, kept])
    wait_until(lambda: sorted(cluster.state("moving")["isr"]) == [1, 2, 3],  # type: ignore[call-overload]
               what="the new moving-0 in sync on three brokers", timeout_s=60)
    _produce(cluster, "moving")


def test_a_new_controller_resumes_the_move_then_the_deletion(cluster: ZkCluster) -> None:
    c, epoch, kept, frozen = _on_the_controller_and_one_more(cluster, "handed")
    old = cluster.brokers[c]
    target = cluster.brokers[frozen]

    with _frozen(target):
        # kafka-reassign-partitions --zookeeper and kafka-topics --zookeeper --delete, as znodes.
        cluster.zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": "handed", "partition": 0, "replicas": [kept, frozen]}]}).encode(), makepath=True)
        wait_until(lambda: json.loads(cluster.zk.get("/brokers/topics/handed")[0])["adding_replicas"]
                   == {"0": [frozen]}, what="the move of handed-0 started", timeout_s=30)
        cluster.zk.create("/admin/delete_topics/handed", b"", makepath=True)
        # (Polled in the log: a move asked through the API would take over the znode's.)
        wait_until(lambda: "deletion of topic handed waits" in old.log_path.read_text(),
                   what="the deletion of handed queued", timeout_s=30)
        old.kill()
        wait_until(lambda: cluster.controller()[0] == kept, what=f"broker {kept} the controller", timeout_s=30)
        new = cluster.brokers[kept]
        wait_until(lambda: "deletion of topic handed waits" in new.log_path.read_text(),
                   what="the new controller has the deletion queued", timeout_s=30)
        assert _alter(new, "handed", [c, kept, frozen]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # The new controller resumed the move, and the deletion waits for it.
        assert _listed(new) == {("handed", 0): ([kept, frozen, c], [frozen], [c])}
        assert cluster.zk.exists("/admin/delete_topics/handed") is not None
        assert _dirs(new, "handed") == ["handed-0"]

    # The target catches up: the move completes, then the deletion runs; the removed replica's
    # broker is down, so the deletion waits for it (as for any replica on a broker that is down).
    wait_until(lambda: not _dirs(new, "handed") and not _dirs(target, "handed"),
               what="the replicas of handed on the live brokers deleted", timeout_s=60)
    assert cluster.zk.exists("/admin/delete_topics/handed") is not None, "the killed broker's replica was forgotten"
    assert _dirs(old, "handed") == ["handed-0"]
    old.start()
    wait_until(lambda: not _znodes_left(cluster, "handed"), what="the znodes of handed deleted", timeout_s=30)
    wait_until(lambda: not _dirs(old, "handed"), what="the returning broker's replica deleted", timeout_s=30)
    assert cluster.zk.exists("/admin/reassign_partitions") is None
    assert cluster.controller()[0] == kept and cluster.controller()[1] > epoch
    assert "an event failed" not in new.log_path.read_text()
    _create(cluster, "handed", [c, frozen])
    _produce(cluster, "handed")
