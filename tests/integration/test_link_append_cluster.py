"""A mirror topic on a three-broker ZooKeeper-mode cluster with replication factor 3: the
target's own followers replicate what LinkAppend wrote (a log starting above 0, gaps, producer
and control batches) byte for byte, a SIGKILLed leader loses no acknowledged link-appended batch,
the new leader goes on from its log end, and the old leader comes back, truncates by leader epoch
and holds the same bytes again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from broker.client import (
    MIRROR_NAME_CONFIG,
    ErrorCode,
    KafkaError,
    admin,
    link_append,
    open_client,
    produce,
)
from broker.client.groups import fetch_offsets, link_commit_offsets
from broker.protocol.records import Record, build_batch, split_batches
from mirror.promote import promote
from tests.integration.mirror_topic import LINK, TP, create_mirror_topic
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for, wait_until
from tests.support.zookeeper import ZooKeeperServer

SESSION_TIMEOUT_MS = 6000
OVERRIDES = (f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}", "offsets.topic.num.partitions=1",
             "replica.lag.time.max.ms=4000", "min.insync.replicas=2", "leader.imbalance.check.interval.seconds=3600",
             "log.flush.offset.checkpoint.interval.ms=200")
TIMEOUT_S = 30.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path, OVERRIDES)) as running:
        yield running


def source_batches() -> list[bytes]:
    """What a source log might hold: starting at 100 (its log start), an idempotent producer's
    batches, a transaction's commit marker, and gaps where compaction removed records."""
    out: list[bytes] = []
    offset = 100
    for i in range(80):
        count = 1 + i % 4
        records = [Record(f"k{offset + j}".encode(), b"v" * 50) for j in range(count)]
        if i % 10 == 9:  # a control batch (a transaction marker), as the source's log holds it
            out.append(build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=offset,
                                   producer_id=7, producer_epoch=0, is_transactional=True, is_control=True,
                                   base_timestamp=1_650_000_000_000 + i))
            offset += 1
        else:
            out.append(build_batch(records, base_offset=offset, producer_id=7, producer_epoch=0,
                                   base_sequence=offset, base_timestamp=1_650_000_000_000 + i))
            offset += count
        if i % 7 == 6:
            offset += 25  # compacted away at the source
    return out


def log_bytes(cluster: ZkCluster, broker_id: int) -> bytes:
    directory = cluster.brokers[broker_id].data_dir / "copy-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def offsets_in(data: bytes) -> list[int]:
    return [h.base_offset for _, h in split_batches(data)]


async def send_all(cluster: ZkCluster, batches: list[bytes], acked: list[int], *, start: int = 0) -> None:
    """Link-append each batch from `start` in turn, saying where the source's batch before it
    ended (its log start, 100, before the first), retrying (bounded) through leader changes;
    record the base offsets acknowledged."""
    async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:

        async def appended(data: bytes, previous_end: int) -> bool:
            result = (await link_append(client, LINK, {TP: data}, timeout_ms=10000,
                                        previous_ends={TP: previous_end}, log_start_offsets={TP: 100}))[TP]
            # Anything else than a leader election under way (asked again shortly) is a failure.
            assert result.error in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NETWORK_EXCEPTION,
                                    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.LEADER_NOT_AVAILABLE,
                                    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), result
            return result.error == ErrorCode.NONE

        for i in range(start, len(batches)):
            data = batches[i]
            previous_end = split_batches(batches[i - 1])[-1][1].last_offset + 1 if i else 100
            base = split_batches(data)[0][1].base_offset
            await wait_for(partial(appended, data, previous_end), what=f"the batch at {base} to be acknowledged",
                           interval_s=0.2)
            acked.append(base)


async def move_log_start(cluster: ZkCluster, offset: int) -> None:
    async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
        result = (await link_append(client, LINK, {TP: b""}, timeout_ms=10000, log_start_offsets={TP: offset}))[TP]
    assert result.error == ErrorCode.NONE and result.log_start_offset == offset, result


def replica_log_start(cluster: ZkCluster, broker_id: int) -> int | None:
    """The copy's log start offset in the broker's log-start-offset-checkpoint (None: not there)."""
    path = cluster.brokers[broker_id].data_dir / "log-start-offset-checkpoint"
    lines = path.read_text().splitlines()[2:] if path.exists() else []
    return next((int(o) for t, p, o in (line.split() for line in lines) if (t, p) == ("copy", "0")), None)


def test_followers_replicate_a_mirror_topic_and_a_leader_kill_keeps_acknowledged_batches(cluster: ZkCluster) -> None:
    trio.run(partial(create_mirror_topic, cluster, timeout_s=TIMEOUT_S))
    wait_until(lambda: len(cluster.state("copy")["isr"]) == 3, what="the mirror topic's ISR")  # type: ignore[arg-type]
    batches = source_batches()
    acked: list[int] = []
    trio.run(send_all, cluster, batches[:20], acked)
    ids = sorted(cluster.brokers)
    # The followers hold the same bytes as the leader (the partition leader epoch included).
    wait_until(lambda: len({log_bytes(cluster, i) for i in ids}) == 1, what="identical replicas", timeout_s=30)
    first = log_bytes(cluster, ids[0])
    assert offsets_in(first) == [split_batches(b)[0][1].base_offset for b in batches[:20]]
    # The source's log start moves (retention there) with nothing new to copy: every replica's
    # log start follows the leader's, although no batch comes to tell the followers' fetch sessions.
    new_start = split_batches(batches[5])[0][1].base_offset
    trio.run(move_log_start, cluster, new_start)
    wait_until(lambda: all(replica_log_start(cluster, i) == new_start for i in ids),
               what=f"every replica's log start at {new_start}", timeout_s=30, interval_s=0.2)

    leader = int(cluster.state("copy")["leader"])  # type: ignore[call-overload]
    old_epoch = int(cluster.state("copy")["leader_epoch"])  # type: ignore[call-overload]
    # The mirror goes on (from batch 15: those it already sent are skipped) while the leader is
    # SIGKILLed under it; it retries through the election, as the mirror does.
    failed: list[BaseException] = []

    def mirror() -> None:
        try:
            trio.run(partial(send_all, cluster, batches, acked, start=15))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test below
            failed.append(exc)

    sender = threading.Thread(target=mirror)
    sender.start()
    try:
        wait_until(lambda: len(acked) >= 30 or not sender.is_alive(), what="the mirror under way")
        cluster.brokers[leader].kill()
    finally:
        sender.join(120)
    assert not sender.is_alive() and not failed, failed
    assert int(cluster.state("copy")["leader_epoch"]) > old_epoch  # type: ignore[call-overload]
    new_leader = int(cluster.state("copy")["leader"])  # type: ignore[call-overload]
    held = offsets_in(log_bytes(cluster, new_leader))
    assert set(acked) <= set(held), "an acknowledged link-appended batch was lost"
    assert held == sorted(set(held)) == [split_batches(b)[0][1].base_offset for b in batches]

    # The old leader returns as a follower: it truncates by leader epoch and catches up, byte for byte.
    cluster.brokers[leader].start()
    wait_until(lambda: len({log_bytes(cluster, i) for i in ids}) == 1, what="identical replicas after the return",
               timeout_s=60)
    epochs = {h.partition_leader_epoch for _, h in split_batches(log_bytes(cluster, new_leader))}
    assert len(epochs) == 2, epochs  # the first leader's epoch, then the new leader's

    # The config lives in ZooKeeper as any topic config; promotion deletes it there, and every
    # broker then refuses LinkAppend and takes a producer's records.
    assert json.loads(cluster.zk.get("/config/topics/copy")[0])["config"] == {MIRROR_NAME_CONFIG: LINK}
    trio.run(promote_then_produce, cluster)
    assert json.loads(cluster.zk.get("/config/topics/copy")[0])["config"] == {}


async def promote_then_produce(cluster: ZkCluster) -> None:
    async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
        with pytest.raises(KafkaError) as info:
            await admin.alter_configs(client, "copy", {MIRROR_NAME_CONFIG: "another-mirror"})
        assert info.value.code == ErrorCode.INVALID_CONFIG
        await admin.alter_configs(client, "copy", {MIRROR_NAME_CONFIG: None})

        async def refused() -> bool:
            result = (await link_append(client, LINK, {TP: build_batch([Record(b"k", b"v")], base_offset=10_000)}))[TP]
            return result.error == ErrorCode.INVALID_REQUEST and "promoted" in (result.error_message or "")

        await wait_for(refused, what="LinkAppend refused after the promotion", timeout_s=20)
        written = await produce(client, "copy", 0, build_batch([Record(b"k", b"after promotion")]))
        assert written.error == ErrorCode.NONE, written


def test_a_promotion_applied_by_every_broker_fences_the_mirrors_group_commits(cluster: ZkCluster) -> None:
    """On three brokers the promotion reaches each one by its ZooKeeper notification; `promote`
    returns once every broker applied it, so the group coordinator, whichever broker it is,
    refuses a commit of the mirror sent right after: the group's offsets stay where the
    promotion said they were."""

    async def run() -> None:
        await create_mirror_topic(cluster, timeout_s=TIMEOUT_S)
        async with open_client(cluster.bootstrap(), request_timeout_s=TIMEOUT_S) as client:
            assert await link_commit_offsets(client, LINK, "movers", {TP: 5}) == {}
            report = await promote(cluster.bootstrap(), mirror=LINK, failover=True, timeout_s=TIMEOUT_S)
            assert report.promoted == ["copy"] and report.groups_unsynced == {"movers": {TP: 5}}, report
            refused = await link_commit_offsets(client, LINK, "movers", {TP: 9})
            assert list(refused) == [TP], refused
            assert (await fetch_offsets(client, "movers"))[TP].offset == 5

    trio.run(run)
