"""Replication over real sockets: followers copy the leader's batches byte for byte, the high
watermark and acks=all follow the ISR, lagging followers leave it, min.insync.replicas refuses,
a leader change truncates a divergent tail (to quarantine), an idempotent producer sees no
duplicates across a leader change. Broker cores run in this test (tests/support/replication.py)."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.client.cluster import TopicPartition, open_client
from broker.client.produce import produce, produce_batches
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record, build_batch
from broker.storage.quarantine import MANIFEST, quarantine_root
from tests.support.polling import wait_for
from tests.support.replication import ReplicationCluster, replication_cluster


def batch(*values: bytes) -> bytes:
    return build_batch([Record(None, v) for v in values])


def caught_up(cluster: ReplicationCluster, topic: str, ids: list[int]) -> bool:
    ends = {cluster.cores[i].logs.get(topic, 0).log_end_offset for i in ids}
    return len(ends) == 1


async def test_followers_hold_the_leaders_bytes_and_acks_all_waits_for_the_isr(tmp_path: Path) -> None:
    async with replication_cluster(tmp_path, 3, overrides={"log.segment.bytes": "4096"}) as cluster:
        cluster.create("t", replicas=(1, 2, 3), leader=1, configs={"min.insync.replicas": "2"})
        await cluster.elect("t", 0, leader=1)
        leader = cluster.cores[1]
        async with open_client(leader.bootstrap) as client:
            with trio.fail_after(30):
                for i in range(60):
                    result = await produce(client, "t", 0, batch(b"%04d" % i, b"x" * 100), acks=-1)
                    # acks=all answered: the whole ISR has the batch, so the HW is past it.
                    assert leader.partition("t").high_watermark > result.base_offset
                    for follower in (2, 3):
                        assert cluster.cores[follower].logs.get("t", 0).log_end_offset > result.base_offset
        await wait_for(lambda: caught_up(cluster, "t", [1, 2, 3]), what="followers at the leader's log end",
                       timeout_s=10)
        assert len(leader.logs.get("t", 0).segments) > 1
        for follower in (2, 3):
            assert cluster.cores[follower].log_bytes("t") == leader.log_bytes("t")  # byte for byte
            f_log, l_log = cluster.cores[follower].logs.get("t", 0), leader.logs.get("t", 0)
            assert [s.base_offset for s in f_log.segments] == [s.base_offset for s in l_log.segments]
            assert f_log.epochs.entries == l_log.epochs.entries == [(1, 0)]
        assert leader.partition("t").high_watermark == 120
        await wait_for(lambda: cluster.cores[2].logs.get("t", 0).high_watermark == 120,
                       what="the follower's high watermark", timeout_s=10)


async def test_a_stopped_follower_leaves_the_isr_and_min_insync_refuses(tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    def counted(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    shrinks = counted("kafka_server_replicamanager_isrshrinks_total")
    expands = counted("kafka_server_replicamanager_isrexpands_total")
    async with replication_cluster(tmp_path, 3, lag_ms=300) as cluster:
        cluster.create("t", replicas=(1, 2, 3), leader=1, configs={"min.insync.replicas": "2"})
        await cluster.elect("t", 0, leader=1)
        leader = cluster.cores[1]
        async with open_client(leader.bootstrap) as client:
            with trio.fail_after(30):
                await produce(client, "t", 0, batch(b"a"), acks=-1)
                await cluster.stop(3)
                # Waits until the ISR drops broker 3 (replica.lag.time.max.ms), then answers.
                result = await produce(client, "t", 0, batch(b"b"), acks=-1)
                assert result.base_offset == 1
                assert cluster.controller.state("t", 0).isr == (1, 2)
                assert leader.partition("t").isr == (1, 2)
                await cluster.stop(2)
                tp = TopicPartition("t", 0)
                # Appended, then the ISR shrinks to the leader alone while the produce waits.
                after = (await produce_batches(client, {tp: batch(b"c")}, acks=-1))[tp]
                assert after.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                assert leader.partition("t").isr == (1,) == cluster.controller.state("t", 0).isr
                refused = (await produce_batches(client, {tp: batch(b"d")}, acks=-1))[tp]
                assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
                assert leader.logs.get("t", 0).log_end_offset == 3  # nothing appended
                accepted = (await produce_batches(client, {tp: batch(b"e")}, acks=1))[tp]
                assert accepted.error == ErrorCode.NONE and accepted.base_offset == 3
                # Broker 2 returns, catches up and rejoins the ISR.
                await cluster.start(2)
                await cluster.send_states("t", 0, to=[2])
                await wait_for(lambda: leader.partition("t").isr == (1, 2), what="broker 2 back in the ISR",
                               timeout_s=10)
                assert cluster.controller.state("t", 0).isr == (1, 2)
                assert (await produce_batches(client, {tp: batch(b"e")}, acks=-1))[tp].error == ErrorCode.NONE
    assert counted("kafka_server_replicamanager_isrshrinks_total") == shrinks + 2  # broker 3, then broker 2
    assert counted("kafka_server_replicamanager_isrexpands_total") == expands + 1  # broker 2 back


async def test_a_new_leader_truncates_the_old_leaders_divergent_tail(tmp_path: Path) -> None:
    async with replication_cluster(tmp_path, 2, lag_ms=300) as cluster:
        cluster.create("t", replicas=(1, 2), leader=1, configs={"min.insync.replicas": "1"})
        await cluster.elect("t", 0, leader=1)
        tp = TopicPartition("t", 0)
        with trio.fail_after(30):
            async with open_client(cluster.cores[1].bootstrap) as client:
                for v in (b"a", b"b", b"c"):
                    await produce(client, "t", 0, batch(v), acks=-1)
                await cluster.stop(2)
                # Broker 1 goes on alone (acks=1): offsets 3 and 4 that broker 2 never gets.
                for v in (b"lost-1", b"lost-2"):
                    assert (await produce_batches(client, {tp: batch(v)}, acks=1))[tp].error == ErrorCode.NONE
            old_tail = cluster.cores[1].log_bytes("t")
            # Broker 1 dies; broker 2 comes back and is elected (an unclean choice, made here on
            # purpose), takes writes in epoch 2; then broker 1 returns as its follower.
            await cluster.stop(1)
            await cluster.start(2)
            await cluster.elect("t", 0, leader=2, isr=[2])
            async with open_client(cluster.cores[2].bootstrap) as client:
                for v in (b"new-1", b"new-2", b"new-3"):
                    assert (await produce(client, "t", 0, batch(v), acks=1)).error == ErrorCode.NONE
            await cluster.start(1)
            await cluster.send_states("t", 0, to=[1])
            await wait_for(lambda: caught_up(cluster, "t", [1, 2]), what="broker 1 caught up", timeout_s=10)
        new_leader, old_leader = cluster.cores[2], cluster.cores[1]
        assert old_leader.log_bytes("t") == new_leader.log_bytes("t")
        assert old_leader.logs.get("t", 0).epochs.entries == [(1, 0), (2, 3)]
        # The cut tail (offsets 3..4 of epoch 1) is in the quarantine, not gone.
        (where,) = list(quarantine_root(old_leader.logs.get("t", 0).directory).iterdir())
        moved = b"".join(p.read_bytes() for p in sorted(where.glob("*.log")))
        assert old_tail.endswith(moved) and len(moved) > 0
        manifest = (where / MANIFEST).read_text()
        assert "follower truncation" in manifest and "offsets 3..4" in manifest


async def test_an_idempotent_producer_sees_no_duplicates_across_a_leader_change(tmp_path: Path) -> None:
    import threading

    from confluent_kafka import Producer

    from broker.client.fetch import decode_records

    total = 1000
    async with replication_cluster(tmp_path, 3, lag_ms=60_000) as cluster:
        cluster.create("t", replicas=(1, 2, 3), leader=1, configs={"min.insync.replicas": "2"})
        await cluster.elect("t", 0, leader=1)
        # Broker 3 is gone but still in the ISR: acks=all waits, while broker 2 copies every batch.
        await cluster.stop(3)
        delivered: list[int] = []
        errors: list[str] = []
        lock = threading.Lock()

        def on_delivery(err: object, msg: object) -> None:
            with lock:
                if err is not None:
                    errors.append(str(err))
                else:
                    delivered.append(int(msg.value()))  # type: ignore[attr-defined]

        def produce_all() -> int:
            producer = Producer({"bootstrap.servers": cluster.cores[1].bootstrap, "enable.idempotence": True,
                                 "acks": "all", "linger.ms": 2, "batch.num.messages": 20,
                                 "message.timeout.ms": 30000, "retry.backoff.ms": 50})
            for i in range(total):
                producer.produce("t", value=b"%06d" % i, partition=0, on_delivery=on_delivery)
                producer.poll(0)
            return producer.flush(30)

        def replicated_unacknowledged() -> bool:
            ends = [cluster.cores[b].logs.get("t", 0).log_end_offset for b in (1, 2)]
            return ends[0] > 0 and ends[0] == ends[1] and not delivered

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                left: list[int] = []

                async def run_producer() -> None:
                    left.append(await trio.to_thread.run_sync(produce_all))

                nursery.start_soon(run_producer)
                await wait_for(replicated_unacknowledged, what="batches on both brokers, none acknowledged",
                               timeout_s=30)
                on_both = cluster.cores[2].logs.get("t", 0).log_end_offset
                # The controller's move: broker 3 out, broker 2 leads. The producer's waiting
                # batches are answered NOT_LEADER_OR_FOLLOWER and sent again to broker 2, which
                # has them already: its producer state must recognise them.
                await cluster.elect("t", 0, leader=2, isr=[1, 2])
            assert left == [0] and errors == []
            await wait_for(lambda: caught_up(cluster, "t", [1, 2]), what="broker 1 caught up", timeout_s=10)
        assert on_both > 0
        leader_log = cluster.cores[2].logs.get("t", 0)
        records = decode_records(cluster.cores[2].log_bytes("t"))
        values = [int(r.value) for r in records if r.value is not None]
        assert values == list(range(total))  # each once, in order
        assert sorted(delivered) == list(range(total))
        assert leader_log.epochs.entries == [(1, 0), (2, on_both)]
        assert cluster.cores[1].log_bytes("t") == cluster.cores[2].log_bytes("t")


async def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path: Path) -> None:
    from broker.client.admin import delete_records

    async with replication_cluster(tmp_path, 2, lag_ms=300) as cluster:
        cluster.create("t", replicas=(1, 2), leader=1)
        await cluster.elect("t", 0, leader=1)
        tp = TopicPartition("t", 0)
        leader = cluster.cores[1]
        with trio.fail_after(30):
            async with open_client(leader.bootstrap) as client:
                await produce(client, "t", 0, batch(b"0", b"1"), acks=-1)  # broker 2 has offsets 0..1
                await cluster.stop(2)
                for i in range(2, 10, 2):  # batches of two: 2-3, 4-5, 6-7, 8-9, broker 1 alone
                    assert (await produce_batches(client, {tp: batch(b"%d" % i, b"%d" % (i + 1))},
                                                  acks=1))[tp].error == ErrorCode.NONE
                await wait_for(lambda: leader.partition("t").high_watermark == 10, what="HW 10 (ISR of one)",
                               timeout_s=10)
                # The leader's log now starts at 5, inside the batch 4-5.
                assert await delete_records(client, {tp: 5}) == {tp: 5}
            await cluster.start(2)
            await cluster.send_states("t", 0, to=[2])
            await wait_for(lambda: caught_up(cluster, "t", [1, 2]), what="broker 2 caught up", timeout_s=10)
        follower_log = cluster.cores[2].logs.get("t", 0)
        await wait_for(lambda: follower_log.log_start_offset == 5, what="the follower's log start", timeout_s=10)
        # Broker 2's offsets 0..1 went to quarantine; its log holds the leader's batches from 4 on.
        assert (follower_log.log_start_offset, follower_log.log_end_offset) == (5, 10)
        leader_bytes = leader.log_bytes("t")
        start = leader.logs.get("t", 0).segments[0].position_of(4)
        assert cluster.cores[2].log_bytes("t") == leader_bytes[start:]
        assert any(quarantine_root(follower_log.directory).iterdir())
