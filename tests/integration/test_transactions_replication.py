"""Transactions across replicas (issue 23, the log's slice): followers copy transactional batches
and markers and keep the same aborted transaction index; the last stable offset waits for the
ISR to have a marker; a new leader knows the transaction its predecessor left open and takes its
marker. Broker cores run in this test (tests/support/replication.py); the coordinator is played
with raw WriteTxnMarkers through the repo's client."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.client.cluster import Client, open_client
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ProduceRequest, WriteTxnMarkersRequest
from broker.protocol.records import Record, build_batch
from tests.support.polling import wait_for
from tests.support.replication import ReplicationCluster, replication_cluster

PID = 20_001


async def produce_txn(client: Client, leader: int, seq: int, *values: bytes) -> int:
    batch = build_batch([Record(None, v) for v in values], producer_id=PID, producer_epoch=0, base_sequence=seq,
                        is_transactional=True)
    response = await client.request(leader, ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=10_000,
                                                           topic_data=[ProduceRequest.TopicProduceData(
                                                               name="t", partition_data=[
                                                                   ProduceRequest.PartitionProduceData(
                                                                       index=0, records=batch)])]))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NONE, part.error_message
    return int(part.base_offset)


async def marker(client: Client, broker: int, commit: bool) -> int:
    response = await client.request(broker, WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=PID, producer_epoch=0, transaction_result=commit, coordinator_epoch=0,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]))
    return int(response.markers[0].topics[0].partitions[0].error_code)


def same_everywhere(cluster: ReplicationCluster, ids: list[int]) -> bool:
    logs = [cluster.cores[i].logs.get("t", 0) for i in ids]
    return (len({log.log_end_offset for log in logs}) == 1 and len({log.high_watermark for log in logs}) == 1
            and len({log.last_stable_offset for log in logs}) == 1)


async def test_followers_track_transactions_and_a_new_leader_ends_the_open_one(tmp_path: Path) -> None:
    async with replication_cluster(tmp_path, 3, overrides={"log.segment.bytes": "4096"}) as cluster:
        cluster.create("t", replicas=(1, 2, 3), leader=1, configs={"min.insync.replicas": "2"})
        await cluster.elect("t", 0, leader=1)
        async with open_client(cluster.cores[1].bootstrap) as client:
            with trio.fail_after(60):
                first = await produce_txn(client, 1, 0, b"a", b"b")
                assert await marker(client, 1, commit=False) == ErrorCode.NONE
                second = await produce_txn(client, 1, 2, b"c")
                await wait_for(lambda: same_everywhere(cluster, [1, 2, 3]), what="followers caught up",
                               timeout_s=30)
                for broker in (1, 2, 3):
                    log = cluster.cores[broker].logs.get("t", 0)
                    assert log.last_stable_offset == second  # the second transaction is open
                    assert [(e.producer_id, e.first_offset, e.last_offset) for e in
                            log.aborted_transactions(0, log.log_end_offset)] == [(PID, first, 2)]
                # Broker 1 dies with the transaction open; broker 2 leads and takes the marker.
                await cluster.stop(1)
                await cluster.elect("t", 0, leader=2, isr=(2, 3))
                assert cluster.cores[2].logs.get("t", 0).last_stable_offset == second  # still open there
                assert await marker(client, 2, commit=True) == ErrorCode.NONE
                await wait_for(lambda: same_everywhere(cluster, [2, 3]), what="broker 3 has the marker",
                               timeout_s=30)
                new_leader = cluster.cores[2].logs.get("t", 0)
                assert new_leader.last_stable_offset == new_leader.log_end_offset == second + 2
                # The old leader comes back as a follower and catches up to the same state.
                await cluster.start(1)
                await cluster.elect("t", 0, leader=2, isr=(2, 3))
                await wait_for(lambda: same_everywhere(cluster, [1, 2, 3]), what="broker 1 caught up",
                               timeout_s=30)
                back = cluster.cores[1].logs.get("t", 0)
                assert back.aborted_transactions(0, back.log_end_offset) == \
                    new_leader.aborted_transactions(0, new_leader.log_end_offset)
