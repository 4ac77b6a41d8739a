"""Leader state of a partition: high watermark, ISR changes, acks=all waits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from broker.controller.model import PartitionInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.replication.partition import Partition, monotonic_ms
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000
LAG_MS = 10_000


def batch(n: int = 1) -> bytes:
    return build_batch([Record(None, b"v%d" % i, timestamp=NOW) for i in range(n)])


class FakeIsrChannel:
    """Writes every ISR change at once (or when `hold` is released), as a controller would."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.hold: trio.Event | None = None
        self.refuse: ErrorCode | None = None

    async def alter_partition(self, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        self.calls.append(tuple(new_isr))
        if self.hold is not None:
            await self.hold.wait()
        if self.refuse is not None:
            raise KafkaError(self.refuse)
        return PartitionInfo(partition, 1, leader_epoch, (1, 2, 3), tuple(new_isr), partition_epoch + 1)


def leader(tmp_path: Path, nursery: trio.Nursery | None, *, isr: tuple[int, ...] = (1, 2, 3),
           min_isr: int = 1) -> tuple[Partition, FakeIsrChannel]:
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=min_isr), recovery_point=None)  # type: ignore[call-arg]
    p = Partition("t", 0, log, leader_epoch=0, is_leader=False, broker_id=1, replicas=(1, 2, 3), isr=isr)
    channel = FakeIsrChannel()
    p.isr_channel = channel
    if nursery is not None:
        p.spawn = nursery.start_soon
    p.make_leader(PartitionInfo(0, 1, 5, (1, 2, 3), isr, 0), monotonic_ms())
    return p, channel


def wait_in(nursery: trio.Nursery, p: Partition, offset: int) -> list[ErrorCode]:
    """Start an acks=all wait for `offset` in `nursery`; the list it returns gets the outcome."""
    outcome: list[ErrorCode] = []

    async def wait() -> None:
        outcome.append(await p.wait_for_high_watermark(offset))

    nursery.start_soon(wait)
    return outcome


def test_a_standalone_partition_commits_at_the_append(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=None)
    p = Partition("t", 0, log, leader_epoch=0, is_leader=True)
    p.append(batch(3), now_ms=NOW)
    assert p.high_watermark == 3 == log.log_end_offset


async def test_high_watermark_is_the_isr_minimum_and_never_goes_back(tmp_path: Path) -> None:
    p, _ = leader(tmp_path, None)
    p.append(batch(4), now_ms=NOW)
    assert p.high_watermark == 0  # no follower has fetched yet
    p.update_follower_fetch(2, 4, monotonic_ms())
    assert p.high_watermark == 0
    p.update_follower_fetch(3, 2, monotonic_ms())
    assert p.high_watermark == 2
    p.update_follower_fetch(3, 1, monotonic_ms())  # an older fetch offset: the HW stays
    assert p.high_watermark == 2
    p.update_follower_fetch(3, 4, monotonic_ms())
    assert p.high_watermark == 4
    with pytest.raises(KafkaError) as exc:
        p.update_follower_fetch(9, 4, monotonic_ms())  # not an assigned replica
    assert exc.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_all_waits_for_the_isr_then_answers(tmp_path: Path) -> None:
    p, _ = leader(tmp_path, None, min_isr=2)
    result = p.append(batch(2), now_ms=NOW)
    async with trio.open_nursery() as nursery:
        outcome = wait_in(nursery, p, result.last_offset + 1)
        await trio.testing.wait_all_tasks_blocked()
        p.update_follower_fetch(2, 2, monotonic_ms())
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == []  # follower 3 is in the ISR and has not fetched
        p.update_follower_fetch(3, 2, monotonic_ms())
    assert outcome == [ErrorCode.NONE]


async def test_acks_all_waiters_learn_of_a_lost_leadership(tmp_path: Path) -> None:
    p, _ = leader(tmp_path, None)
    result = p.append(batch(), now_ms=NOW)
    async with trio.open_nursery() as nursery:
        outcome = wait_in(nursery, p, result.last_offset + 1)
        await trio.testing.wait_all_tasks_blocked()
        p.make_follower(PartitionInfo(0, 2, 6, (1, 2, 3), (2, 3), 1))
    assert outcome == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    with pytest.raises(KafkaError) as exc:
        p.append(batch(), now_ms=NOW)
    assert exc.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_lagging_followers_leave_the_isr_and_rejoin(tmp_path: Path, autojump_clock: trio.testing.MockClock
                                                          ) -> None:
    async with trio.open_nursery() as nursery:
        p, channel = leader(tmp_path, nursery, min_isr=2)
        p.append(batch(2), now_ms=NOW)
        p.update_follower_fetch(2, 2, monotonic_ms())
        p.update_follower_fetch(3, 0, monotonic_ms())  # follower 3 stays behind
        assert p.high_watermark == 0
        result = p.append(batch(), now_ms=NOW)
        waiting = wait_in(nursery, p, result.last_offset + 1)
        await trio.sleep(LAG_MS / 2 / 1000)
        p.maybe_shrink_isr(monotonic_ms(), LAG_MS)
        assert channel.calls == []  # not lagging for long enough yet
        p.update_follower_fetch(2, 3, monotonic_ms())
        await trio.sleep(LAG_MS / 1000)
        p.maybe_shrink_isr(monotonic_ms(), LAG_MS)
        await trio.testing.wait_all_tasks_blocked()
        assert channel.calls == [(1, 2)]
        assert p.isr == (1, 2) and p.partition_epoch == 1
        assert p.high_watermark == 3  # follower 3 no longer holds it back
        assert waiting == [ErrorCode.NONE]
        # Follower 3 catches up to the high watermark: back in the ISR.
        p.update_follower_fetch(3, 3, monotonic_ms())
        await trio.testing.wait_all_tasks_blocked()
        assert channel.calls[-1] == (1, 2, 3) and p.isr == (1, 2, 3)


async def test_below_min_insync_after_append(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        p, channel = leader(tmp_path, nursery, isr=(1, 2), min_isr=2)
        result = p.append(batch(), now_ms=NOW)
        waiting = wait_in(nursery, p, result.last_offset + 1)
        await trio.sleep(2 * LAG_MS / 1000)
        p.maybe_shrink_isr(monotonic_ms(), LAG_MS)
        await trio.testing.wait_all_tasks_blocked()
        assert p.isr == (1,)
        assert waiting == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]


async def test_an_isr_change_in_flight_counts_the_maximal_isr(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        p, channel = leader(tmp_path, nursery, isr=(1, 2))
        channel.hold = trio.Event()
        p.append(batch(2), now_ms=NOW)
        p.update_follower_fetch(2, 2, monotonic_ms())
        assert p.high_watermark == 2
        p.update_follower_fetch(3, 2, monotonic_ms())  # caught up: expansion sent, not answered
        await trio.testing.wait_all_tasks_blocked()
        assert channel.calls == [(1, 2, 3)] and p.isr == (1, 2) and p.maximal_isr == (1, 2, 3)
        p.append(batch(), now_ms=NOW)
        p.update_follower_fetch(2, 3, monotonic_ms())
        assert p.high_watermark == 2  # replica 3 counts already (KIP-497)
        channel.hold.set()
        await trio.testing.wait_all_tasks_blocked()
        assert p.isr == (1, 2, 3) and p.pending_isr is None


async def test_a_refused_isr_change_waits_for_the_next_leader_and_isr(tmp_path: Path,
                                                                      autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        p, channel = leader(tmp_path, nursery, isr=(1, 2))
        channel.refuse = ErrorCode.INVALID_UPDATE_VERSION
        p.append(batch(), now_ms=NOW)
        await trio.sleep(2 * LAG_MS / 1000)
        p.maybe_shrink_isr(monotonic_ms(), LAG_MS)
        await trio.testing.wait_all_tasks_blocked()
        assert channel.calls == [(1,)] and p.isr == (1, 2) and p.isr_change_refused
        p.maybe_shrink_isr(monotonic_ms(), LAG_MS)
        await trio.testing.wait_all_tasks_blocked()
        assert channel.calls == [(1,)]  # not tried again
        channel.refuse = None
        p.make_leader(PartitionInfo(0, 1, 6, (1, 2, 3), (1, 2), 4), monotonic_ms())
        assert not p.isr_change_refused
