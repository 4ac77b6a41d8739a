"""The mirror in link mode between two real broker processes: mirror topics with the source's
offsets and byte-identical batches, restarts without a repeat or a gap, consumer groups carried
over unchanged, promotion, and a target topic that is not the mirror's.

The mirror runs in this test's trio loop (so a test can stop and restart it, and read its
status); the brokers are real processes; the records come from librdkafka and are read back
by librdkafka at both ends.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from broker.client import MIRROR_NAME_CONFIG, Client, TopicPartition, admin, open_client
from broker.client.admin import EARLIEST, LATEST, NewTopic
from broker.client.groups import CommittedOffset, commit_offsets, fetch_offsets
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import split_batches
from deploy.broker_process import BrokerProcess
from deploy.launcher.launch import free_port
from mirror.config import MirrorConfig, mirror_config_from_data
from tests.integration.partition_reads import read_whole_batches
from tests.integration.test_mirror import running
from tests.support.polling import wait_for

DEADLINE_S = 60.0
NAME = "east-to-west"


def link_config(east: BrokerProcess, west: BrokerProcess, **extra: object) -> MirrorConfig:
    return mirror_config_from_data({
        "name": NAME,
        "mode": "link",
        "source": {"alias": "east", "bootstrap": east.bootstrap},
        "target": {"alias": "west", "bootstrap": west.bootstrap},
        "refresh.topics.interval.seconds": 0.2,
        "emit.heartbeats.interval.seconds": 0.5,
        "sync.group.offsets.interval.seconds": 0.2,
        **extra,
    })


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0, partitions: int = 3,
            compression: str = "none", flush_every: int = 0, idempotent: bool = True) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all",
                         "compression.type": compression, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=f"key-{i % 17}".encode(), value=f"value-{i}".encode() * (1 + i % 5),
                         partition=i % partitions, headers=[("seq", str(i).encode()), ("empty", None)],
                         timestamp=1_700_000_000_000 + i)
        if flush_every and i % flush_every == flush_every - 1:
            producer.flush(30)  # small batches, spread over time
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, partitions: int) -> list[tuple[Any, ...]]:
    """Every column librdkafka gives of every record of `topic` (read_committed), in order; the
    leader epoch is left out: each cluster stamps its own."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "link-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions) if ends[p] > 0])
        out: list[tuple[Any, ...]] = []
        waiting = {p for p in range(partitions) if ends[p] > 0}
        for _ in range(100_000):
            if not waiting:
                break
            message = consumer.poll(10)
            assert message is not None, f"{topic}: nothing more to read, still waiting for {waiting}"
            error = message.error()
            if error is not None:
                if error.code() == -191:  # _PARTITION_EOF
                    waiting.discard(message.partition())
                    continue
                raise AssertionError(f"{topic}: {error}")
            out.append((message.topic(), message.partition(), message.offset(), message.key(), message.value(),
                        message.headers(), message.timestamp()))
        assert not waiting
        return sorted(out, key=lambda row: (row[1], row[2]))
    finally:
        consumer.close()


async def raw_batches(client: Client, tp: TopicPartition) -> bytes:
    """The partition's whole batches from its log start to its high watermark, as fetched."""
    start = (await admin.list_offsets(client, {tp: EARLIEST}))[tp].offset
    return await read_whole_batches(client, tp, start)


def without_epochs(data: bytes) -> list[bytes]:
    """Each batch with its partition leader epoch (bytes 12..16, outside the CRC) zeroed."""
    out = []
    for pos, header in split_batches(data):
        batch = bytearray(data[pos: pos + header.size])
        batch[12:16] = b"\0\0\0\0"
        out.append(bytes(batch))
    return out


async def ends_of(bootstrap: str, topic: str, partitions: int, spec: int = LATEST) -> dict[int, int]:
    async with open_client(bootstrap) as client:
        listed = await admin.list_offsets(client, {TopicPartition(topic, p): spec for p in range(partitions)})
    return {tp.partition: o.offset for tp, o in listed.items()}


async def wait_copied(east: BrokerProcess, west: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    """Wait until every partition of the mirror topic ends where the source's does."""
    want = await ends_of(east.bootstrap, topic, partitions)

    async def reached() -> bool:
        try:
            return await ends_of(west.bootstrap, topic, partitions) == want
        except KafkaError as exc:  # not created yet, or its partitions not hosted yet
            if exc.code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                return False
            raise

    await wait_for(reached, what=f"{topic} at west to reach {want}", timeout_s=DEADLINE_S)
    return want


async def assert_same_copy(east: BrokerProcess, west: BrokerProcess, topic: str, partitions: int) -> None:
    source = await trio.to_thread.run_sync(consume, east.bootstrap, topic, partitions)
    target = await trio.to_thread.run_sync(consume, west.bootstrap, topic, partitions)
    assert source, f"{topic}: nothing at the source"
    assert target == source, f"{topic}: the copy differs from the source"
    async with open_client(east.bootstrap) as e, open_client(west.bootstrap) as w:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            assert without_epochs(await raw_batches(w, tp)) == without_epochs(await raw_batches(e, tp)), (
                f"{topic}-{p}: batches differ")
            for spec in (EARLIEST, LATEST):
                assert (await admin.list_offsets(w, {tp: spec}))[tp].offset == (
                    await admin.list_offsets(e, {tp: spec}))[tp].offset


# -- config -------------------------------------------------------------------------------


def test_link_mode_refuses_an_explicit_default_naming_at_its_line(tmp_path: Path) -> None:
    from mirror.config import load_mirror_config
    from topology import TopologyError

    path = tmp_path / "mirror.yaml"
    path.write_text("source: {alias: east, bootstrap: 127.0.0.1:1}\n"
                    "target: {alias: west, bootstrap: 127.0.0.1:2}\n"
                    "mode: link\n"
                    "naming: default\n")
    with pytest.raises(TopologyError) as raised:
        load_mirror_config(path)
    assert f"{path}:4:" in str(raised.value) and "naming" in str(raised.value) and "mode: link" in str(raised.value)
    path.write_text("source: {alias: east, bootstrap: 127.0.0.1:1}\n"
                    "target: {alias: west, bootstrap: 127.0.0.1:2}\n"
                    "mode: link\n")
    config = load_mirror_config(path)
    assert (config.mode, config.naming) == ("link", "identity")
    path.write_text("source: {alias: east, bootstrap: 127.0.0.1:1}\n"
                    "target: {alias: west, bootstrap: 127.0.0.1:2}\n"
                    "mode: bridge\n")
    with pytest.raises(TopologyError, match="mode"):
        load_mirror_config(path)


# -- the copy -----------------------------------------------------------------------------


async def test_a_link_copy_has_the_source_offsets_and_identical_batches(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"zorders": NewTopic(2), "trimmed": NewTopic(1)})
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 900, flush_every=50))
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "zorders", 600, partitions=2, compression="zstd"))
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "trimmed", 300, partitions=1, flush_every=30))
    async with open_client(east.bootstrap) as client:
        tp = TopicPartition("trimmed", 0)
        # The source's log starts above 0: DeleteRecords at a batch boundary (offset 120).
        assert (await admin.delete_records(client, {tp: 120}))[tp] == 120
    status_file = tmp_path / "status.json"
    async with running(link_config(east, west), status_file) as mirror:
        for topic, partitions in (("orders", 3), ("zorders", 2), ("trimmed", 1)):
            await wait_copied(east, west, topic, partitions)
        await wait_for(lambda: mirror.status()["lag"] == 0 and len(mirror.partitions) == 6, what="no lag")
        status = mirror.status()
    await assert_same_copy(east, west, "orders", 3)
    await assert_same_copy(east, west, "zorders", 2)
    await assert_same_copy(east, west, "trimmed", 1)
    assert (await ends_of(west.bootstrap, "trimmed", 1, EARLIEST)) == {0: 120}
    async with open_client(west.bootstrap) as client:
        for topic in ("orders", "zorders", "trimmed"):
            configs = await admin.describe_configs(client, topic)
            assert configs[MIRROR_NAME_CONFIG].value == NAME
        assert (await admin.describe_configs(client, "zorders"))["compression.type"].value == "producer"
    assert status["mode"] == "link" and status["not_mirrored"] == {} and status["problems"] == {}
    assert status["topics"] == {"orders": "orders", "trimmed": "trimmed", "zorders": "zorders"}
    for p in status["partitions"]:
        assert p["target_end"] == p["source_end"] == p["position"] and p["lag"] == 0, p
    written = json.loads(status_file.read_text())
    assert written["mode"] == "link" and written["state"] == "stopped"


# -- consumer groups ----------------------------------------------------------------------


async def group_offsets(bootstrap: str, group: str) -> dict[int, tuple[int, str]]:
    async with open_client(bootstrap) as client:
        committed = await fetch_offsets(client, group)
    return {tp.partition: (c.offset, c.metadata) for tp, c in committed.items() if tp.topic == "orders"}


async def test_group_offsets_carry_over_unchanged_and_clamped_while_the_copy_lags(
        east: BrokerProcess, west: BrokerProcess) -> None:
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300))
    async with running(link_config(east, west)) as mirror:
        await wait_copied(east, west, "orders", 3)
        async with open_client(east.bootstrap) as client:
            await commit_offsets(client, "billing", {
                TopicPartition("orders", 0): CommittedOffset(40, metadata="m0"),
                TopicPartition("orders", 1): 100,
                TopicPartition("orders", 2): 0,
            })
        want = {0: (40, "m0"), 1: (100, ""), 2: (0, "")}
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "billing"), want), what="billing at west")

        # The copy stalls (the target wants 2 in-sync replicas of a 1-replica topic) while the
        # source moves on: the carried offset stops at what the target has.
        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "orders", {"min.insync.replicas": "2"})
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300, start=300))
        async with open_client(east.bootstrap) as client:
            await commit_offsets(client, "billing", {TopicPartition("orders", 0): 190})
        await wait_for(lambda: mirror.status()["lag"] == 300, what="the copy to lag by 300")
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "billing"), {**want, 0: (100, "")}),
                       what="billing at west clamped to the target's high watermark")
        assert "NOT_ENOUGH_REPLICAS" in str(mirror.status()["partitions"][0]["error"])

        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "orders", {"min.insync.replicas": None})
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "billing"), {**want, 0: (190, "")}),
                       what="billing at west to follow the source once copied")
    await assert_same_copy(east, west, "orders", 3)


async def test_between_full_checks_each_pass_carries_the_groups_changes(
        east: BrokerProcess, west: BrokerProcess) -> None:
    """Each group is checked against the target afresh only once here (refresh.groups.interval.
    seconds: an hour); the passes in between write only what changed at the source, and carry
    every change, the group's whole offsets, over one an operator set at the target meanwhile."""
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 90))
    async with open_client(east.bootstrap) as client:
        await commit_offsets(client, "steady", {TopicPartition("orders", p): 10 for p in range(3)})
    async with running(link_config(east, west, **{"refresh.groups.interval.seconds": 3600})):
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "steady"), {p: (10, "") for p in range(3)}),
                       what="steady at west")
        for offset in (20, 25):
            async with open_client(east.bootstrap) as client:
                await commit_offsets(client, "steady", {TopicPartition("orders", 1): offset})
            want = {0: (10, ""), 1: (offset, ""), 2: (10, "")}
            await wait_for(lambda: _equal(group_offsets(west.bootstrap, "steady"), want),  # noqa: B023
                           what=f"steady's new offset {offset} at west")
        async with open_client(west.bootstrap) as client:  # an operator's reset at the target
            await commit_offsets(client, "steady", {TopicPartition("orders", 0): 3})
        async with open_client(east.bootstrap) as client:
            await commit_offsets(client, "steady", {TopicPartition("orders", 2): 29})
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "steady"), {0: (10, ""), 1: (25, ""), 2: (29, "")}),
                       what="the group's changed offsets carried whole, the reset overwritten")


async def _equal(got: Any, want: object) -> bool:
    return bool(await got == want)


# -- promotion and topics that are not the mirror's -----------------------------------------


async def test_a_promoted_topic_stops_alone_and_the_status_says_so(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"payments": NewTopic(1)})
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300))
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "payments", 100, partitions=1))
    status_file = tmp_path / "status.json"
    # Discovery once, at start: the writer's refusal is what finds the promotion.
    async with running(link_config(east, west, **{"refresh.topics.interval.seconds": 300}), status_file) as mirror:
        await wait_copied(east, west, "orders", 3)
        await wait_copied(east, west, "payments", 1)
        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "orders", {MIRROR_NAME_CONFIG: None})  # promote
        kept = await ends_of(west.bootstrap, "orders", 3)
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300, start=300))
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "payments", 100, start=100, partitions=1))
        await wait_for(lambda: "orders" in mirror.status()["not_mirrored"], what="the promotion to be seen")
        await wait_copied(east, west, "payments", 1)
        status = mirror.status()
        # The promoted topic takes a producer now, and the mirror leaves it alone. Idempotent:
        # the copied batches carry the source's producer ids, which the target hands out too,
        # and constrain nobody (broker/storage/link_copy.py). Each partition's first local write
        # follows a promotion marker (one offset, a control batch consumers skip).
        await trio.to_thread.run_sync(lambda: produce(west.bootstrap, "orders", 30, start=10_000))
        await wait_for(lambda: _equal(ends_of(west.bootstrap, "orders", 3),
                                      {p: kept[p] + 11 for p in range(3)}), what="the local records")
        await wait_for(lambda: mirror.status()["lag"] == 0, what="payments caught up")
    assert "promoted" in status["not_mirrored"]["orders"]
    assert status["topics"] == {"payments": "payments"}
    assert {p["topic"] for p in status["partitions"]} == {"payments"}
    assert not any("orders" in what for what in status["problems"]), status["problems"]
    assert any("orders was promoted" in e["message"] for e in status["events"])
    assert "promoted" in json.loads(status_file.read_text())["not_mirrored"]["orders"]
    await assert_same_copy(east, west, "payments", 1)


async def test_a_promoted_topic_made_the_mirrors_again_by_reverse_and_start_is_copied_again(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    from mirror.failback import failback

    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300))
    async with running(link_config(east, west), tmp_path / "status.json") as mirror:
        await wait_copied(east, west, "orders", 3)
        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "orders", {MIRROR_NAME_CONFIG: None})  # a planned promote
        await wait_for(lambda: "orders" in mirror.status()["not_mirrored"], what="the promotion to be seen")
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300, start=300))
        # The promoted topic is left alone; reverse-and-start with the mirror's own name (west the
        # old primary, nothing written there since) makes it the mirror's mirror topic again.
        assert (await ends_of(west.bootstrap, "orders", 3)) == {p: 100 for p in range(3)}
        done = await failback(west.bootstrap, east.bootstrap, reverse_mirror=NAME, truncate=False, topics=["orders"])
        assert done.ok and done.cut_records == 0, done
        await wait_copied(east, west, "orders", 3)
        status = mirror.status()
    assert status["not_mirrored"] == {} and status["topics"] == {"orders": "orders"}, status
    assert any("orders is this mirror's mirror topic again" in e["message"] for e in status["events"])
    await assert_same_copy(east, west, "orders", 3)


async def test_a_group_offset_copy_after_the_promotion_is_refused_and_stops_the_topic(
        east: BrokerProcess, west: BrokerProcess) -> None:
    """The race of issue 22 (the promotion said 162, the DR site held 175), deterministic: the
    mirror does not know the topic was promoted (discovery once, at start; nothing more to copy,
    so no LinkAppend is refused), and its group-offset pass carries the source group's new
    offsets after the promotion. The target refuses them where they would land: the moved
    group's offsets at the DR site stay its own, and the refusal is how the mirror learns of the
    promotion (it stops the topic, and says so)."""
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 90))
    async with open_client(east.bootstrap) as client:
        await commit_offsets(client, "movers", {TopicPartition("orders", p): 10 for p in range(3)})
    async with running(link_config(east, west, **{"refresh.topics.interval.seconds": 300})) as mirror:
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: _equal(group_offsets(west.bootstrap, "movers"), {p: (10, "") for p in range(3)}),
                       what="movers at west")
        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "orders", {MIRROR_NAME_CONFIG: None})  # promoted
            await commit_offsets(client, "movers", {TopicPartition("orders", 0): 12})  # moved: its own commit
        assert "orders" in mirror.status()["topics"]  # the mirror does not know
        async with open_client(east.bootstrap) as client:  # read on at the old primary
            await commit_offsets(client, "movers", {TopicPartition("orders", p): 25 for p in range(3)})
        await wait_for(lambda: "orders" in mirror.status()["not_mirrored"], what="the refusal to stop the topic")
        status = mirror.status()
    assert "promoted" in status["not_mirrored"]["orders"] and "orders" not in status["topics"], status
    assert any("orders was promoted" in e["message"] for e in status["events"]), status["events"]
    assert await group_offsets(west.bootstrap, "movers") == {0: (12, ""), 1: (10, ""), 2: (10, "")}


async def test_a_target_topic_that_is_not_the_mirrors_is_reported_and_not_written(
        east: BrokerProcess, west: BrokerProcess) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"payments": NewTopic(1), "invoices": NewTopic(1)})
    async with open_client(west.bootstrap) as client:
        await admin.create_topics(client, {"orders": NewTopic(3), "invoices": NewTopic(1, configs={
            MIRROR_NAME_CONFIG: "another-mirror"})})
    await trio.to_thread.run_sync(lambda: produce(west.bootstrap, "orders", 6))  # the target's own records
    for topic, partitions in (("orders", 3), ("payments", 1), ("invoices", 1)):
        await trio.to_thread.run_sync(partial(produce, east.bootstrap, topic, 60, partitions=partitions))
    async with running(link_config(east, west)) as mirror:
        await wait_copied(east, west, "payments", 1)
        await wait_for(lambda: set(mirror.status()["not_mirrored"]) == {"orders", "invoices"}, what="both reported")
        status = mirror.status()
        assert await ends_of(west.bootstrap, "orders", 3) == {0: 2, 1: 2, 2: 2}
        assert await ends_of(west.bootstrap, "invoices", 1) == {0: 0}
        assert "not a mirror topic" in status["not_mirrored"]["orders"]
        assert "another-mirror" in status["not_mirrored"]["invoices"]
        assert status["problems"]["topic orders"] == status["not_mirrored"]["orders"]
        assert status["topics"] == {"payments": "payments"}

        # Looked at again every round: once the normal topic is gone, the mirror makes its own.
        async with open_client(west.bootstrap) as client:
            await admin.delete_topics(client, ["orders"])
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: set(mirror.status()["not_mirrored"]) == {"invoices"}, what="orders mirrored")
        assert "topic orders" not in mirror.status()["problems"]

        # An idle mirror topic promoted: the discovery round sees it (no write is refused).
        async with open_client(west.bootstrap) as client:
            await admin.alter_configs(client, "payments", {MIRROR_NAME_CONFIG: None})
        await wait_for(lambda: "promoted" in mirror.status()["not_mirrored"].get("payments", ""),
                       what="the idle topic's promotion to be seen")
        assert set(mirror.status()["topics"]) == {"orders"}
    await assert_same_copy(east, west, "orders", 3)


async def test_a_mirror_topic_deleted_at_the_target_is_copied_again_whole(
        east: BrokerProcess, west: BrokerProcess) -> None:
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 300, flush_every=30))
    async with running(link_config(east, west)) as mirror:
        await wait_copied(east, west, "orders", 3)
        async with open_client(west.bootstrap) as client:
            await admin.delete_topics(client, ["orders"])
        await wait_for(lambda: any("gone from the target" in e["message"] for e in mirror.status()["events"]),
                       what="the deletion to be seen")
        await wait_copied(east, west, "orders", 3)
        await wait_for(lambda: mirror.status()["lag"] == 0 and len(mirror.partitions) == 3, what="no lag")
    await assert_same_copy(east, west, "orders", 3)


# -- the target -----------------------------------------------------------------------------


async def test_a_target_that_is_down_at_start_is_waited_for_not_refused(east: BrokerProcess, tmp_path: Path) -> None:
    port = free_port()
    west = BrokerProcess(tmp_path / "west")
    west.bootstrap = f"127.0.0.1:{port}"
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 30))
    try:
        async with running(link_config(east, west, **{"target": {"alias": "west", "bootstrap": west.bootstrap}})) as m:
            await wait_for(lambda: m.status()["state"] == "waiting for the target", what="the mirror to wait")
            await trio.to_thread.run_sync(lambda: west.start(port=port))
            await wait_copied(east, west, "orders", 3)
            assert m.status()["state"] == "running" and "target west" not in m.status()["problems"]
    finally:
        west.stop()
