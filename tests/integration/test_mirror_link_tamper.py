"""A link-mode mirror against a target someone else tampers with (issue 19 item 2), and a copy
that starts above offset 0 (item 18). Real broker processes; the mirror runs in this test's trio
loop and writes its status file, which `causeway status` reads (mirror/status.py); every entry of
its `problems` makes `causeway status` report the mirror unhealthy and exit 2.

Before: a LinkAppend at the copy's log end + 1,000,000 was taken, the mirror's next batches were
skipped as "already there", and its status said running, lag 0, no problem, while every record
the source took afterwards never arrived. Now the partition stops, FAILED, in its `error` and in
`problems`, and its lag keeps counting.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio

from broker.client import LinkAppendResult, TopicPartition, admin, link_append, open_client
from broker.client.admin import EARLIEST, LATEST, NewTopic
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from mirror.runtime import Mirror
from mirror.status import MirrorStatus, read_status
from tests.integration.test_mirror_link import (
    NAME,
    assert_same_copy,
    ends_of,
    link_config,
    produce,
    running,
    wait_copied,
)
from tests.support.polling import wait_for


async def sneak(bootstrap: str, tp: TopicPartition, base: int, *, previous_end: int | None = None,
                log_start: int | None = None, count: int = 1) -> LinkAppendResult:
    """Another sender's LinkAppend as this mirror (its name), with claims that look honest."""
    records = b"" if count == 0 else build_batch(
        [Record(b"x", b"not from the source")] * count, base_offset=base, base_timestamp=1_700_000_000_000)
    async with open_client(bootstrap) as client:
        return (await link_append(client, NAME, {tp: records},
                                  previous_ends=None if previous_end is None else {tp: previous_end},
                                  log_start_offsets=None if log_start is None else {tp: log_start}))[tp]


def partition_status(status: MirrorStatus, topic: str, partition: int) -> dict[str, object]:
    return next(p.model_dump() for p in status.partitions if (p.topic, p.partition) == (topic, partition))


async def failed(mirror: Mirror, name: str) -> bool:
    return f"FAILED {name}" in mirror.status()["problems"]


async def test_a_copy_moved_ahead_at_the_target_fails_its_partition_instead_of_lag_0(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 90, flush_every=10))
    status_file = tmp_path / "status.json"
    async with running(link_config(east, west), status_file) as mirror:
        ends = await wait_copied(east, west, "orders", 3)
        # orders-0: someone appends at the copy's end + 1,000,000, saying the source has nothing
        # in between (as a compacted source may): the target cannot know better and takes it.
        tp0 = TopicPartition("orders", 0)
        sneaked = await sneak(west.bootstrap, tp0, ends[0] + 1_000_000, previous_end=ends[0])
        assert sneaked.error == ErrorCode.NONE, sneaked
        # orders-1: a log start far past the copy's end (it used to wipe the copy): refused.
        wipe = await sneak(west.bootstrap, TopicPartition("orders", 1), 0, count=0, log_start=2**63 - 1)
        assert wipe.error == ErrorCode.OFFSET_OUT_OF_RANGE, wipe
        # Nothing new at the source: the mirror finds the copy past the source's end by itself.
        await wait_for(lambda: failed(mirror, "orders-0"), what="orders-0 FAILED")
        # The source goes on: orders-0 is not copied on (nothing skipped silently), its lag
        # counts what is missing; the other partitions keep flowing.
        await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 30, start=90))
        source_ends = await ends_of(east.bootstrap, "orders", 3)
        await wait_for(lambda: partition_status(mirror.report(), "orders", 0)["lag"] == source_ends[0] - ends[0],
                       what="the lag of the FAILED partition to count the new records")

        async def others_copied() -> bool:
            got = await ends_of(west.bootstrap, "orders", 3)
            return (got[1], got[2]) == (source_ends[1], source_ends[2])

        await wait_for(others_copied, what="orders-1 and orders-2 copied on")
        await wait_for(lambda: "FAILED orders-0" in getattr(read_status(status_file), "problems", {}),
                       what="the status file to say FAILED")
    report = read_status(status_file)  # what `causeway status` reads
    assert report is not None and report.state in ("running", "stopped")
    part = partition_status(report, "orders", 0)
    assert str(part["error"]).startswith("FAILED: ") and report.problems["FAILED orders-0"] == part["error"]
    assert "past the source's high watermark" in str(part["error"]) and part["lag"] == source_ends[0] - ends[0]
    assert [what for what in report.problems if what.startswith("FAILED")] == ["FAILED orders-0"]
    assert report.lag >= source_ends[0] - ends[0] > 0
    assert (await ends_of(west.bootstrap, "orders", 3, EARLIEST))[1] == 0  # the wipe moved nothing


async def test_a_copy_written_to_while_the_mirror_was_away_fails_at_the_restart(
        east: BrokerProcess, west: BrokerProcess) -> None:
    """The variation: while the mirror is stopped, a foreign one-record batch at the copy's very
    end, where the source has a one-record batch of its own (so not past the source's end, and
    the source's next batch follows it exactly): the resume checks the copy's last batch."""
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 60, flush_every=10))
    config = link_config(east, west)
    async with running(config):
        ends = await wait_copied(east, west, "orders", 3)
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "orders", 30, start=60, flush_every=1))
    tp2 = TopicPartition("orders", 2)
    assert (await sneak(west.bootstrap, tp2, ends[2])).error == ErrorCode.NONE
    async with running(config) as mirror:
        await wait_for(lambda: failed(mirror, "orders-2"), what="orders-2 FAILED")
        problem = mirror.status()["problems"]["FAILED orders-2"]
        await wait_copied(east, west, "orders", 2)  # the others copy on
    assert "not the batch held there" in problem, problem
    assert (await ends_of(west.bootstrap, "orders", 3))[2] == ends[2] + 1  # nothing copied on top of it


async def empty_copy_listed(west: BrokerProcess, tp: TopicPartition) -> bool:
    async with open_client(west.bootstrap) as client:
        try:
            return (await admin.list_offsets(client, {tp: LATEST}))[tp].offset == 0
        except KafkaError:  # not created, or not hosted, yet
            return False


def mirrored(mirror: Mirror, tp: TopicPartition) -> bool:
    return tp in mirror.partitions


async def test_an_empty_copy_of_a_source_starting_above_0_is_not_a_truncation(
        east: BrokerProcess, west: BrokerProcess, tmp_path: Path) -> None:
    """Item 18: a source whose log starts at 120 with nothing after it yet. The mirror used to
    take its empty copy (ending at 0) for one truncated below the 120 "copied there", copy again
    from 0 and report source offsets 0..119 lost: a false loss alarm. Then, a restart: the same."""
    async with open_client(east.bootstrap) as client:
        await admin.create_topics(client, {"trimmed": NewTopic(1)})
    await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "trimmed", 120, partitions=1, flush_every=30))
    tp = TopicPartition("trimmed", 0)
    async with open_client(east.bootstrap) as client:
        assert (await admin.delete_records(client, {tp: 120}))[tp] == 120  # the whole log
    config = link_config(east, west)
    for run in ("first", "restart"):
        async with running(config) as mirror:
            await wait_for(partial(empty_copy_listed, west, tp), what="the empty copy at the target")
            # Two discovery rounds that see the empty copy (each checks the target's ends last):
            # a topic created at the source is started by the next round, and one more after it.
            for probe in (f"probe-{run}-1", f"probe-{run}-2"):
                async with open_client(east.bootstrap) as client:
                    await admin.create_topics(client, {probe: NewTopic(1)})
                await wait_for(partial(mirrored, mirror, TopicPartition(probe, 0)), what=f"{probe} mirrored")
            part = partition_status(mirror.report(), "trimmed", 0)
            assert (part["gaps"], part["lost"], part["error"]) == ([], None, None), part
            assert mirror.status()["problems"] == {}, mirror.status()["problems"]
            assert not [e for e in mirror.status()["events"] if "trimmed" in e["message"]]
            if run == "restart":
                await trio.to_thread.run_sync(lambda: produce(east.bootstrap, "trimmed", 30, start=120,
                                                              partitions=1))
                await wait_copied(east, west, "trimmed", 1)
    await assert_same_copy(east, west, "trimmed", 1)
    assert await ends_of(west.bootstrap, "trimmed", 1, EARLIEST) == {0: 120}
