"""Hand-made follower requests to a leader: refused by replica id and by leader epoch, answered
by OffsetForLeaderEpoch as Kafka answers followers; a stale LeaderAndIsr changes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from broker.client.cluster import open_client
from broker.client.connection import open_connection
from broker.client.produce import produce
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import FetchRequest, OffsetForLeaderEpochRequest
from broker.protocol.records import Record, build_batch
from tests.support.polling import wait_for
from tests.support.replication import replication_cluster


def follower_fetch(replica_id: int, epoch: int, offset: int, version: int, topic_id: object) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id, replica_state=FetchRequest.ReplicaState(replica_id=replica_id), max_wait_ms=0,
        min_bytes=0, topics=[FetchRequest.FetchTopic(topic="t", topic_id=topic_id, partitions=[  # type: ignore[arg-type]
            FetchRequest.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                                        partition_max_bytes=1 << 20)])])


async def test_follower_requests_are_fenced(tmp_path: Path) -> None:
    async with replication_cluster(tmp_path, 3) as cluster:
        topic = cluster.create("t", replicas=(1, 2, 3), leader=1)
        await cluster.elect("t", 0, leader=1)
        core = cluster.cores[1]
        port = core.listeners[0].port
        with trio.fail_after(20):
            async with open_client(core.bootstrap) as client:
                await produce(client, "t", 0, build_batch([Record(None, b"a"), Record(None, b"b")]), acks=1)
            async with open_connection("127.0.0.1", port) as conn:
                for version in (12, 15):
                    # Broker 9 is no replica of t-0; the epoch is right.
                    answer = await conn.request(follower_fetch(9, 1, 0, version, topic.topic_id), version=version)
                    assert answer.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                    # Broker 2 with an older epoch: fenced; with a newer one: unknown.
                    answer = await conn.request(follower_fetch(2, 0, 0, version, topic.topic_id), version=version)
                    assert answer.responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
                    answer = await conn.request(follower_fetch(2, 7, 0, version, topic.topic_id), version=version)
                    assert answer.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
                # A follower reads past the high watermark, a consumer does not: broker 3 stops
                # at offset 2, so the high watermark stays there while the leader goes on.
                await wait_for(lambda: core.partition("t").high_watermark == 2, what="HW 2", timeout_s=10)
                await cluster.stop(3)
                async with open_client(core.bootstrap) as client:
                    await produce(client, "t", 0, build_batch([Record(None, b"c")]), acks=1)
                assert core.partition("t").high_watermark == 2
                answer = await conn.request(follower_fetch(-1, 1, 2, 12, topic.topic_id), version=12)
                assert len(answer.responses[0].partitions[0].records) == 0
                answer = await conn.request(follower_fetch(3, 1, 2, 12, topic.topic_id), version=12)
                part = answer.responses[0].partitions[0]
                assert part.error_code == ErrorCode.NONE and len(part.records) > 0 and part.high_watermark == 2
                # OffsetForLeaderEpoch for a follower: the end of its epoch on the leader.
                asked = OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, current_leader_epoch=1,
                                                                             leader_epoch=1)
                wanted = OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[asked])
                request = OffsetForLeaderEpochRequest(replica_id=2, topics=[wanted])
                answer = await conn.request(request, version=4)
                end = answer.topics[0].partitions[0]
                assert (end.error_code, end.leader_epoch, end.end_offset) == (ErrorCode.NONE, 1, 3)
            # The follower, asked the same, says it does not lead.
            async with open_connection("127.0.0.1", cluster.cores[2].listeners[0].port) as conn:
                answer = await conn.request(request, version=4)
                assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # A LeaderAndIsr older than what the broker has: refused, nothing changes.
        stale = dataclasses.replace(cluster.controller.state("t", 0), leader=2, leader_epoch=0)
        results = await core.replicas.apply_leader_and_isr(1, 1, [("t", topic.topic_id, stale, False)],
                                                           cluster.controller.live())
        assert results[("t", 0)] == ErrorCode.FENCED_LEADER_EPOCH and core.partition("t").is_leader
        results = await core.replicas.apply_leader_and_isr(1, 0, [("t", topic.topic_id, stale, False)],
                                                           cluster.controller.live())
        assert results[("t", 0)] == ErrorCode.STALE_CONTROLLER_EPOCH and core.partition("t").is_leader


async def test_stop_replica_stops_serving_and_deletes(tmp_path: Path) -> None:
    from broker.client.cluster import TopicPartition
    from broker.client.produce import produce_batches

    async with replication_cluster(tmp_path, 2) as cluster:
        cluster.create("t", replicas=(1, 2), leader=1)
        await cluster.elect("t", 0, leader=1)
        leader, follower = cluster.cores[1], cluster.cores[2]
        tp = TopicPartition("t", 0)
        with trio.fail_after(20):
            async with open_client(leader.bootstrap) as client:
                await produce(client, "t", 0, build_batch([Record(None, b"a")]), acks=-1)
                directory = follower.logs.get("t", 0).directory
                assert await follower.replicas.stop_replica("t", 0, delete=True) == ErrorCode.NONE
                assert not directory.exists() and not follower.replicas.hosts("t", 0)
                assert follower.replicas.fetcher_for(1) is None  # its only partition: the fetcher went
                assert await leader.replicas.stop_replica("t", 0, delete=False) == ErrorCode.NONE
                answer = (await produce_batches(client, {tp: build_batch([Record(None, b"b")])}, acks=1))[tp]
                assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert leader.logs.get("t", 0).log_end_offset == 1  # kept: not deleted
