"""Issue 10, items 11 and 9 (the mirror's part).

11: the remote topic deleted at the target mid-stream. Before the fix the mirror re-created the
topic and carried on from its position: the records it had written before were simply absent at
the target while the status said "lag 0". Now it copies again what the source still has and
reports, by offsets, what the source no longer has.

9: a batch the target would refuse is not copied: its partition parks, by name, with the batch's
offset and the reason, in the status; the other partitions keep flowing.

The brokers are real processes; records are written and read back with librdkafka.
"""

from __future__ import annotations

import json
import struct
import threading
from functools import partial
from pathlib import Path

import crc32c
import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from broker.client import Backoff, TopicPartition, admin, open_client
from broker.client.admin import LATEST
from broker.client.produce import init_idempotent_producer
from broker.protocol.records import Record, build_batch, split_batches
from deploy.broker_process import BrokerProcess
from mirror import runtime
from mirror.partition import Chunk, PartitionMirror, ProducerIdentity
from tests.integration.test_mirror import config_for, produce_with_confluent, running, wait_for_end_offsets
from tests.support.polling import wait_for, wait_until

Content = list[tuple[object, ...]]


def consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, Content]:
    """Every record of every partition, from the log start to the end, read by librdkafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hardening-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(CkTopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, Content] = {p: [] for p in range(partitions)}
        done = {p for p, end in ends.items() if end == 0}

        def step() -> bool:
            message = consumer.poll(0.2)
            if message is not None:
                if message.error() is None:
                    out[message.partition()].append((message.key(), message.value(), message.headers(),
                                                     message.timestamp()[1]))
                    if message.offset() + 1 >= ends[message.partition()]:
                        done.add(message.partition())
                elif message.error().code() != -191:  # _PARTITION_EOF
                    raise AssertionError(f"consumer error: {message.error()}")
            return len(done) == partitions

        wait_until(step, what=f"{topic} read to its end", timeout_s=60, interval_s=0)
        return out
    finally:
        consumer.close()


def delete_topic_with_admin_client(bootstrap: str, topic: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer arrives
    futures = client.delete_topics([topic], operation_timeout=10)
    futures[topic].result(timeout=30)


async def test_remote_topic_deleted_mid_stream_is_copied_again_and_reported(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 600))
    async with running(config_for(east, west, topics={"include": ["orders"]}), status_file) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 200, 1: 200, 2: 200})
        # Keep producing while the remote topic is deleted under the mirror.
        producing = threading.Thread(target=produce_with_confluent, args=(east.bootstrap, "orders", 1500),
                                     kwargs={"start": 600})
        producing.start()
        try:
            await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 250})  # mid-stream
            await trio.to_thread.run_sync(lambda: delete_topic_with_admin_client(west.bootstrap, "east.orders"))
        finally:
            await trio.to_thread.run_sync(producing.join)

        async def complete() -> bool:
            source = await trio.to_thread.run_sync(lambda: consume_all(east.bootstrap, "orders", 3))
            try:
                target = await trio.to_thread.run_sync(lambda: consume_all(west.bootstrap, "east.orders", 3))
            except Exception:
                return False
            return target == source

        await wait_for(lambda: mirror.status()["lag"] == 0 and all(
            p["position"] == 700 for p in mirror.status()["partitions"]), what="the mirror caught up")
        await wait_for(complete, what="every source record at the target, in order", timeout_s=90, interval_s=0.5)
        status = mirror.status()
        # The event is reported, by name; nothing was lost (the source still has everything).
        events = [e["message"] for e in status["events"]]
        assert any("the remote topic east.orders is gone from the target west" in e for e in events), events
        for part in status["partitions"]:
            assert any("copying source offsets 0.." in g for g in part["gaps"]), part
            assert part["lost"] is None
        # The record count is what the target holds from this run, not what was written twice.
        assert status["records"] == 2100
        await wait_for(lambda: json.loads(status_file.read_text())["records"] == 2100, what="the status file")


async def test_a_gap_the_source_cannot_fill_is_reported_with_offsets(east: BrokerProcess, west: BrokerProcess,
                                                                     tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 300))
    async with running(config_for(east, west, topics={"include": ["orders"]}), status_file) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 100, 1: 100, 2: 100})
        async with open_client(east.bootstrap) as client:
            await admin.delete_records(client, {TopicPartition("orders", 0): 40})
        await trio.to_thread.run_sync(lambda: delete_topic_with_admin_client(west.bootstrap, "east.orders"))
        await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30, start=300))

        def reported() -> bool:
            problems = json.loads(status_file.read_text())["problems"] if status_file.exists() else {}
            return "lost orders-0" in problems

        await wait_for(reported, what="the loss in the status file")
        await wait_for(lambda: mirror.status()["lag"] == 0 and not any(
            p["recopy"] for p in mirror.status()["partitions"]), what="the re-copy done")
        problems = json.loads(status_file.read_text())["problems"]
        assert problems["lost orders-0"].startswith("orders-0: source offsets 0..39 are gone at the target and no "
                                                    "longer at the source"), problems
        assert not any(k.startswith("lost orders-1") or k.startswith("lost orders-2") for k in problems), problems
        source = await trio.to_thread.run_sync(lambda: consume_all(east.bootstrap, "orders", 3))
        target = await trio.to_thread.run_sync(lambda: consume_all(west.bootstrap, "east.orders", 3))
        assert len(source[0]) == 110 - 40
        assert target == source  # what the source still has is all at the target, in order
        assert mirror.status()["records"] == 330 - 40


async def test_a_remote_topic_deleted_while_the_mirror_was_down_is_copied_again(
        east: BrokerProcess, west: BrokerProcess) -> None:
    config = config_for(east, west, topics={"include": ["orders"]})
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 300))
    async with running(config):
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 100, 1: 100, 2: 100})
    # Stopped cleanly: its checkpoint says 0..99 of each partition are at the target. They are not.
    await trio.to_thread.run_sync(lambda: delete_topic_with_admin_client(west.bootstrap, "east.orders"))
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30, start=300))
    async with running(config) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 110, 1: 110, 2: 110})
        events = [e["message"] for e in mirror.status()["events"]]
    assert sum("was missing at the target although source offsets up to 99 had been copied" in e
               for e in events) == 3, events
    source = await trio.to_thread.run_sync(lambda: consume_all(east.bootstrap, "orders", 3))
    target = await trio.to_thread.run_sync(lambda: consume_all(west.bootstrap, "east.orders", 3))
    assert target == source


# -- item 9: poison -------------------------------------------------------------------------


def poisoned(batch: bytes, codec: int) -> bytes:
    """`batch` claiming compression `codec` (5..7: no Kafka has them), with a CRC that matches:
    damage no transport check can see, only validation."""
    out = bytearray(batch)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


async def test_a_poison_batch_parks_its_partition_and_never_reaches_the_target(west: BrokerProcess) -> None:
    # Partition 0's chunk: a good batch (offset 0), a poison one (1..2: codec 7), a good one (3).
    chunk = (build_batch([Record(b"k", b"v0")], base_offset=0)
             + poisoned(build_batch([Record(b"k", b"v1"), Record(b"k", b"v2")], base_offset=1), 7)
             + build_batch([Record(b"k", b"v3")], base_offset=3))
    healthy = b"".join(build_batch([Record(b"k", b"w%d" % i)], base_offset=i) for i in range(20))
    async with open_client(west.bootstrap) as client:
        await admin.create_topics(client, {"east.orders": 2})
        producer = await init_idempotent_producer(client)
        identity = ProducerIdentity()
        identity.set(producer.producer_id, producer.producer_epoch)
        pms = [PartitionMirror(TopicPartition("orders", p), TopicPartition("east.orders", p), 0, 100, 1 << 20)
               for p in range(2)]
        for pm, data in zip(pms, (chunk, healthy), strict=True):
            parsed = Chunk.of(data)
            assert parsed is not None
            pm.put(parsed)
        async with trio.open_nursery() as nursery:
            for pm in pms:
                nursery.start_soon(partial(pm.run_writer, client, identity, lambda *_: None,
                                           backoff=Backoff(initial_s=0.01, max_s=0.1)))
            await wait_for(lambda: pms[0].parked and pms[1].written_through == 19, what="parked; the other written")
            nursery.cancel_scope.cancel()
        ends = await admin.list_offsets(client, {TopicPartition("east.orders", p): LATEST for p in range(2)})
    assert pms[0].written_through == 0  # the good batch before the poison is written, nothing after
    assert [ends[TopicPartition("east.orders", p)].offset for p in range(2)] == [1, 20]
    error = pms[0].error or ""
    assert error.startswith("parked at source offset 1 (batch 1..2): UNSUPPORTED_COMPRESSION_TYPE at the source"), error


async def test_a_batch_the_target_refuses_parks_its_partition_by_name(east: BrokerProcess, tmp_path: Path) -> None:
    # The target refuses timestamps more than an hour old (Kafka's message.timestamp.before.max.ms);
    # the source took them. Partition 0 has old ones, partition 1 current ones.
    west = BrokerProcess(tmp_path / "strict-west", overrides=("log.message.timestamp.before.max.ms=3600000",)).start()
    try:
        producer = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 0})
        producer.produce("orders", value=b"old", partition=0, timestamp=1_600_000_000_000)
        for i in range(20):
            producer.produce("orders", value=b"new-%d" % i, partition=1)
        assert producer.flush(30) == 0
        status_file = tmp_path / "status.json"
        async with running(config_for(east, west), status_file) as mirror:
            await wait_for_end_offsets(west.bootstrap, "east.orders", {1: 20})

            def reported() -> bool:
                problems = json.loads(status_file.read_text())["problems"] if status_file.exists() else {}
                return "parked orders-0" in problems

            await wait_for(reported, what="partition 0 parked, in the status file")
            # The mirror's own records (positions, heartbeats) are stamped now: the strict target takes them.
            await wait_for(lambda: mirror.flushed.get(TopicPartition("orders", 1)) == 19,
                           what="positions checkpointed at the strict target")
            problems = json.loads(status_file.read_text())["problems"]
            part = next(p for p in mirror.status()["partitions"] if p["partition"] == 0)
        assert problems["parked orders-0"].startswith("parked at source offset 0 (batch 0..0): the target refused "
                                                      "it with INVALID_TIMESTAMP"), problems
        assert part["parked"] and part["position"] == 0 and part["lag"] == 1
    finally:
        west.stop()


async def test_poison_stored_at_the_source_parks_its_partition_by_name(east: BrokerProcess, west: BrokerProcess,
                                                                        tmp_path: Path) -> None:
    # A source that did not validate took poison (here: written into its log while it was down,
    # as a broker from before validation would have stored it): a batch claiming codec 7, with a
    # good CRC, at offsets 10..11 of orders-0, then good records after it.
    producer = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce("orders", value=b"before-%d" % i, partition=0)
        producer.produce("orders", value=b"other-%d" % i, partition=1)
    assert producer.flush(30) == 0
    east.stop()
    segment = sorted((east.data_dir / "orders-0").glob("*.log"))[-1]
    last = split_batches(segment.read_bytes())[-1][1]
    assert last.last_offset == 9
    with segment.open("ab") as f:
        f.write(poisoned(build_batch([Record(b"k", b"p1"), Record(b"k", b"p2")], base_offset=10,
                                     partition_leader_epoch=last.partition_leader_epoch), 7))
    east.restart()
    producer = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce("orders", value=b"after-%d" % i, partition=0)
        producer.produce("orders", value=b"other-%d" % (10 + i), partition=1)
    assert producer.flush(30) == 0

    status_file = tmp_path / "status.json"
    async with running(config_for(east, west, topics={"include": ["orders"]}), status_file) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 10, 1: 15})

        def reported() -> bool:
            problems = json.loads(status_file.read_text())["problems"] if status_file.exists() else {}
            return "parked orders-0" in problems

        await wait_for(reported, what="orders-0 parked, in the status file")
        problems = json.loads(status_file.read_text())["problems"]
        part = next(p for p in mirror.status()["partitions"] if p["partition"] == 0)
    assert problems["parked orders-0"].startswith(
        "parked at source offset 10 (batch 10..11): UNSUPPORTED_COMPRESSION_TYPE at the source"), problems
    assert part["parked"] and part["position"] == 10 and part["lag"] == 7
    target = await trio.to_thread.run_sync(lambda: consume_all(west.bootstrap, "east.orders", 3))
    assert [r[1] for r in target[0]] == [b"before-%d" % i for i in range(10)]  # nothing of the poison or after
    assert len(target[1]) == 15  # the other partitions flow


async def test_a_source_topic_gone_leaves_the_status_once_handled(east: BrokerProcess, west: BrokerProcess,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "HANDLED_PROBLEM_S", 1.0)
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"doomed": 2})
    async with running(config_for(east, west)) as mirror:
        await wait_for(lambda: {p["topic"] for p in mirror.status()["partitions"]} == {"orders", "doomed"},
                       what="both topics mirrored")
        async with open_client(east.bootstrap) as client:
            await admin.delete_topics(client, ["doomed"])
        await wait_for(lambda: "topic doomed" in mirror.status()["problems"], what="the deletion reported")
        assert {p["topic"] for p in mirror.status()["partitions"]} == {"orders"}
        await wait_for(lambda: "topic doomed" not in mirror.status()["problems"], what="the problem handled")
        status = mirror.status()
    assert not status["problems"], status["problems"]
    assert any(e["message"].startswith("source topic doomed is gone") for e in status["events"])
