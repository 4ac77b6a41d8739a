"""Consumer-group checkpoints and offset sync: a group that read part of `orders` in east resumes
in west, on `east.orders`, at the same records (real brokers, librdkafka consumers)."""

from __future__ import annotations

import trio
from confluent_kafka import Consumer, TopicPartition

from broker.client import open_client
from deploy.broker_process import BrokerProcess
from mirror.formats import Checkpoint
from mirror.topics import read_whole_topic
from tests.integration.test_mirror import config_for, produce_with_confluent, running, wait_for_end_offsets
from tests.support.polling import wait_for


def consume_and_commit(bootstrap: str, topic: str, group: str, counts: dict[int, int]) -> dict[int, list[bytes]]:
    """Read counts[p] records of each partition from the start, commit, leave the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in counts])
    seen: dict[int, list[bytes]] = {p: [] for p in counts}
    for _ in range(2000):
        if all(len(seen[p]) >= n for p, n in counts.items()):
            break
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None and len(seen[msg.partition()]) < counts[msg.partition()]:
            seen[msg.partition()].append(msg.value())
    consumer.commit(offsets=[TopicPartition(topic, p, n) for p, n in counts.items()], asynchronous=False)
    consumer.close()
    return seen


def first_records_after_resume(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, bytes]:
    """A consumer of `group` subscribing in another cluster: the first record of each partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "latest"})  # without a synced offset it would read nothing
    consumer.subscribe([topic])
    first: dict[int, bytes] = {}
    for _ in range(600):
        if len(first) == partitions:
            break
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            first.setdefault(msg.partition(), msg.value())
    consumer.close()
    return first


async def test_a_group_resumes_at_the_target_where_it_stopped_at_the_source(east: BrokerProcess,
                                                                           west: BrokerProcess) -> None:
    await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 300))
    # Record i is at offset i // 3 of partition i % 3. The group read all of partition 0, none of
    # partition 1 and part of partition 2.
    counts = {0: 100, 1: 0, 2: 57}
    await trio.to_thread.run_sync(lambda: consume_and_commit(east.bootstrap, "orders", "billing", counts))
    config = config_for(east, west, **{"emit.checkpoints.interval.seconds": 0.2,
                                       "sync.group.offsets.interval.seconds": 0.2, "offset.lag.max": 10})
    async with running(config) as mirror:
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 100, 1: 100, 2: 100})
        async with open_client(west.bootstrap) as client:

            async def checkpoints() -> dict[int, Checkpoint]:
                records = await read_whole_topic(client, "east.checkpoints.internal")
                found = [Checkpoint.decode(r.key or b"", r.value or b"") for r in records]
                return {c.partition: c for c in found if c.group == "billing" and c.topic == "east.orders"}

            async def translated() -> bool:
                found = await checkpoints()
                if {p: c.upstream_offset for p, c in found.items()} != counts:
                    return False
                # Offsets at a sync translate exactly: the start (0 -> 0) and, once the idle
                # partition's last record is synced, its end (100 -> 100).
                return found[1].downstream_offset == 0 and found[0].downstream_offset == 100

            await wait_for(translated, what="exact checkpoints for billing")
            latest = await checkpoints()
        assert 0 < latest[2].downstream_offset <= 57  # mid-partition: at or before, never after
        assert mirror.group_checkpoints >= 3
        await trio.to_thread.run_sync(lambda: produce_with_confluent(east.bootstrap, "orders", 30, start=300))
        await wait_for_end_offsets(west.bootstrap, "east.orders", {0: 110, 1: 110, 2: 110})
        first = await trio.to_thread.run_sync(lambda: first_records_after_resume(west.bootstrap, "east.orders",
                                                                                 "billing", 3))
    # The group goes on in west where it stopped in east: exactly, or a little before (records
    # read again), never after (a record skipped).
    seq = {p: int(value.split(b"value-")[1]) for p, value in first.items()}  # values repeat "value-i"
    assert seq[0] == 300 and seq[1] == 1
    assert seq[2] % 3 == 2 and seq[2] // 3 <= 57
