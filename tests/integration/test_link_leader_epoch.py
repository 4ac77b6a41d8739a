"""LinkLeaderEpoch (Causeway's API key 10003) against real brokers: a mirror topic partition's
leader epoch is raised to the link source's, never lowered, and the raise is a normal leader
epoch change: the batches copied after it carry it, OffsetForLeaderEpoch ends the epochs before
it where it began, the leader-epoch checkpoint records it, a restart keeps it (standalone: its
metadata log) and, on a ZooKeeper-mode cluster, every replica follows it (the appends after it
are acknowledged by the whole ISR). Bad requests are refused, per partition, with their codes."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from broker.client import Client, ErrorCode, KafkaError, TopicPartition, admin, link_append, open_client
from broker.client.admin import LATEST, NewTopic
from broker.client.link import link_leader_epochs
from broker.protocol.messages import OffsetForLeaderEpochRequest
from broker.protocol.records import Record, build_batch, split_batches
from broker.server.handlers.link_leader_epoch import MAX_SOURCE_LEADER_EPOCH
from broker.storage.checkpoints import read_pairs
from deploy.broker_process import BrokerProcess
from mirror.config import mirror_config_from_data
from tests.integration.mirror_topic import LINK, TP, create_mirror_topic
from tests.integration.partition_reads import read_whole_batches
from tests.integration.started_clusters import started
from tests.integration.test_link_append import make_mirror_topic
from tests.integration.test_mirror import running
from tests.integration.test_mirror_link import produce
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

TIMEOUT_S = 30.0


def batch(base: int, count: int) -> bytes:
    return build_batch([Record(f"k{base + i}".encode(), b"v") for i in range(count)], base_offset=base,
                       base_timestamp=1_600_000_000_000)


async def epoch_end(client: Client, tp: TopicPartition, epoch: int) -> tuple[int, int, int]:
    """OffsetForLeaderEpoch of `epoch` at `tp`'s leader: (error, epoch, end offset)."""
    leader = await client.leader_for(tp)
    asked = OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=tp.partition, current_leader_epoch=-1,
                                                                 leader_epoch=epoch)
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=tp.topic, partitions=[asked])])
    answer = (await client.request(leader.node_id, request)).topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


async def metadata_epoch(client: Client, tp: TopicPartition) -> int:
    topics = await admin.describe_topics(client, [tp.topic])
    return topics[tp.topic].partitions[tp.partition].leader_epoch


async def test_a_standalone_broker_raises_a_mirror_topics_leader_epoch(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        tp = TopicPartition("copy", 0)
        async with open_client(broker.bootstrap) as client:
            await make_mirror_topic(client, tp.topic, LINK)
            await admin.create_topics(client, {"plain": NewTopic(1)})
            assert (await link_append(client, LINK, {tp: batch(0, 5)}))[tp].error == ErrorCode.NONE

            assert await link_leader_epochs(client, LINK, {tp: 5}) == {tp: (ErrorCode.NONE, 5)}
            assert await metadata_epoch(client, tp) == 5
            # Never lowered, never bumped for nothing.
            assert await link_leader_epochs(client, LINK, {tp: 3}) == {tp: (ErrorCode.NONE, 5)}
            assert await link_leader_epochs(client, LINK, {tp: 5}) == {tp: (ErrorCode.NONE, 5)}

            assert (await link_append(client, LINK, {tp: batch(5, 5)}))[tp].error == ErrorCode.NONE
            epochs = [h.partition_leader_epoch for _, h in split_batches(await read_whole_batches(client, tp, 0))]
            assert epochs == [0, 5]  # each batch stamped with the epoch it was copied in
            assert await epoch_end(client, tp, 0) == (ErrorCode.NONE, 0, 5)
            assert await epoch_end(client, tp, 4) == (ErrorCode.NONE, 0, 5)
            assert await epoch_end(client, tp, 5) == (ErrorCode.NONE, 5, 10)

            # Refused, per partition, saying why; nothing raised.
            other, plain, unknown = TopicPartition("copy", 0), TopicPartition("plain", 0), TopicPartition("nope", 0)
            refused = await link_leader_epochs(client, "someone-else", {other: 9})
            assert refused == {other: (ErrorCode.INVALID_REQUEST, -1)}
            assert (await link_leader_epochs(client, LINK, {plain: 9}))[plain] == (ErrorCode.INVALID_REQUEST, -1)
            assert (await link_leader_epochs(client, LINK, {unknown: 9}))[unknown][0] == \
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for wild in (MAX_SOURCE_LEADER_EPOCH + 1, 2**31 - 1, -1):
                assert await link_leader_epochs(client, LINK, {tp: wild}) == {tp: (ErrorCode.INVALID_REQUEST, -1)}
            assert await metadata_epoch(client, tp) == 5
        broker.restart()  # the raised epoch is in the metadata log, its start in the checkpoint
        assert read_pairs(broker.data_dir / "copy-0" / "leader-epoch-checkpoint") == [(0, 0), (5, 5)]
        async with open_client(broker.bootstrap) as client:
            assert await metadata_epoch(client, tp) == 5
            assert await epoch_end(client, tp, 5) == (ErrorCode.NONE, 5, 10)
    finally:
        assert broker.stop() == 0, broker.log_tail()


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, ("offsets.topic.num.partitions=1", "min.insync.replicas=3",
                                                 "leader.imbalance.check.interval.seconds=3600"))) as running:
        yield running


async def test_every_replica_follows_a_raised_leader_epoch(cluster: ZkCluster) -> None:
    await create_mirror_topic(cluster, timeout_s=TIMEOUT_S)
    async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
        await wait_for(lambda: _appended(client, batch(0, 4)), what="the first copy on all three replicas",
                       timeout_s=TIMEOUT_S)
        before = await metadata_epoch(client, TP)
        raised = before + 7
        assert await link_leader_epochs(client, LINK, {TP: raised}) == {TP: (ErrorCode.NONE, raised)}
        # The controller tells the leader (LeaderAndIsr) before its metadata (UpdateMetadata), in
        # order: once the leader's metadata shows the epoch, it leads in it.
        leader = (await client.leader_for(TP)).node_id
        async with open_client(cluster.brokers[leader].bootstrap) as own:
            await wait_for(partial(_shows, own, raised), what="the leader in the raised epoch", timeout_s=TIMEOUT_S)
        # min.insync.replicas=3: acknowledged only once both followers fetch in the new epoch.
        await wait_for(lambda: _appended(client, batch(4, 4)), what="a copy acknowledged in the raised epoch",
                       timeout_s=TIMEOUT_S)
        assert await epoch_end(client, TP, raised - 1) == (ErrorCode.NONE, before, 4)
        assert await epoch_end(client, TP, raised) == (ErrorCode.NONE, raised, 8)
    for broker_id, broker in cluster.brokers.items():
        async with open_client(broker.bootstrap) as own:
            await wait_for(partial(_shows, own, raised), what=f"broker {broker_id}'s metadata", timeout_s=TIMEOUT_S)
    # Each replica's leader-epoch checkpoint (written at a flush: a clean stop's) starts the
    # raised epoch where the leader began it.
    for broker_id, broker in cluster.brokers.items():
        assert broker.stop() == 0, broker.log_tail()
        checkpoint = read_pairs(broker.data_dir / "copy-0" / "leader-epoch-checkpoint")
        assert checkpoint[-1] == (raised, 4), (broker_id, checkpoint)


async def _appended(client: Client, data: bytes) -> bool:
    result = (await link_append(client, LINK, {TP: data}))[TP]
    return result.error == ErrorCode.NONE


async def _shows(client: Client, epoch: int) -> bool:
    client.invalidate_metadata()
    return await metadata_epoch(client, TP) == epoch


def leader_and_epoch(bootstrap: str, tp: TopicPartition) -> tuple[int, int]:
    async def read() -> tuple[int, int]:
        async with open_client(bootstrap) as client:
            partition = (await admin.describe_topics(client, [tp.topic]))[tp.topic].partitions[tp.partition]
        return partition.leader, partition.leader_epoch
    return trio.run(read)


@pytest.fixture
def east(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    """A source cluster whose brokers may stop one by one and still take writes."""
    with started(ZkCluster(zookeeper, tmp_path, ("offsets.topic.num.partitions=1",
                                                 "leader.imbalance.check.interval.seconds=3600"))) as running_east:
        yield running_east


async def test_a_mirror_from_a_zookeeper_cluster_follows_its_leader_epochs(east: ZkCluster, tmp_path: Path) -> None:
    """Causeway to Causeway: the source's epochs move as its leaders stop (a controlled shutdown
    elects another, one epoch later), before the mirror starts and while it runs idle; the
    copy's epochs follow, begun at the same offsets."""
    tp = TopicPartition("orders", 0)
    async with open_client(east.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {tp.topic: NewTopic(1, replication_factor=3)})
    await trio.to_thread.run_sync(partial(produce, east.bootstrap(), tp.topic, 20, partitions=1))
    first, _ = await trio.to_thread.run_sync(leader_and_epoch, east.bootstrap(), tp)
    await trio.to_thread.run_sync(east.brokers[first].stop)
    await trio.to_thread.run_sync(partial(produce, east.bootstrap(), tp.topic, 20, start=20, partitions=1))
    second, epoch = await trio.to_thread.run_sync(leader_and_epoch, east.bootstrap(), tp)
    assert epoch > 0

    west = await trio.to_thread.run_sync(BrokerProcess(tmp_path / "west").start)
    try:
        config = mirror_config_from_data({"name": "east-to-west", "mode": "link", "topics": {"include": ["orders"]},
                                          "source": {"alias": "east", "bootstrap": east.bootstrap()},
                                          "target": {"alias": "west", "bootstrap": west.bootstrap},
                                          "refresh.topics.interval.seconds": 0.2})
        async with running(config), open_client(west.bootstrap) as target:
            await wait_for(partial(_copied_in, target, tp, 40, epoch), what="the copy in the source's epoch",
                           timeout_s=TIMEOUT_S)
            # The source's leader stops again, nothing written since: the idle copy follows.
            await trio.to_thread.run_sync(east.brokers[second].stop)
            _, later = await trio.to_thread.run_sync(leader_and_epoch, east.bootstrap(), tp)
            assert later > epoch
            await wait_for(partial(_copied_in, target, tp, 40, later), what="the copy in the source's new epoch",
                           timeout_s=TIMEOUT_S)
        async with open_client(east.bootstrap()) as source, open_client(west.bootstrap) as target:
            for asked in range(later + 1):
                assert await epoch_end(target, tp, asked) == await epoch_end(source, tp, asked), asked
    finally:
        assert west.stop() == 0, west.log_tail()


async def _copied_in(client: Client, tp: TopicPartition, end: int, epoch: int) -> bool:
    """Whether the copy at `client`'s cluster ends at `end` in `epoch` (False while the mirror
    has not created it)."""
    client.invalidate_metadata()
    try:
        ends = await admin.list_offsets(client, {tp: LATEST})
    except KafkaError as exc:
        assert exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, exc
        return False
    return ends[tp].offset == end and await metadata_epoch(client, tp) == epoch


async def test_a_zookeeper_mode_target_begins_each_raised_epoch_where_the_source_did(cluster: ZkCluster,
                                                                                   tmp_path: Path) -> None:
    """The source (standalone) holds batches of epochs 0, 3 and 5 (its topic is itself a mirror
    topic whose epochs were raised); the copy on a three-broker ZooKeeper-mode target, whose
    controller raises each epoch through its state znode and tells the leader by LeaderAndIsr
    after it answers, begins each epoch at the source's offset (the mirror waits for the leader
    to lead in a raised epoch before copying its batches)."""
    tp = TopicPartition("orders", 0)
    east = await trio.to_thread.run_sync(BrokerProcess(tmp_path / "east").start)
    try:
        async with open_client(east.bootstrap) as source:
            await make_mirror_topic(source, tp.topic, "upstream")
            for base, epoch in ((0, 0), (5, 3), (10, 5)):
                assert (await link_leader_epochs(source, "upstream", {tp: epoch}))[tp] == (ErrorCode.NONE, epoch)
                assert (await link_append(source, "upstream", {tp: batch(base, 5)}))[tp].error == ErrorCode.NONE
        config = mirror_config_from_data({"name": "east-to-west", "mode": "link", "topics": {"include": ["orders"]},
                                          "source": {"alias": "east", "bootstrap": east.bootstrap},
                                          "target": {"alias": "west", "bootstrap": cluster.bootstrap()},
                                          "refresh.topics.interval.seconds": 0.2, "replication.factor": 3})
        async with running(config), open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as target:
            await wait_for(partial(_copied_in, target, tp, 15, 5), what="the copy in the source's epoch",
                           timeout_s=TIMEOUT_S)
        async with open_client(east.bootstrap) as source, open_client(cluster.bootstrap()) as target:
            for asked in range(7):
                assert await epoch_end(target, tp, asked) == await epoch_end(source, tp, asked), asked
    finally:
        assert east.stop() == 0, east.log_tail()
