"""The mirror daemon between two real broker processes, with confluent-kafka writing and reading.

The mirror runs in this test's trio loop (so a test can stop and restart it); the brokers are
real processes and the records come from librdkafka.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer

from broker.client import TopicPartition, admin, decode_records, fetch, open_client
from broker.client.admin import EARLIEST, LATEST
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import DecodedRecord
from deploy.broker_process import BrokerProcess
from mirror.config import MirrorConfig, mirror_config_from_data
from mirror.driver import run_mirror
from mirror.formats import Heartbeat, OffsetSync, decode_position
from mirror.runtime import Mirror
from mirror.topics import describe_topic, read_whole_topic
from tests.support.polling import wait_for

DEADLINE_S = 60.0




def config_for(east: BrokerProcess, west: BrokerProcess, **extra: object) -> MirrorConfig:
    return mirror_config_from_data({
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "refresh.topics.interval.seconds": 0.2,
        "offset.flush.interval.ms": 100,
        "emit.heartbeats.interval.seconds": 0.2,
        "emit.checkpoints.interval.seconds": 0,
        **extra,
    })


@asynccontextmanager
async def running(config: MirrorConfig, status_file: Path | None = None) -> AsyncIterator[Mirror]:
    async with trio.open_nursery() as nursery:
        mirror: Mirror = await nursery.start(lambda task_status: run_mirror(config, status_file=status_file,
                                                                            task_status=task_status))
        try:
            yield mirror
        finally:
            mirror.stop()


def produce_with_confluent(bootstrap: str, topic: str, count: int, *, start: int = 0, compression: str = "none",
                           partitions: int = 3) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "compression.type": compression, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=f"key-{i % 17}".encode(), value=f"value-{i}".encode() * (1 + i % 5),
                         partition=i % partitions, headers=[("seq", str(i).encode()), ("empty", None)],
                         timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0


async def read_partition(bootstrap: str, topic: str, partition: int) -> list[DecodedRecord]:
    async with open_client(bootstrap) as client:
        tp = TopicPartition(topic, partition)
        start = (await admin.list_offsets(client, {tp: EARLIEST}))[tp].offset
        end = (await admin.list_offsets(client, {tp: LATEST}))[tp].offset
        out: list[DecodedRecord] = []
        position = start
        while position < end:
            part = (await fetch(client, {tp: position}, max_wait_ms=0))[tp]
            assert part.error == 0, part
            out.extend(decode_records(part.records, from_offset=position))
            assert part.next_offset is not None
            position = part.next_offset
        return out


async def wait_for_end_offsets(bootstrap: str, topic: str, want: dict[int, int]) -> None:
    """Poll the target's end offsets until they reach `want` (bounded by DEADLINE_S)."""
    async with open_client(bootstrap) as client:

        async def reached() -> bool:
            if await describe_topic(client, topic) is None:
                return False
            try:
                ends = await admin.list_offsets(client, {TopicPartition(topic, p): LATEST for p in want})
            except KafkaError as exc:  # just created: its partitions are not hosted yet
                if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return False
                raise
            return all(ends[TopicPartition(topic, p)].offset >= n for p, n in want.items())

        await wait_for(reached, what=f"{topic} at {bootstrap} to reach {want}", timeout_s=DEADLINE_S)


def content(records: list[DecodedRecord]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


@pytest.mark.parametrize("compression", ["none", "zstd"])
async def test_records_arrive_whole_and_in_order_as_east_dot_topic(
        east: BrokerProcess, west: BrokerProcess, compression: str) -> None:
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 600,
                                                                 compression=compression))
    async with running(config_for(east, west)):
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 200, 1: 200, 2: 200})
    for p in range(3):
        source = await read_partition(east.bootstrap, "orders", p)
        target = await read_partition(west.bootstrap, "east.orders", p)
        assert len(source) == 200
        assert content(target) == content(source)
    async with open_client(west.bootstrap) as client:
        assert (await admin.list_topics(client))["east.orders"] == 3


async def test_restart_resumes_from_the_stored_position_without_repeats(east: BrokerProcess, west: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    config = config_for(east, west)
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 300))
    async with running(config):
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 100, 1: 100, 2: 100})
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 300, start=300))
    status_file = tmp_path / "status.json"
    async with running(config, status_file) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 200, 1: 200, 2: 200})
        await wait_for(lambda: len(mirror.partitions) == 3 and mirror.status()["lag"] == 0, what="no lag")
    for p in range(3):
        source = await read_partition(east.bootstrap, "orders", p)
        target = await read_partition(west.bootstrap, "east.orders", p)
        assert content(target) == content(source), f"partition {p} differs after a restart"
    status = json.loads(status_file.read_text())
    assert status["state"] == "stopped" and status["lag"] == 0
    assert {(p["topic"], p["partition"], p["position"]) for p in status["partitions"]} == {
        ("orders", p, 200) for p in range(3)}


async def test_internal_topics_use_mirrormaker2_formats(east: BrokerProcess, west: BrokerProcess) -> None:
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30))
    async with running(config_for(east, west)) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 10, 1: 10, 2: 10})
        async with open_client(west.bootstrap) as client:
            flushed = {TopicPartition("orders", p): 9 for p in range(3)}
            await wait_for(lambda: mirror.flushed == flushed, what="positions checkpointed")
            await wait_for(lambda: read_whole_topic(client, "heartbeats"), what="a heartbeat")
            beats = [Heartbeat.decode(r.key or b"", r.value or b"")
                     for r in await read_whole_topic(client, "heartbeats")]
            positions = [decode_position(r.key or b"", r.value)
                         for r in await read_whole_topic(client, "mm2-offsets.east.internal")]
            topics = await admin.list_topics(client, include_internal=True)
    assert {(b.source_alias, b.target_alias) for b in beats} == {("east", "west")}
    assert ("east", "orders", 0, 9) in positions
    assert "east.checkpoints.internal" in topics
    async with open_client(east.bootstrap) as client:
        syncs = [OffsetSync.decode(r.key or b"", r.value or b"")
                 for r in await read_whole_topic(client, "mm2-offset-syncs.west.internal")]
    # The first batch of each partition is synced (upstream 0 -> downstream 0).
    assert {(s.topic, s.partition, s.upstream_offset, s.downstream_offset) for s in syncs} >= {
        ("orders", p, 0, 0) for p in range(3)}


async def test_new_topics_and_partitions_and_configs_follow_the_source(east: BrokerProcess,
                                                                       west: BrokerProcess) -> None:
    async with running(config_for(east, west)):
        async with open_client(east.bootstrap) as source, open_client(west.bootstrap) as target:
            await admin.create_topics(source, {"payments": admin.NewTopic(2, configs={"retention.ms": "3600000"})})
            await wait_for_end_offsets(west.bootstrap, "east.payments", {0: 0, 1: 0})
            configs = await admin.describe_configs(target, "east.payments")
            assert configs["retention.ms"].value == "3600000"
            await admin.create_partitions(source, {"payments": 4})
            await admin.alter_configs(source, "payments", {"retention.ms": "7200000"})


            async def synced() -> bool:
                described = (await admin.describe_topics(target, ["east.payments"]))["east.payments"]
                retention = (await admin.describe_configs(target, "east.payments"))["retention.ms"].value
                return described.partition_count == 4 and retention == "7200000"

            await wait_for(synced, what="partitions and configs synced")


async def test_loops_are_not_mirrored_back_and_internal_topics_stay(east: BrokerProcess, west: BrokerProcess) -> None:
    async with open_client(east.bootstrap) as source:
        # east already holds a copy of west's topic (an active-active pair).
        await admin.create_topics(source, {"west.orders": 1, "__private": 1, "x.internal": 1})
    async with running(config_for(east, west)) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 0})
        assert set(mirror.topics) == {"orders"}


async def test_a_target_down_at_start_is_waited_for(east: BrokerProcess, tmp_path: Path) -> None:
    # The port is reserved by a socket bound without listening: connections to it are refused
    # (the target is down), and no other process can take it before the late broker binds it.
    reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    reserved.bind(("127.0.0.1", 0))
    port = reserved.getsockname()[1]
    west = BrokerProcess(tmp_path / "late-west")
    config = mirror_config_from_data({
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": f"127.0.0.1:{port}"},
        "refresh.topics.interval.seconds": 0.2, "emit.checkpoints.interval.seconds": 0})
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30))
    try:
        async with running(config) as mirror:
            await wait_for(lambda: "target west" in mirror.status()["problems"], what="the target reported down")
            assert mirror.status()["state"] == "waiting for the target"
            reserved.close()
            await trio.to_thread.run_sync(lambda: west.start(port=port))
            await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 10, 1: 10, 2: 10})
            await wait_for(lambda: mirror.status()["state"] == "running" and not mirror.status()["problems"],
                           what="the problem cleared")
    finally:
        reserved.close()
        if west.proc is not None:
            west.stop()


async def test_a_batch_too_large_for_the_target_parks_only_its_partition(east: BrokerProcess,
                                                                        tmp_path: Path) -> None:
    west = BrokerProcess(tmp_path / "small-west", overrides=("message.max.bytes=4000",)).start()
    try:
        producer_config = {"bootstrap.servers": east.bootstrap, "linger.ms": 0}
        producer = Producer(producer_config)
        producer.produce("orders", value=b"x" * 20_000, partition=0)
        for i in range(20):
            producer.produce("orders", value=b"small-%d" % i, partition=1)
        assert producer.flush(30) == 0
        async with running(config_for(east, west)) as mirror:
            await wait_for_end_offsets(west.bootstrap, "east.orders", {1: 20})

            def parked() -> bool:
                part = next((p for p in mirror.status()["partitions"] if p["partition"] == 0), None)
                return part is not None and part["parked"] and "MESSAGE_TOO_LARGE" in (part["error"] or "")

            await wait_for(parked, what="partition 0 parked with MESSAGE_TOO_LARGE")
            assert mirror.status()["lag"] == 1  # the big record waits; nothing was skipped
    finally:
        west.stop()


async def test_records_removed_at_the_source_before_mirroring_are_reported(east: BrokerProcess,
                                                                          west: BrokerProcess) -> None:
    config = config_for(east, west, topics={"include": ["orders"]})
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30))
    async with running(config):
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 10, 1: 10, 2: 10})
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30, start=30))
    async with open_client(east.bootstrap) as client:
        await admin.delete_records(client, {TopicPartition("orders", 0): 15})
    async with running(config) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 15, 1: 20, 2: 20})
        gaps = next(p["gaps"] for p in mirror.status()["partitions"] if p["partition"] == 0)
        assert gaps == ["orders-0: source offsets 10..14 were removed (retention or DeleteRecords) before they "
                        "were mirrored; continuing at 15"]
    source = await read_partition(east.bootstrap, "orders", 0)
    target = await read_partition(west.bootstrap, "east.orders", 0)
    assert content(target)[10:] == content(source)  # 15..19 follow 0..9; nothing else is missing


async def test_a_deleted_source_topic_is_reported_and_the_others_flow(east: BrokerProcess,
                                                                      west: BrokerProcess) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"doomed": 1})
    async with running(config_for(east, west)) as mirror:
        await wait_for(lambda: {"orders", "doomed"} <= set(mirror.topics), what="both topics mirrored")
        async with open_client(east.bootstrap) as client:
            await admin.delete_topics(client, ["doomed"])
        await wait_for(lambda: "topic doomed" in mirror.status()["problems"], what="the deletion reported")
        await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 9))
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 3, 1: 3, 2: 3})
    assert "doomed" not in mirror.topics
