"""Issue 19 item 12, ZooKeeper mode, against three real brokers and a real ZooKeeper: the topics
of one CreateTopics request are checked against ZooKeeper once and then each with the earlier
ones of the request counted, so its first topics win ``max.partitions`` and a refused one takes
nothing; a Metadata request that auto-creates topics past the limit creates its first topics and
refuses the later ones (the order had become whatever the scheduler picked)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from deploy.kafka_socket import ask
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

# __consumer_offsets is one partition: the cluster starts at 1 of max.partitions=10.
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=3", "auto.leader.rebalance.enable=false", "max.partitions=10",
             "num.partitions=1", "default.replication.factor=1")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        wait_until(lambda: running.zk.exists("/brokers/topics/__consumer_offsets/partitions/0/state") is not None,
                   what="__consumer_offsets created", timeout_s=60)
        yield running


def created(cluster: ZkCluster, names: list[str]) -> list[str]:
    return [n for n in names if cluster.zk.exists(f"/brokers/topics/{n}") is not None]


def test_the_first_topics_of_a_request_win_max_partitions(cluster: ZkCluster) -> None:
    topics = [CreateTopicsRequest.CreatableTopic(name=name, num_partitions=count, replication_factor=1)
              for name, count in (("x1", 3), ("x2", 4), ("x3", 3), ("x2", 1), ("x4", 1), ("x5", 2), ("x6", 1))]
    response: CreateTopicsResponse = ask(cluster.bootstrap(1), CreateTopicsRequest(topics=topics, timeout_ms=60_000), 5)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("x1", ErrorCode.NONE), ("x2", ErrorCode.NONE), ("x3", ErrorCode.POLICY_VIOLATION),
        ("x2", ErrorCode.INVALID_REQUEST), ("x4", ErrorCode.NONE), ("x5", ErrorCode.POLICY_VIOLATION),
        ("x6", ErrorCode.NONE)]
    assert "max.partitions=10" in (response.topics[2].error_message or "")
    assert created(cluster, ["x1", "x2", "x3", "x4", "x5", "x6"]) == ["x1", "x2", "x4", "x6"]  # 10 of 10

    # The room of x4 (1), then of x1 (3), then of x2 (4), each time asked for by one Metadata
    # request naming six new topics, in a different order each round.
    for round_, (freed, room) in enumerate((("x4", 1), ("x1", 3), ("x2", 4))):
        deleted: DeleteTopicsResponse = ask(
            cluster.bootstrap(2), DeleteTopicsRequest(topic_names=[freed], timeout_ms=60_000), 4)
        assert deleted.responses[0].error_code == ErrorCode.NONE
        names = [f"auto{round_}-{i}" for i in range(6)]
        names = names[::-1] if round_ % 2 else names[2:] + names[:2]
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                  allow_auto_topic_creation=True)
        answer: MetadataResponse = ask(cluster.bootstrap(1 + round_), request, 9)  # each broker in turn
        codes = {t.name: t.error_code for t in answer.topics}
        assert [codes[n] for n in names[room:]] == [ErrorCode.POLICY_VIOLATION] * (6 - room), (names, codes)
        assert created(cluster, names) == names[:room], (names, codes)
