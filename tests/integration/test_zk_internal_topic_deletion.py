"""Issue 19, item 4: an internal topic cannot be deleted through ZooKeeper.

DeleteTopics refuses ``__consumer_offsets`` (INVALID_TOPIC_EXCEPTION); a request written straight
to ``/admin/delete_topics/<topic>`` (zkCli, an old ``kafka-topics --zookeeper``) used to reach
the controller, which deleted the topic on all three brokers and every group lost its offsets.
Against three real brokers and a real ZooKeeper: the controller removes the request znode and logs
why, for ``__consumer_offsets`` and for an internal topic that does not exist yet, while a normal
topic's deletion asked for at the same moment goes through; the offsets topic keeps its
partitions on every broker and a group's committed offsets stay readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.consume import committed
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=3",
             "offsets.topic.replication.factor=3", "group.initial.rebalance.delay.ms=0")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_internal_topic_deletion_through_zookeeper_is_refused(cluster: ZkCluster) -> None:
    bootstrap = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("orders", "scratch"):
        admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=30)[name].result(timeout=60)
    _commit(bootstrap, "billing", "orders", 42)
    assert committed(bootstrap, "billing", "orders", 1) == {0: 42}
    offsets_dirs = {b: sorted(p.name for p in process.data_dir.iterdir() if p.name.startswith("__consumer_offsets-"))
                    for b, process in cluster.brokers.items()}
    assert all(len(dirs) == 3 for dirs in offsets_dirs.values()), offsets_dirs

    # Three requests at once, as zkCli would write them: two internal topics (one not created
    # yet) and a normal one.
    for name in ("__consumer_offsets", "__transaction_state", "scratch"):
        cluster.zk.create(f"/admin/delete_topics/{name}", b"", makepath=True)

    # The normal deletion completes, and the refused requests are gone from ZooKeeper.
    wait_until(lambda: cluster.zk.exists("/brokers/topics/scratch") is None, what="scratch deleted", timeout_s=60)
    wait_until(lambda: not cluster.zk.get_children("/admin/delete_topics"), what="the request znodes removed",
               timeout_s=60)

    controller_id, _ = cluster.controller()
    log = cluster.brokers[controller_id].log_path.read_text()
    for name in ("__consumer_offsets", "__transaction_state"):
        assert f"refused the deletion of topic {name} asked through /admin/delete_topics/{name}" in log
    # Still there, everywhere, with the group's offsets in it.
    assert cluster.zk.exists("/brokers/topics/__consumer_offsets") is not None
    assert cluster.zk.exists("/brokers/topics/__transaction_state") is None  # refusing created nothing
    assert {b: sorted(p.name for p in process.data_dir.iterdir() if p.name.startswith("__consumer_offsets-"))
            for b, process in cluster.brokers.items()} == offsets_dirs
    assert "__consumer_offsets" in admin.list_topics(timeout=30).topics
    assert committed(bootstrap, "billing", "orders", 1) == {0: 42}
    _commit(bootstrap, "billing", "orders", 43)  # and the coordinators still take commits
    assert committed(bootstrap, "billing", "orders", 1) == {0: 43}
