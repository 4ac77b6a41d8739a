"""Multi-broker clusters in a topology: the checks, the launch plan, and how status reads a cluster.

`brokers: N` needs `coordination: zookeeper`; replica counts (a topic's replication factor, the
cluster's default.replication.factor, min.insync.replicas) above the broker count are check
errors named by line and key. The plan numbers a ZooKeeper cluster's brokers 1..N and carries
each topic's replication factor and configs. Status judges a cluster by each broker's own
Metadata: a restarted broker that has not rejoined is `starting`, even while the others still
list its previous run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.client.cluster import BrokerInfo, ClusterMetadata, PartitionMetadata, TopicMetadata
from deploy.launcher import control
from deploy.launcher.cluster_view import ClusterView, view_of
from deploy.launcher.from_topology import plan_from_file
from deploy.launcher.plan import ClusterPlan, TopicPlan
from deploy.launcher.state_file import BrokerRecord, ClusterRecord, ZooKeeperRecord
from tests.unit.topology.files import assert_refused_at, write

CLUSTER = """\
name: t
datacenters:
  east: {}
clusters:
  east:
    datacenter: east
    brokers: 3
    coordination: zookeeper
    configs:
      default.replication.factor: 3
      min.insync.replicas: 2
    topics:
      orders:
        partitions: 2
        replication_factor: 3
        configs:
          retention.ms: 1000
      plain: 4
"""


BROKEN = [
    ("several standalone brokers", CLUSTER.replace("    coordination: zookeeper\n", ""),
     "7:5: clusters.east.brokers:", "3 brokers need coordination: zookeeper"),
    ("replication factor above the brokers", CLUSTER.replace("brokers: 3", "brokers: 2").replace(
        "default.replication.factor: 3", "default.replication.factor: 2"),
     "15:9: clusters.east.topics.orders.replication_factor:", "replication factor 3 is more than the cluster's 2"),
    ("default replication factor above the brokers", CLUSTER.replace("replication.factor: 3",
                                                                     "replication.factor: '4'"),
     "10:7: clusters.east.configs.default.replication.factor:",
     "default.replication.factor 4 is more than the cluster's 3 broker(s)"),
    ("min.insync.replicas above the brokers", CLUSTER.replace("retention.ms: 1000", "min.insync.replicas: 5"),
     "17:11: clusters.east.topics.orders.configs.min.insync.replicas:",
     "min.insync.replicas 5 is more than the cluster's 3 broker(s)"),
]


@pytest.mark.parametrize(("what", "text", "where", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_replica_counts_and_brokers_are_checked(tmp_path: Path, what: str, text: str, where: str,
                                                message: str) -> None:
    assert_refused_at(tmp_path, text, where, message)


def test_a_zookeeper_cluster_compiles_to_brokers_1_to_n_with_its_topics(tmp_path: Path) -> None:
    plan = plan_from_file(write(tmp_path, CLUSTER))
    east = plan.cluster("east")
    assert (east.brokers, east.coordination, east.broker_ids) == (3, "zookeeper", (1, 2, 3))
    assert east.broker_configs == {"default.replication.factor": "3", "min.insync.replicas": "2"}
    assert east.topic_plans() == {"orders": TopicPlan(2, 3, {"retention.ms": "1000"}), "plain": TopicPlan(4)}


def test_a_standalone_cluster_keeps_its_one_broker_id_0() -> None:
    assert ClusterPlan("a", "dc", topics={"t": 2}).broker_ids == (0,)
    assert ClusterPlan("a", "dc", topics={"t": 2}).topic_plans() == {"t": TopicPlan(2)}
    with pytest.raises(ValueError, match="3 brokers need coordination zookeeper"):
        ClusterPlan("a", "dc", brokers=3)


def _partition(index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> PartitionMetadata:
    return PartitionMetadata(index, leader, 0, replicas, isr)


def _metadata(controller: int, brokers: tuple[int, ...], isr0: tuple[int, ...] = (1, 2, 3),
              leader1: int = 2) -> ClusterMetadata:
    parts = {0: _partition(0, 1, (1, 2, 3), isr0), 1: _partition(1, leader1, (2, 3, 1), (2, 3, 1))}
    return ClusterMetadata("c", controller, {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers},
                           {"orders": TopicMetadata("orders", parts)})


def test_the_view_names_under_replicated_and_offline_partitions() -> None:
    view = view_of(_metadata(2, (1, 2, 3), isr0=(1, 3), leader1=-1))
    assert (view.controller_id, view.brokers, view.partitions) == (2, (1, 2, 3), 2)
    assert [str(p) for p in view.under_replicated] == ["orders-0 (leader 1, replicas 1,2,3, isr 1,3)"]
    assert [str(p) for p in view.offline] == ["orders-1 (leader -1, replicas 2,3,1, isr 2,3,1)"]


def _record() -> ClusterRecord:
    brokers = [BrokerRecord(id=i, pid=100 + i, address=f"127.0.0.1:{9000 + i}") for i in (1, 2, 3)]
    return ClusterRecord(datacenter="east", bootstrap="127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003",
                         brokers=brokers, zookeeper=ZooKeeperRecord(pid=99, connect="127.0.0.1:2181/east"))


def test_status_trusts_each_broker_about_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # Broker 3 was killed and restarted: it answers, knows no controller yet, and the others
    # still list its previous run (its ZooKeeper session has not expired).
    answers: list[ClusterView | str] = [view_of(_metadata(1, (1, 2, 3))), view_of(_metadata(1, (1, 2, 3))),
                                        view_of(_metadata(-1, (3,)))]
    zookeeper = {"127.0.0.1:2181": "standalone"}
    assert control.broker_addresses(_record()) == ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"]
    out = control.cluster_status(_record(), {99, 101, 102, 103}, answers, zookeeper)
    assert [b["state"] for b in out["brokers"]] == ["serving", "serving", "starting"]
    assert out["controller"] == 1 and not out["healthy"] and out["zookeeper"]["healthy"]
    assert out["unhealthy_because"] == ["broker 3 has not rejoined the cluster yet (it knows no controller)"]

    # Rejoined, but one follower is behind; broker 2's process is gone.
    answers[:] = [view_of(_metadata(1, (1, 3), isr0=(1, 3))), "no answer to Metadata from 127.0.0.1:9002: refused",
                  view_of(_metadata(1, (1, 3), isr0=(1, 3)))]
    out = control.cluster_status(_record(), {99, 101, 103}, answers, zookeeper)
    assert [b["state"] for b in out["brokers"]] == ["serving", "down", "serving"]
    assert out["under_replicated"] == ["orders-0 (leader 1, replicas 1,2,3, isr 1,3)"]
    assert out["unhealthy_because"] == ["broker 2 is not running", "1 under-replicated partition(s)"]

    # Whole again.
    answers[:] = [view_of(_metadata(3, (1, 2, 3)))] * 3
    out = control.cluster_status(_record(), {99, 101, 102, 103}, answers, zookeeper)
    assert out["healthy"] and out["controller"] == 3 and out["offline_count"] == 0

    # A ZooKeeper node that did not answer `srvr` in time makes the cluster unhealthy.
    out = control.cluster_status(_record(), {99, 101, 102, 103}, answers, {"127.0.0.1:2181": None})
    assert out["unhealthy_because"] == ["its ZooKeeper is not serving"]
