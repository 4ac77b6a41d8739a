"""Issue 19, item 6: ZooKeeper mode enforces KIP-578's partition limits, as standalone mode does.

A 3-broker cluster accepted 180 replicas per broker with ``max.broker.partitions=100`` and 600
auto-created topics past ``max.partitions``. Against three real brokers and a real ZooKeeper,
with confluent-kafka's AdminClient and producer: CreateTopics (by count and by explicit
assignment), CreatePartitions, AlterPartitionReassignments, the legacy
``/admin/reassign_partitions`` znode and auto-creation are refused with POLICY_VIOLATION naming
the limit, nothing of a refused request is written, and growth up to the limit still works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.protocol.errors import ErrorCode
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.reassignment import alter_reassignment
from tests.support.zookeeper import ZooKeeperServer

# One offsets partition on every broker: each broker starts holding 1 replica, the cluster 1 partition.
BASE = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1", "offsets.topic.replication.factor=3",
        "auto.leader.rebalance.enable=false")


@pytest.fixture
def cluster_factory(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[list[ZkCluster]]:
    made: list[ZkCluster] = []
    yield made
    for cluster in made:
        cluster.close()


def _start(made: list[ZkCluster], zookeeper: ZooKeeperServer, root: Path, *overrides: str) -> ZkCluster:
    cluster = ZkCluster(zookeeper, root, (*BASE, *overrides))
    made.append(cluster)
    cluster.start()
    wait_until(lambda: cluster.zk.exists("/brokers/topics/__consumer_offsets/partitions/0/state") is not None,
               what="__consumer_offsets created", timeout_s=60)
    return cluster


def _refused(future: object, key: str) -> str:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=60)  # type: ignore[attr-defined]
    error = info.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION, error
    assert key in error.str(), error
    return str(error.str())


def _replicas(cluster: ZkCluster, topic: str) -> dict[str, list[int]]:
    data, _ = cluster.zk.get(f"/brokers/topics/{topic}")
    return dict(json.loads(data)["partitions"])


def test_broker_limit_bounds_creation_growth_and_reassignment(
        cluster_factory: list[ZkCluster], zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = _start(cluster_factory, zookeeper, tmp_path, "max.broker.partitions=20")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic("rf3", 8, 3)])["rf3"].result(timeout=60)  # every broker: 9

    message = _refused(admin.create_topics([NewTopic("big", 12, 3)])["big"], "max.broker.partitions=20")
    assert "broker" in message and "holds 9" in message
    _refused(admin.create_partitions([NewPartitions("rf3", 20)])["rf3"], "max.broker.partitions=20")
    admin.create_partitions([NewPartitions("rf3", 10)])["rf3"].result(timeout=60)  # every broker: 11
    # An explicit assignment is counted broker by broker: ten more on broker 1 is one too many.
    _refused(admin.create_topics([NewTopic("pinned", 10, replica_assignment=[[1]] * 10)])["pinned"],
             "max.broker.partitions=20")
    admin.create_topics([NewTopic("pinned", 9, replica_assignment=[[1]] * 9)])["pinned"].result(timeout=60)
    admin.create_topics([NewTopic("solo", 1, replica_assignment=[[2]])])["solo"].result(timeout=60)
    admin.create_topics([NewTopic("solo2", 1, replica_assignment=[[3]])])["solo2"].result(timeout=60)
    assert cluster.zk.exists("/brokers/topics/big") is None
    assert len(_replicas(cluster, "rf3")) == 10

    # Broker 1 holds 20 now: a move that adds a replica there is refused, one elsewhere is not.
    controller = cluster.brokers[cluster.controller()[0]]
    assert alter_reassignment(controller, "solo", [1]) == ErrorCode.POLICY_VIOLATION
    assert alter_reassignment(controller, "solo", [2, 3]) == ErrorCode.NONE
    wait_until(lambda: _replicas(cluster, "solo") == {"0": [2, 3]}, what="solo moved to [2, 3]", timeout_s=60)

    # The legacy znode: the refused move is dropped from it (and the znode goes), and logged.
    cluster.zk.create("/admin/reassign_partitions", json.dumps(
        {"version": 1, "partitions": [{"topic": "solo2", "partition": 0, "replicas": [3, 1]}]}).encode())
    wait_until(lambda: cluster.zk.exists("/admin/reassign_partitions") is None, what="the znode removed",
               timeout_s=60)
    assert _replicas(cluster, "solo2") == {"0": [3]}
    log = controller.log_path.read_text()
    assert "reassignment of solo2-0 through /admin/reassign_partitions failed: POLICY_VIOLATION" in log
    assert not any(p.name.startswith("solo2-") for p in cluster.brokers[1].data_dir.iterdir())


def test_cluster_limit_bounds_creation_and_auto_creation(
        cluster_factory: list[ZkCluster], zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = _start(cluster_factory, zookeeper, tmp_path, "max.partitions=10", "num.partitions=1",
                     "default.replication.factor=1")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    _refused(admin.create_topics([NewTopic("wide", 10, 1)])["wide"], "max.partitions=10")
    assert cluster.zk.exists("/brokers/topics/wide") is None

    # A producer asking for topics that do not exist makes the brokers create them, up to the limit.
    producer = Producer({"bootstrap.servers": cluster.bootstrap()})
    for i in range(9):
        wait_until(lambda name=f"auto-{i}": producer.list_topics(name, timeout=30).topics[name].error is None,
                   what=f"auto-{i} auto-created", timeout_s=60)
    assert all(cluster.zk.exists(f"/brokers/topics/auto-{i}") is not None for i in range(9))
    for name in ("auto-9", "auto-10"):
        error = producer.list_topics(name, timeout=30).topics[name].error
        assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, error
        assert cluster.zk.exists(f"/brokers/topics/{name}") is None
    _refused(admin.create_topics([NewTopic("one-more", 1, 1)])["one-more"], "max.partitions=10")
    # Room made by a deletion is room again.
    admin.delete_topics(["auto-0"], operation_timeout=30)["auto-0"].result(timeout=60)
    admin.create_topics([NewTopic("one-more", 1, 1)])["one-more"].result(timeout=60)
