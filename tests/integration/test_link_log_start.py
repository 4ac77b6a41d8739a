"""A mirror topic's log start follows the source's: DeleteRecords at the source inside a batch
before the copy starts, then more deletions while the mirror runs (idle, and with new records):
the target's log start moves to the source's each time, and a consumer from `earliest` at the
target reads exactly what one at the source reads."""

from __future__ import annotations

import trio

from broker.client import TopicPartition, admin, open_client
from broker.client.admin import EARLIEST, NewTopic
from deploy.broker_process import BrokerProcess
from tests.integration.test_mirror_link import consume, link_config, produce, running, wait_copied
from tests.support.polling import wait_for

TP = TopicPartition("events", 0)
DEADLINE_S = 60.0


async def log_start(bootstrap: str) -> int:
    async with open_client(bootstrap) as client:
        return (await admin.list_offsets(client, {TP: EARLIEST}))[TP].offset


async def delete_before(bootstrap: str, offset: int) -> None:
    async with open_client(bootstrap) as client:
        assert (await admin.delete_records(client, {TP: offset}))[TP] == offset


async def assert_same_from_earliest(east: BrokerProcess, west: BrokerProcess) -> None:
    source = await trio.to_thread.run_sync(consume, east.bootstrap, "events", 1)
    target = await trio.to_thread.run_sync(consume, west.bootstrap, "events", 1)
    assert target == source


async def follows(west: BrokerProcess, offset: int) -> None:
    async def moved() -> bool:
        return await log_start(west.bootstrap) == offset

    await wait_for(moved, what=f"the copy's log start at {offset}", timeout_s=DEADLINE_S)


async def test_the_copy_log_start_follows_delete_records_at_the_source(
        east: BrokerProcess, west: BrokerProcess) -> None:
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"events": NewTopic(1)})
    # Batches of 10 records (flushed every 10): offset 35 lies inside the batch [30, 39].
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "events", 100, partitions=1, flush_every=10))
    await delete_before(east.bootstrap, 35)

    async with running(link_config(east, west)):
        await wait_copied(east, west, "events", 1)
        await follows(west, 35)  # not 30, where the copied batch starts
        await assert_same_from_earliest(east, west)

        # Deleted at the source while the mirror is idle (nothing new to copy).
        await delete_before(east.bootstrap, 72)
        await follows(west, 72)
        await assert_same_from_earliest(east, west)

        # And with new records on the way.
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "events", 50, start=100, partitions=1,
                                                      flush_every=10))
        await delete_before(east.bootstrap, 118)
        await wait_copied(east, west, "events", 1)
        await follows(west, 118)
        await assert_same_from_earliest(east, west)
