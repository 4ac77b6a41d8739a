"""The group coordinator follows message.max.bytes changed as a dynamic broker config.

A member's protocol metadata (its subscription) must fit in the group's record in
``__consumer_offsets``, so JoinGroup refuses more than message.max.bytes with INVALID_REQUEST.
The coordinator used to read the value once, at start: a change through IncrementalAlterConfigs
(``kafka-configs --alter --entity-type brokers --entity-name 1 --add-config message.max.bytes=...``)
was applied by every other part of the broker but not by it. Against a real ZooKeeper-mode broker:
the bound moves down and back up with the dynamic value, and holds across a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import JoinGroupRequest
from deploy.kafka_socket import ask
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=1")
LIMIT = 4096


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES, ids=(1,))) as running:
        yield running


def _join(cluster: ZkCluster, metadata_bytes: int) -> int:
    """A new member's JoinGroup (v6) with this much protocol metadata: its error code.
    MEMBER_ID_REQUIRED means the metadata was taken (v4+ hands out the id first)."""
    name = "range"
    request = JoinGroupRequest(group_id="bounded", session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                               member_id="", protocol_type="consumer", protocols=[
                                   JoinGroupRequest.JoinGroupRequestProtocol(
                                       name=name, metadata=b"m" * (metadata_bytes - len(name)))])
    return int(ask(cluster.brokers[1].bootstrap, request, 6, timeout_s=30).error_code)


def _alter(cluster: ZkCluster, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("message.max.bytes", value, incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)


def test_join_group_follows_a_dynamic_message_max_bytes(cluster: ZkCluster) -> None:
    # The coordinator is ready once __consumer_offsets is led here.
    wait_until(lambda: _join(cluster, LIMIT * 2) == ErrorCode.MEMBER_ID_REQUIRED,
               what="the coordinator taking 8 KiB of member metadata", timeout_s=30)

    _alter(cluster, str(LIMIT))
    wait_until(lambda: _join(cluster, LIMIT * 2) == ErrorCode.INVALID_REQUEST,
               what="8 KiB of member metadata refused under message.max.bytes=4096", timeout_s=30)
    assert _join(cluster, LIMIT) == ErrorCode.MEMBER_ID_REQUIRED  # the bound itself still fits
    assert _join(cluster, LIMIT + 1) == ErrorCode.INVALID_REQUEST

    # Kept in /config/brokers/1: a restarted broker starts with it.
    cluster.brokers[1].restart()
    wait_until(lambda: _join(cluster, LIMIT + 1) == ErrorCode.INVALID_REQUEST,
               what="the bound applied again after a restart", timeout_s=30)
    assert _join(cluster, LIMIT) == ErrorCode.MEMBER_ID_REQUIRED

    # Deleted: back to the static value (Kafka's default, 1048588).
    _alter(cluster, None)
    wait_until(lambda: _join(cluster, LIMIT * 2) == ErrorCode.MEMBER_ID_REQUIRED,
               what="8 KiB of member metadata taken again", timeout_s=30)
    assert "refusing a member with 8192 bytes of protocol metadata (limit 4096)" in \
        cluster.brokers[1].log_path.read_text()
