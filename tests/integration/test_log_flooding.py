"""Issue 19, item 14: no line a peer can cause floods the broker's log.

A peer playing controller (forged LeaderAndIsr, UpdateMetadata and StopReplica), a client
setting the deprecated message.format.version on every request, and someone writing garbage
notifications under /config/changes in ZooKeeper each used to cost one log line per request
or znode (per broker). Now each kind is logged once per window and counted: the broker's log
keeps one line and a summary ("... and N more like this (kind) ...", written at the latest
when the broker stops), and the line plus the count add up to exactly what was sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from kazoo.client import KazooClient

from broker.controller.zk import znodes
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    CreateTopicsRequest,
    DescribeConfigsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask, connect, message_frame, read_frame
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

TIMEOUT_S = 60


def _logged(log: str, line: str, kind: str) -> tuple[int, int]:
    """(lines containing `line`, repeats the summaries of `kind` counted)."""
    lines = sum(1 for text in log.splitlines() if line in text)
    summary = re.compile(rf"\.\.\. and ([\d,]+) more like this \({re.escape(kind)}\)")
    counted = sum(int(n.replace(",", "")) for n in summary.findall(log))
    return lines, counted


def _pipelined(bootstrap: str, frames: Iterable[bytes]) -> list[bytes]:
    """Send every frame on one connection, then read every answer."""
    frames = list(frames)
    with connect(bootstrap, timeout_s=TIMEOUT_S) as sock:
        sock.sendall(b"".join(frames))
        return [read_frame(sock) for _ in frames]


def _forged(broker_epoch: int, controller_epoch: int) -> list[tuple[object, int]]:
    """One LeaderAndIsr, UpdateMetadata and StopReplica from 'controller 1' (with their versions)."""
    li = LeaderAndIsrRequest(controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                             topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                                 topic_name="orders", partition_states=[
                                     LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                                         topic_name="orders", partition_index=0, leader=99, isr=[99],
                                         replicas=[99, 0])])])
    um = UpdateMetadataRequest(controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch)
    sr = StopReplicaRequest(controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                            topic_states=[StopReplicaRequest.StopReplicaTopicState(
                                topic_name="orders", partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                                    partition_index=0, delete_partition=True)])])
    return [(li, 7), (um, 8), (sr, 4)]


def test_forged_controller_requests_cost_one_line_and_a_count(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", topics=("orders:1",)).start()
    try:
        sent = 0
        # Pipelined on a few connections, and one request per connection: both ways of asking.
        for batch in range(4):
            frames = [message_frame(message, version, correlation_id=i)
                      for i in range(150) for message, version in _forged(batch, i)]
            answers = _pipelined(broker.bootstrap, frames)
            sent += len(answers)
        for i in range(60):
            message, version = _forged(-1, 2**31 - 1)[i % 3]
            answer = ask(broker.bootstrap, message, version, timeout_s=TIMEOUT_S)
            assert answer.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
            sent += 1
        # Nothing was acted on: the partition is still led here.
        assert ask(broker.bootstrap, DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="orders",
                                                           configuration_keys=["cleanup.policy"])]),
            4, timeout_s=TIMEOUT_S).results[0].error_code == 0
    finally:
        assert broker.stop() == 0, broker.log_tail()  # a clean stop writes the pending summaries
    log = broker.log_path.read_text()
    lines, counted = _logged(log, "refused a controller request", "controller request refused")
    assert sent == 4 * 450 + 60
    assert lines + counted == sent, log[-3000:]
    assert lines * 100 <= sent, log[-3000:]


def test_message_format_version_warns_once_per_window_not_once_per_request(broker: BrokerProcess) -> None:
    def create(i: int) -> bytes:
        request = CreateTopicsRequest(timeout_ms=10_000, validate_only=True, topics=[
            CreateTopicsRequest.CreatableTopic(name=f"mfv-{i}", num_partitions=1, replication_factor=1, configs=[
                CreateTopicsRequest.CreatableTopicConfig(name="message.format.version", value=f"2.{i % 9}")])])
        return message_frame(request, 5, correlation_id=i)

    answers = _pipelined(broker.bootstrap, (create(i) for i in range(600)))
    assert len(answers) == 600
    assert broker.stop() == 0, broker.log_tail()
    log = broker.log_path.read_text()
    lines, counted = _logged(log, "message.format.version with value", "message.format.version ignored")
    assert lines + counted == 600, log[-3000:]
    assert lines * 100 <= 600, log[-3000:]


def test_a_line_nobody_rate_limited_is_still_bounded_per_call_site(tmp_path: Path) -> None:
    """The group coordinator's refusal of an oversized member is an ordinary log.warning: the
    broker process's call-site limit lets its first 100 a window through and counts the rest."""
    broker = BrokerProcess(tmp_path / "broker", overrides=(
        "message.max.bytes=1000", "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0")).start()
    try:
        def join(i: int) -> JoinGroupRequest:
            return JoinGroupRequest(group_id=f"big-{i}", session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                                    member_id="", protocol_type="consumer", protocols=[
                                        JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m" * 2000)])

        ask(broker.bootstrap, FindCoordinatorRequest(key="big-0", key_type=0), 1, timeout_s=TIMEOUT_S)
        wait_until(lambda: ask(broker.bootstrap, join(0), 5, timeout_s=TIMEOUT_S).error_code
                   == ErrorCode.INVALID_REQUEST, what="the coordinator refusing an oversized member",
                   timeout_s=TIMEOUT_S)
        answers = _pipelined(broker.bootstrap, (message_frame(join(i), 5, correlation_id=i) for i in range(1, 400)))
        assert len(answers) == 399
    finally:
        assert broker.stop() == 0, broker.log_tail()
    log = broker.log_path.read_text()
    lines, _ = _logged(log, "refusing a member with 2005 bytes of protocol metadata", "-")
    counted = sum(int(n.replace(",", "")) for n in re.findall(r"\.\.\. and ([\d,]+) more like this "
                                                             r"\(coordinator\.py:\d+\)", log))
    assert 400 <= lines + counted, log[-3000:]
    assert lines <= 2 * 100, log[-3000:]  # the burst, in at most two windows


class _Cluster(ZkCluster):
    def max_message_bytes(self, broker_id: int) -> str | None:
        request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=4, resource_name=str(broker_id), configuration_keys=["message.max.bytes"])])
        (result,) = ask(self.brokers[broker_id].bootstrap, request, 4, timeout_s=TIMEOUT_S).results
        return next((c.value for c in result.configs if c.name == "message.max.bytes"), None)


GARBAGE = (b"garbage", b"", b"{}", b'{"version":9,"entity_path":"topics/x"}', b"\xff\xfe" * 200,
           b'{"version":2,"entity_path":' + b"[1]" * 300 + b"}")


def test_garbage_config_change_notifications_do_not_flood_any_brokers_log(zookeeper: ZooKeeperServer,
                                                                          tmp_path: Path) -> None:
    cluster = _Cluster(zookeeper, tmp_path, ("zookeeper.session.timeout.ms=6000",)).start(TIMEOUT_S)
    try:
        starts = {i: b.log_path.stat().st_size for i, b in cluster.brokers.items()}
        zk: KazooClient = cluster.zk
        count = 1200
        pending = [zk.create_async("/config/changes/config_change_", GARBAGE[i % len(GARBAGE)], sequence=True)
                   for i in range(count)]
        for result in pending:
            result.get(timeout=TIMEOUT_S)
        # A real change announced after the garbage, written into ZooKeeper as Kafka 3's
        # `kafka-configs --zookeeper` writes it: every broker learns of it only from its
        # notification, so once a broker applied it, it has read every notification before it.
        # (Through IncrementalAlterConfigs the broker that handles the request applies the change
        # at once, maybe before it read the garbage, and a stop then cut its log short.)
        zk.create(znodes.broker_config_path(None), znodes.encode_config({"message.max.bytes": "2000"}),
                  makepath=True)
        zk.create(znodes.config_change_prefix_path(), znodes.encode_config_change(
            f"brokers/{znodes.DEFAULT_ENTITY}"), sequence=True)
        for broker_id in cluster.brokers:
            wait_until(lambda b=broker_id: cluster.max_message_bytes(b) == "2000",
                       what=f"broker {broker_id} applying the change after the garbage", timeout_s=TIMEOUT_S)
    finally:
        cluster.close()  # clean stops: the pending summaries are written
    for broker_id, process in cluster.brokers.items():
        with process.log_path.open("rb") as f:
            f.seek(starts[broker_id])
            log = f.read().decode("utf-8", "replace")
        lines, counted = _logged(log, "ignoring config change notification", "config change notification")
        assert lines + counted == count, f"broker {broker_id}:\n{log[-3000:]}"
        assert lines * 100 <= count, f"broker {broker_id}:\n{log[-3000:]}"
        assert len(log) < 64 * 1024, f"broker {broker_id} logged {len(log):,} bytes:\n{log[-3000:]}"
