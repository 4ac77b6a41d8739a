"""Idempotent producers at a promoted mirror topic: the copied batches carry the source's producer
ids, and the target hands out its own from 0 too, so a local producer gets ids the copy holds. The
copy must constrain nobody (broker/storage/link_copy.py): on the live leader, after a restart
(producer state rebuilt from the segments), and on a follower that becomes leader (ZooKeeper
mode, replication factor 3); while local producers' retries are still recognised.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer

from broker.client import (
    MIRROR_NAME_CONFIG,
    ErrorCode,
    KafkaError,
    TopicPartition,
    admin,
    link_append,
    open_client,
    produce,
)
from broker.client.admin import EARLIEST, LATEST
from broker.protocol.records import Record, build_batch, split_batches
from deploy.broker_process import BrokerProcess
from mirror.promote import applied_everywhere
from tests.integration.mirror_topic import LINK, TP, create_mirror_topic
from tests.integration.started_clusters import started
from tests.integration.test_mirror_link import consume, link_config, running, wait_copied
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for, wait_until
from tests.support.zookeeper import ZooKeeperServer

TIMEOUT_S = 30.0


def produce_with(bootstrap: str, topic: str, producers: int, per_producer: int, *, tag: str,
                 partitions: int = 3) -> None:
    """`producers` idempotent librdkafka producers, one after the other (each gets the next
    producer id), each writing to every partition; every record must be delivered."""
    failures: list[object] = []
    for n in range(producers):
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 2, "retries": 3})
        for i in range(per_producer):
            producer.produce(topic, key=f"{tag}-{n}".encode(), value=f"{tag}-{n}-{i}".encode(),
                             partition=i % partitions,
                             on_delivery=lambda err, msg: failures.append(err) if err is not None else None)
        assert producer.flush(TIMEOUT_S) == 0
        assert failures == [], f"{tag} producer {n}: {failures}"


def values(bootstrap: str, topic: str, partitions: int = 3) -> list[bytes]:
    return sorted(row[4] for row in consume(bootstrap, topic, partitions))


async def test_idempotent_producers_write_to_a_promoted_topic_before_and_after_a_restart(
        east: BrokerProcess, west: BrokerProcess) -> None:
    # Six producers at the source: ids 0..5 there, all in the copy.
    await trio.to_thread.run_sync(lambda: produce_with(east.bootstrap, "orders", 6, 30, tag="east"))
    async with running(link_config(east, west)):
        await wait_copied(east, west, "orders", 3)
    async with open_client(west.bootstrap) as client:
        await admin.alter_configs(client, "orders", {MIRROR_NAME_CONFIG: None})  # promote

    # The target's first idempotent producers get ids 0, 1, 2: the copy's.
    await trio.to_thread.run_sync(lambda: produce_with(west.bootstrap, "orders", 3, 30, tag="west"))
    # A local producer's retry is still recognised (a raw batch: id 900, never handed out).
    tp = TopicPartition("orders", 0)
    retried = build_batch([Record(b"r", b"retried")], producer_id=900, producer_epoch=0, base_sequence=0)
    async with open_client(west.bootstrap) as client:
        first = await produce(client, "orders", 0, retried)
        assert first.error == ErrorCode.NONE, first
        again = await produce(client, "orders", 0, retried)
        assert (again.error, again.base_offset) == (ErrorCode.NONE, first.base_offset)

    # After a restart the producer state comes from the segments: ids 3, 4, 5 are the copy's
    # too, and the retry is still known.
    await trio.to_thread.run_sync(west.restart)
    await trio.to_thread.run_sync(lambda: produce_with(west.bootstrap, "orders", 3, 30, tag="again"))
    async with open_client(west.bootstrap) as client:
        after = await produce(client, "orders", 0, retried)
        assert (after.error, after.base_offset) == (ErrorCode.NONE, first.base_offset)
        # A producer id of the copy, at its epoch and first sequence: a new batch, not a "duplicate"
        # of the copied one (which would drop it).
        colliding = build_batch([Record(b"c", b"colliding")], producer_id=5, producer_epoch=0, base_sequence=0)
        written = await produce(client, "orders", 0, colliding)
        end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
        assert written.error == ErrorCode.NONE and written.base_offset == end - 1, written

    got = await trio.to_thread.run_sync(values, west.bootstrap, "orders")
    want = sorted([f"east-{n}-{i}".encode() for n in range(6) for i in range(30)]
                  + [f"west-{n}-{i}".encode() for n in range(3) for i in range(30)]
                  + [f"again-{n}-{i}".encode() for n in range(3) for i in range(30)]
                  + [b"retried", b"colliding"])
    assert got == want


# -- ZooKeeper mode: a follower becomes the leader after the promotion -----------------------

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1", "replica.lag.time.max.ms=4000",
             "min.insync.replicas=2", "leader.imbalance.check.interval.seconds=3600")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


def source_batches() -> bytes:
    """A source's log: three idempotent producers (ids 0, 1, 2), ten batches each."""
    out = bytearray()
    offset = 0
    for seq in range(10):
        for pid in range(3):
            out += build_batch([Record(f"p{pid}".encode(), f"source-{pid}-{seq}".encode())], base_offset=offset,
                               producer_id=pid, producer_epoch=0, base_sequence=seq)
            offset += 1
    return bytes(out)


def test_a_follower_that_becomes_leader_after_promotion_takes_idempotent_producers(cluster: ZkCluster) -> None:
    trio.run(copy_and_promote, cluster)
    leader = leader_of(cluster)
    cluster.brokers[leader].kill()
    wait_for_new_leader(cluster, leader)
    others = [i for i in cluster.brokers if i != leader]
    produce_with(cluster.bootstrap(*others), "copy", 3, 20, tag="local", partitions=1)
    got = values(cluster.bootstrap(*others), "copy", 1)
    assert got == sorted([f"source-{p}-{s}".encode() for p in range(3) for s in range(10)]
                         + [f"local-{n}-{i}".encode() for n in range(3) for i in range(20)])


def leader_of(cluster: ZkCluster) -> int:
    return int(str(cluster.state("copy")["leader"]))


def isr_of(cluster: ZkCluster) -> list[int]:
    isr = cluster.state("copy")["isr"]
    assert isinstance(isr, list)
    return [int(i) for i in isr]


def wait_for_new_leader(cluster: ZkCluster, old: int) -> None:
    wait_until(lambda: cluster.state("copy")["leader"] not in (old, -1), what="a new leader", timeout_s=TIMEOUT_S)


async def copy_and_promote(cluster: ZkCluster) -> None:
    await create_mirror_topic(cluster, timeout_s=TIMEOUT_S)
    async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
        async def appended() -> bool:
            result = (await link_append(client, LINK, {TP: source_batches()}))[TP]
            return result.error == ErrorCode.NONE and result.high_watermark == 30

        await wait_for(appended, what="the copy in the ISR", timeout_s=TIMEOUT_S)
        assert (await admin.list_offsets(client, {TP: EARLIEST}))[TP].offset == 0
        await admin.alter_configs(client, "copy", {MIRROR_NAME_CONFIG: None})

        async def every_replica_caught_up() -> bool:
            return len(isr_of(cluster)) == 3

        await wait_for(every_replica_caught_up, what="a full ISR", timeout_s=TIMEOUT_S)


def raw(pid: int, seq: int, value: bytes) -> bytes:
    return build_batch([Record(b"local", value)], producer_id=pid, producer_epoch=0, base_sequence=seq)


async def appended_through(bootstrap: str, batches: bytes, high_watermark: int) -> None:
    """Link-append until acknowledged with this high watermark (retried through ISR changes)."""
    async with open_client(bootstrap, request_timeout_s=TIMEOUT_S) as client:
        async def appended() -> bool:
            result = (await link_append(client, LINK, {TP: batches}, timeout_ms=5000))[TP]
            return result.error == ErrorCode.NONE and result.high_watermark == high_watermark

        await wait_for(appended, what=f"the copy acknowledged up to {high_watermark}", timeout_s=TIMEOUT_S)


async def produce_raw(bootstrap: str, batch: bytes) -> tuple[int, int]:
    """(error code, base offset) of a raw produce, retried through leader changes."""
    answer: list[tuple[int, int]] = []
    async with open_client(bootstrap, request_timeout_s=TIMEOUT_S) as client:
        async def answered() -> bool:
            try:
                result = await produce(client, "copy", 0, batch)
            except KafkaError as exc:
                if exc.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                                ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
                    return False
                answer.append((exc.code, -1))
                return True
            answer.append((result.error, result.base_offset))
            return True

        await wait_for(answered, what="a produce answer", timeout_s=TIMEOUT_S)
    return answer[0]


def test_a_follower_that_lagged_at_promotion_counts_only_local_producers_as_leader(cluster: ZkCluster) -> None:
    """The follower is down while the rest of the copy lands, at promotion and at the first local
    writes: it learns all of it afterwards, in log order, and then leads."""
    source = source_batches()
    cut = split_batches(source)[15][0]
    trio.run(partial(create_mirror_topic, cluster, timeout_s=TIMEOUT_S))
    wait_until(lambda: len(isr_of(cluster)) == 3, what="the mirror topic's ISR", timeout_s=TIMEOUT_S)
    trio.run(appended_through, cluster.bootstrap(), source[:cut], 15)
    leader = leader_of(cluster)
    controller = cluster.controller()[0]
    # Not the controller: its replicas would wait for a new one.
    lagging = next(i for i in sorted(cluster.brokers) if i not in (leader, controller))
    third = next(i for i in sorted(cluster.brokers) if i not in (leader, lagging))
    cluster.brokers[lagging].stop()
    trio.run(appended_through, cluster.bootstrap(leader, third), source[cut:], 30)
    trio.run(promote, cluster.bootstrap(leader, third))
    # Local writes at the first leader: a producer with the copy's id 0, and one of its own (id 500).
    first = trio.run(produce_raw, cluster.bootstrap(leader, third), raw(0, 0, b"local-0-0"))
    assert first == (ErrorCode.NONE, 31), first  # the promotion marker at 30
    assert trio.run(produce_raw, cluster.bootstrap(leader, third), raw(500, 0, b"local-500-0")) == (ErrorCode.NONE, 32)

    # The lagging follower comes back, catches up, and becomes the only candidate: the third
    # broker leaves the ISR, the leader dies, the third comes back to follow the new leader.
    cluster.brokers[lagging].start()
    wait_until(lambda: len(isr_of(cluster)) == 3, what="the lagging follower back in the ISR",
               timeout_s=TIMEOUT_S)
    cluster.brokers[third].stop()
    wait_until(lambda: sorted(isr_of(cluster)) == sorted([leader, lagging]),
               what="the third broker out of the ISR", timeout_s=TIMEOUT_S)
    cluster.brokers[leader].kill()
    wait_until(lambda: cluster.state("copy")["leader"] == lagging, what="the lagging follower leading",
               timeout_s=TIMEOUT_S)
    cluster.brokers[third].start()
    at = cluster.bootstrap(lagging, third)
    # A local producer's retry is recognised; the copy's producer ids hold nobody to their sequences.
    assert trio.run(produce_raw, at, raw(500, 0, b"local-500-0")) == (ErrorCode.NONE, 32)
    assert trio.run(produce_raw, at, raw(0, 1, b"local-0-1")) == (ErrorCode.NONE, 33)
    assert trio.run(produce_raw, at, raw(1, 0, b"local-1-0")) == (ErrorCode.NONE, 34)
    assert trio.run(produce_raw, at, raw(2, 0, b"local-2-0")) == (ErrorCode.NONE, 35)
    got = values(at, "copy", 1)
    assert got == sorted([f"source-{p}-{s}".encode() for p in range(3) for s in range(10)]
                         + [b"local-500-0", b"local-0-0", b"local-0-1", b"local-1-0", b"local-2-0"])


async def promote(bootstrap: str) -> None:
    async with open_client(bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.alter_configs(client, "copy", {MIRROR_NAME_CONFIG: None})
        # As `causeway mirror promote`: done once every broker has applied it (each applies the
        # config change when ZooKeeper's notification reaches it, and refuses producers until then).
        assert await applied_everywhere(client, "copy", TIMEOUT_S) == []
