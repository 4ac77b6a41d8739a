"""CreateTopics, CreatePartitions and DeleteTopics answer within the request's timeout_ms in
ZooKeeper mode, as Kafka's (ZkAdminManager with DelayedCreatePartitions / DelayedDeleteTopics):

* NONE once the change is in this broker's metadata (leaders for new partitions; the topic gone);
* REQUEST_TIMED_OUT for a change still pending when the timeout passes, which goes on in the
  background (here: a deletion queued behind a partition reassignment onto a frozen broker);
* timeout_ms <= 0: REQUEST_TIMED_OUT right after the znodes are written, without waiting
  (validate_only: NONE);

and the clients' own admin tools, which send their default timeouts, still get NONE. Against
three real brokers in one real ZooKeeper.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import run_tool
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
)
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.polling import wait_until
from tests.support.reassignment import alter_reassignment, frozen, send

OVERRIDES = ("zookeeper.session.timeout.ms=10000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=1", "auto.leader.rebalance.enable=false")
# A bound on an answer that must come within the request's timeout (the broker used to wait 30 s
# whatever the request asked for); the tests assert what the answer is, not how long it took.
ANSWER_BOUND_S = 15


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with own_zookeeper_cluster(ZkCluster, tmp_path_factory.mktemp("zk-admin-timeouts"), OVERRIDES) as cluster:
        yield cluster


def _create(process: BrokerProcess, topic: str, partitions: int, timeout_ms: int, *,
            validate_only: bool = False) -> Any:
    answer = send(process, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=3)], timeout_ms=timeout_ms,
        validate_only=validate_only), timeout_s=ANSWER_BOUND_S)
    [result] = answer.topics
    assert result.name == topic
    return result


def _grow(process: BrokerProcess, topic: str, count: int, timeout_ms: int) -> Any:
    answer = send(process, CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=topic, count=count, assignments=None)], timeout_ms=timeout_ms), timeout_s=ANSWER_BOUND_S)
    [result] = answer.results
    assert result.name == topic
    return result


def _delete(process: BrokerProcess, topic: str, timeout_ms: int) -> Any:
    answer = send(process, DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=topic)],
                                               topic_names=[topic], timeout_ms=timeout_ms), timeout_s=ANSWER_BOUND_S)
    [result] = answer.responses
    assert result.name == topic
    return result


def _leaders(process: BrokerProcess, topic: str) -> dict[int, int] | None:
    """partition -> leader in the broker's metadata; None when it does not know the topic."""
    answer = send(process, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False))
    [found] = answer.topics
    if found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    return {p.partition_index: p.leader_id for p in found.partitions}


def _znodes_left(cluster: ZkCluster, topic: str) -> list[str]:
    return [path for path in (f"/brokers/topics/{topic}", f"/admin/delete_topics/{topic}", f"/config/topics/{topic}")
            if cluster.zk.exists(path) is not None]


def _led(leaders: dict[int, int] | None, count: int) -> bool:
    return leaders is not None and sorted(leaders) == list(range(count)) and all(b >= 0 for b in leaders.values())


def test_changes_answer_none_once_they_are_in_the_metadata(cluster: ZkCluster) -> None:
    broker = cluster.brokers[1]
    created = _create(broker, "plain", 2, 30_000)
    assert (created.error_code, created.num_partitions, created.replication_factor) == (ErrorCode.NONE, 2, 3)
    assert _led(_leaders(broker, "plain"), 2), "CreateTopics answered before its partitions had leaders"

    grown = _grow(broker, "plain", 3, 30_000)
    assert grown.error_code == ErrorCode.NONE, grown
    assert _led(_leaders(broker, "plain"), 3), "CreatePartitions answered before the new partition had a leader"

    deleted = _delete(broker, "plain", 30_000)
    assert deleted.error_code == ErrorCode.NONE, deleted
    assert _leaders(broker, "plain") is None, "DeleteTopics answered while the topic was still served"
    wait_until(lambda: not _znodes_left(cluster, "plain"), what="the znodes of plain deleted", timeout_s=30)


def test_timeout_zero_answers_request_timed_out_and_the_change_goes_on(cluster: ZkCluster) -> None:
    broker = cluster.brokers[2]
    # validate_only waits for nothing: NONE whatever the timeout (Kafka's ZkAdminManager).
    checked = _create(broker, "zero", 2, 0, validate_only=True)
    assert checked.error_code == ErrorCode.NONE, checked
    assert cluster.zk.exists("/brokers/topics/zero") is None

    created = _create(broker, "zero", 2, 0)
    assert created.error_code == ErrorCode.REQUEST_TIMED_OUT, created
    assert "goes on" in (created.error_message or ""), created
    assert (created.num_partitions, created.replication_factor, created.configs) == (-1, -1, [])
    wait_until(lambda: _led(_leaders(broker, "zero"), 2), what="zero created in the background", timeout_s=30)
    assert _create(broker, "zero", 2, 0).error_code == ErrorCode.TOPIC_ALREADY_EXISTS

    grown = _grow(broker, "zero", 3, 0)
    assert grown.error_code == ErrorCode.REQUEST_TIMED_OUT, grown
    wait_until(lambda: _led(_leaders(broker, "zero"), 3), what="the third partition of zero", timeout_s=30)

    deleted = _delete(broker, "zero", 0)
    assert deleted.error_code == ErrorCode.REQUEST_TIMED_OUT, deleted
    wait_until(lambda: _leaders(broker, "zero") is None and not _znodes_left(cluster, "zero"),
               what="zero deleted in the background", timeout_s=30)


def test_a_held_up_deletion_times_out_and_completes_once_the_hold_up_clears(cluster: ZkCluster) -> None:
    c, epoch = cluster.controller()
    kept, target = sorted({1, 2, 3} - {c})
    controller = cluster.brokers[c]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic("held", 1, replica_assignment=[[c, kept]])])["held"].result(timeout=60)
    wait_until(lambda: _led(_leaders(controller, "held"), 1), what="held-0 led", timeout_s=30)

    with frozen(cluster.brokers[target]):
        # A move onto the frozen broker cannot finish; a deletion asked meanwhile waits for it.
        assert alter_reassignment(controller, "held", [kept, target]) == ErrorCode.NONE
        wait_until(lambda: json.loads(cluster.zk.get("/brokers/topics/held")[0])["adding_replicas"]
                   == {"0": [target]}, what="the move of held-0 under way", timeout_s=30)
        deleted = _delete(controller, "held", 2000)
        assert deleted.error_code == ErrorCode.REQUEST_TIMED_OUT, deleted
        assert "marked for deletion" in (deleted.error_message or ""), deleted
        # Still queued, and still served while it waits.
        assert cluster.zk.exists("/admin/delete_topics/held") is not None
        assert _led(_leaders(controller, "held"), 1)
        # The operator's way out: cancel the move; the deletion then runs.
        assert alter_reassignment(controller, "held", None) == ErrorCode.NONE

    wait_until(lambda: not _znodes_left(cluster, "held"), what="the znodes of held deleted", timeout_s=30)
    assert all(_leaders(b, "held") is None for b in cluster.brokers.values())
    assert cluster.controller() == (c, epoch), "the controller resigned or was replaced"


def test_confluent_kafka_admin_with_its_default_timeouts(cluster: ZkCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic("librdkafka", 2, 3)])["librdkafka"].result(timeout=60)
    # librdkafka sends its admin requests to the controller: its answer came with the leaders there.
    assert _led(_leaders(cluster.brokers[cluster.controller()[0]], "librdkafka"), 2)
    admin.delete_topics(["librdkafka"])["librdkafka"].result(timeout=60)
    wait_until(lambda: not _znodes_left(cluster, "librdkafka"), what="librdkafka deleted", timeout_s=30)


def test_kafka_topics_create_and_delete(cluster: ZkCluster, kafka_jars: None) -> None:
    bootstrap = cluster.bootstrap()
    created = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", "tool",
                       "--partitions", "2", "--replication-factor", "3").check()
    assert "Created topic tool." in created.stdout
    described = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "tool").check()
    assert "PartitionCount: 2" in described.stdout and "Leader: none" not in described.stdout
    run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--delete", "--topic", "tool").check()
    wait_until(lambda: not _znodes_left(cluster, "tool"), what="tool deleted", timeout_s=30)
