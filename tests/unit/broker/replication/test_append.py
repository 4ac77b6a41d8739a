"""The one append path (broker/replication/append.py): the checks each origin gets, their
order, and how acks=all is answered; and the follower's offsets moving through its Partition."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.controller.model import PartitionInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.replication.append import (
    AppendEntry,
    AppendOrigin,
    CopiedBatches,
    LeaderAppend,
    append_records,
    append_to_leader,
    wait_for_acks,
)
from broker.replication.partition import Partition, monotonic_ms
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000


def batch(n: int = 1, base_offset: int = 0) -> bytes:
    return build_batch([Record(None, b"v%d" % i, timestamp=NOW) for i in range(n)], base_offset=base_offset)


class Hosted:
    """The partitions a broker hosts, as the path sees them (its ReplicaManager)."""

    def __init__(self, *partitions: Partition) -> None:
        self.partitions = {(p.topic, p.index): p for p in partitions}

    def get(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found


def standalone(tmp_path: Path, topic: str = "t", *, min_isr: int = 1) -> Partition:
    """A partition leading an ISR of one, as on a standalone broker."""
    log = Log.open(tmp_path / f"{topic}-0", LogConfig(min_insync_replicas=min_isr), recovery_point=None)
    return Partition(topic, 0, log, leader_epoch=0, is_leader=True)


def replicated(tmp_path: Path) -> Partition:
    """A leader whose followers 2 and 3 are in the ISR and have fetched nothing yet."""
    log = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=None)
    p = Partition("t", 0, log, leader_epoch=0, is_leader=False, broker_id=1, replicas=(1, 2, 3), isr=(1, 2, 3))
    p.make_leader(PartitionInfo(0, 1, 5, (1, 2, 3), (1, 2, 3), 0), monotonic_ms())
    return p


def append(hosted: Hosted, entry: AppendEntry, origin: AppendOrigin, acks: int = -1, *,
           transactional: bool = False) -> LeaderAppend:
    return append_to_leader(hosted, entry, origin=origin, required_acks=acks, now_ms=NOW, transactional=transactional)


def refused(appended: LeaderAppend) -> ErrorCode | None:
    return appended.refused.code if appended.refused is not None else None


def copy(records: bytes | None, previous_end: int = 0, log_start: int = -1) -> CopiedBatches:
    return CopiedBatches(records, previous_end, log_start)


@pytest.mark.parametrize(("origin", "records", "code"), [
    (AppendOrigin.CLIENT, batch(), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (AppendOrigin.LINK, copy(batch()), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (AppendOrigin.COORDINATOR, batch(), None),
])
def test_only_the_coordinator_writes_an_internal_topic(tmp_path: Path, origin: AppendOrigin,
                                                      records: bytes | CopiedBatches, code: ErrorCode | None) -> None:
    offsets = standalone(tmp_path, "__consumer_offsets")
    appended = append(Hosted(offsets), AppendEntry("__consumer_offsets", 0, records), origin)
    assert refused(appended) == code
    assert offsets.log.log_end_offset == (1 if code is None else 0)


def test_the_checks_come_in_their_order(tmp_path: Path) -> None:
    """Acks, internal topics, the caller's check, then the partition: when several fail, the
    first answers (a transactional produce passes the path's own checks)."""

    def caller_refuses() -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a mirror topic")

    hosted = Hosted()  # hosts nothing: the lookup would answer UNKNOWN_TOPIC_OR_PARTITION
    internal = AppendEntry("__transaction_state", 0, batch(), check=caller_refuses)
    assert refused(append(hosted, internal, AppendOrigin.CLIENT, acks=2, transactional=True)) \
        == ErrorCode.INVALID_REQUIRED_ACKS
    assert refused(append(hosted, internal, AppendOrigin.CLIENT, transactional=True)) \
        == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert refused(append(hosted, internal, AppendOrigin.CLIENT)) == ErrorCode.INVALID_TOPIC_EXCEPTION
    normal = AppendEntry("t", 0, batch(), check=caller_refuses)
    assert refused(append(hosted, normal, AppendOrigin.CLIENT)) == ErrorCode.INVALID_REQUEST
    assert refused(append(hosted, AppendEntry("t", 0, batch()), AppendOrigin.CLIENT)) \
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_follower_refuses_and_says_which_partition_it_found(tmp_path: Path) -> None:
    p = standalone(tmp_path)
    p.make_follower(PartitionInfo(0, 2, 1, (1, 2), (1, 2), 1))
    appended = append(Hosted(p), AppendEntry("t", 0, batch()), AppendOrigin.CLIENT)
    assert refused(appended) == ErrorCode.NOT_LEADER_OR_FOLLOWER and appended.partition is p


@pytest.mark.parametrize("origin", [AppendOrigin.CLIENT, AppendOrigin.COORDINATOR, AppendOrigin.LINK])
def test_acks_all_below_min_insync_writes_nothing(tmp_path: Path, origin: AppendOrigin) -> None:
    p = standalone(tmp_path, min_isr=2)
    records = copy(batch()) if origin is AppendOrigin.LINK else batch()
    appended = append(Hosted(p), AppendEntry("t", 0, records), origin)
    assert refused(appended) == ErrorCode.NOT_ENOUGH_REPLICAS and p.log.log_end_offset == 0
    assert appended.refused is not None and "min.insync.replicas is 2" in appended.refused.message


def test_acks_one_does_not_ask_for_min_insync(tmp_path: Path) -> None:
    p = standalone(tmp_path, min_isr=2)
    appended = append(Hosted(p), AppendEntry("t", 0, batch(2)), AppendOrigin.CLIENT, acks=1)
    assert refused(appended) is None and appended.result is not None and appended.result.last_offset == 1


def test_a_link_keeps_the_source_offsets_and_must_carry_something(tmp_path: Path) -> None:
    p = standalone(tmp_path)
    hosted = Hosted(p)
    appended = append(hosted, AppendEntry("t", 0, copy(batch(2, base_offset=0))), AppendOrigin.LINK)
    assert refused(appended) is None and appended.required_offset == 2 == p.log.log_end_offset
    retried = append(hosted, AppendEntry("t", 0, copy(batch(2, base_offset=0))), AppendOrigin.LINK)
    assert refused(retried) is None and retried.result is None and retried.required_offset == 2
    empty = append(hosted, AppendEntry("t", 0, copy(None)), AppendOrigin.LINK)
    assert refused(empty) == ErrorCode.CORRUPT_MESSAGE
    past_the_end = append(hosted, AppendEntry("t", 0, copy(None, log_start=3)), AppendOrigin.LINK)
    assert refused(past_the_end) == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(TypeError):
        append(hosted, AppendEntry("t", 0, batch()), AppendOrigin.LINK)
    with pytest.raises(TypeError):
        append(hosted, AppendEntry("t", 0, copy(batch())), AppendOrigin.CLIENT)


async def test_an_isr_of_one_acknowledges_at_once(tmp_path: Path) -> None:
    p = standalone(tmp_path)
    [appended] = await append_records(Hosted(p), [AppendEntry("t", 0, batch(3))], origin=AppendOrigin.CLIENT,
                                      required_acks=-1, timeout_ms=0)
    assert appended.error_code == ErrorCode.NONE and p.high_watermark == 3


async def test_acks_all_waits_for_the_isr_within_the_timeout(tmp_path: Path,
                                                             autojump_clock: trio.testing.MockClock) -> None:
    p = replicated(tmp_path)
    hosted = Hosted(p)
    [late] = await append_records(hosted, [AppendEntry("t", 0, batch())], origin=AppendOrigin.CLIENT,
                                  required_acks=-1, timeout_ms=1000)
    assert late.refused is None and late.acks == ErrorCode.REQUEST_TIMED_OUT
    assert late.result is not None and late.result.first_offset == 0  # in the leader's log all the same

    appended = append(hosted, AppendEntry("t", 0, batch()), AppendOrigin.CLIENT)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: wait_for_acks([appended], required_acks=-1, timeout_ms=60_000))
        await trio.testing.wait_all_tasks_blocked()
        assert appended.error_code == ErrorCode.REQUEST_TIMED_OUT  # until the ISR answers
        p.update_follower_fetch(2, 2, monotonic_ms())
        p.update_follower_fetch(3, 2, monotonic_ms())
    assert appended.acks == ErrorCode.NONE


async def test_acks_one_never_waits_for_the_isr(tmp_path: Path) -> None:
    p = replicated(tmp_path)
    [appended] = await append_records(Hosted(p), [AppendEntry("t", 0, batch())], origin=AppendOrigin.CLIENT,
                                      required_acks=1, timeout_ms=60_000)
    assert appended.error_code == ErrorCode.NONE and p.high_watermark == 0


def test_a_follower_follows_the_leaders_offsets_through_its_partition(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=None)
    p = Partition("t", 0, log, leader_epoch=1, is_leader=False, broker_id=2, leader_id=1)
    log.append_as_follower(batch(5), now_ms=NOW)
    p.follow_leader_offsets(9, 0)
    assert p.high_watermark == 5  # capped by its own log end
    p.follow_leader_offsets(3, 0)
    assert p.high_watermark == 5  # never backwards
    p.follow_leader_offsets(5, 2)
    assert log.log_start_offset == 2  # the leader's retention moved it
    p.follow_leader_offsets(5, 7)
    assert log.log_start_offset == 2  # not past what the high watermark covers
