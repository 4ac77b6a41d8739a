"""The leader's fetch session cache (KIP-227): epochs, slots and eviction, the partitions a session
watches, and the follower's caught-up time kept by its session."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

from broker.controller.model import PartitionInfo
from broker.protocol.messages import FetchRequest
from broker.protocol.records import Record, build_batch
from broker.replication.partition import Partition
from broker.server.fetch_sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    key_of,
    next_epoch,
)
from broker.storage import Log, LogConfig

NOW = 1_000_000
TOPIC_ID = uuid.uuid4()


def cached(topic: str, index: int, offset: int = 0) -> CachedPartition:
    return CachedPartition(topic, TOPIC_ID, FetchRequest.FetchPartition(partition=index, fetch_offset=offset))


def filled(cache: FetchSessionCache, replica_id: int, size: int, now: int = NOW) -> FetchSession:
    session = cache.create(now, replica_id, size)
    assert session is not None
    for i in range(size):
        session.put(cached("t", i), None)
    return session


def leader(tmp_path: Path, index: int = 0) -> Partition:
    log = Log.open(tmp_path / f"t-{index}", LogConfig(), recovery_point=None)  # type: ignore[call-arg]
    p = Partition("t", index, log, leader_epoch=0, is_leader=False, broker_id=1, replicas=(1, 2, 3), isr=(1, 2, 3))
    p.make_leader(PartitionInfo(index, 1, 5, (1, 2, 3), (1, 2, 3), 0), 0)
    return p


def batch() -> bytes:
    return build_batch([Record(None, b"v", timestamp=NOW)])


@pytest.mark.parametrize(("epoch", "after"), [(0, 1), (1, 2), (2**31 - 1, 1), (FINAL_EPOCH, FINAL_EPOCH), (-7, -1)])
def test_the_epoch_moves_on_and_wraps_to_one_as_kafkas(epoch: int, after: int) -> None:
    assert next_epoch(epoch) == after


def test_sessions_take_slots_and_ids_are_unique_and_nonzero() -> None:
    cache = FetchSessionCache(slots=3, max_partitions=1000)
    sessions = [cache.create(NOW, -1, 1) for _ in range(3)]
    assert all(s is not None and s.id > 0 for s in sessions)
    assert len({s.id for s in sessions if s is not None}) == 3
    # Full, all young and as strong: the fourth gets none (session id 0 for its client).
    assert cache.create(NOW + 1, -1, 1) is None
    assert len(cache) == 3


def test_no_slots_means_no_sessions() -> None:
    assert FetchSessionCache(slots=0, max_partitions=1000).create(NOW, 2, 10) is None


def test_a_session_unused_past_the_eviction_time_goes_first() -> None:
    cache = FetchSessionCache(slots=2, max_partitions=1000)
    old = filled(cache, 2, 50)  # a follower's, large: only staleness can evict it
    young = filled(cache, -1, 1, now=NOW + EVICTION_MS)
    new = cache.create(NOW + EVICTION_MS + 1, -1, 1)
    assert new is not None
    assert cache.get(old.id) is None and cache.get(young.id) is young
    assert not old.partitions  # closed: it watches nothing any more
    assert cache.evictions == 1


def test_a_follower_evicts_a_young_consumer_session_but_a_consumer_does_not() -> None:
    cache = FetchSessionCache(slots=1, max_partitions=1000)
    consumer = filled(cache, -1, 5)
    assert cache.create(NOW + 1, -1, 100) is None  # a consumer: the young session is protected
    follower = cache.create(NOW + 1, 3, 1)  # privileged: may evict an unprivileged session at once
    assert follower is not None
    assert cache.get(consumer.id) is None
    assert cache.create(NOW + 2, 2, 100) is None  # a young follower session is protected from all


def test_after_the_eviction_time_a_larger_session_evicts_the_weakest() -> None:
    cache = FetchSessionCache(slots=2, max_partitions=1000)
    small = filled(cache, -1, 2)
    large = filled(cache, -1, 10)
    later = NOW + EVICTION_MS + 1
    small.last_used_ms = large.last_used_ms = later  # in use: not stale, but settled
    assert cache.create(later, -1, 2) is None  # not stronger than the weakest (same size)
    new = cache.create(later, -1, 3)
    assert new is not None
    assert cache.get(small.id) is None and cache.get(large.id) is large


def test_the_cache_bounds_the_partitions_of_all_sessions_together() -> None:
    cache = FetchSessionCache(slots=10, max_partitions=100)
    filled(cache, 2, 80)
    assert cache.create(NOW, 3, 30) is None  # 110 > 100 and nothing may be evicted
    assert cache.create(NOW, 3, 20) is not None
    assert cache.total_partitions() == 80


def test_forgetting_and_updating_partitions_by_key() -> None:
    cache = FetchSessionCache(slots=1, max_partitions=1000)
    session = filled(cache, -1, 3)
    assert session.unknown == 3
    first = session.partitions[("t", 0)]
    first.high_watermark, first.log_start_offset = 42, 7
    session.pending.clear()
    session.put(cached("t", 0, offset=5), None)
    updated = session.partitions[("t", 0)]
    assert updated.request.fetch_offset == 5
    assert (updated.high_watermark, updated.log_start_offset) == (42, 7)  # what the client was answered
    assert list(session.pending) == [("t", 0)]
    session.forget(("t", 1))
    assert set(session.partitions) == {("t", 0), ("t", 2)} and session.unknown == 2
    # A topic unknown by id has no name: keyed by its id, never colliding with a real name.
    other = uuid.uuid4()
    assert key_of("", other, 0) != key_of("", TOPIC_ID, 0)
    assert key_of("", other, 0)[0] not in ("", "t")


async def test_a_session_hears_of_appends_high_watermarks_and_role_changes(tmp_path: Path) -> None:
    p, quiet = leader(tmp_path, 0), leader(tmp_path, 1)
    cache = FetchSessionCache(slots=1, max_partitions=1000)
    session = cache.create(NOW, -1, 2)
    assert session is not None
    session.put(cached("t", 0), p, pending=False)
    session.put(cached("t", 1), quiet, pending=False)
    assert not session.pending

    woken = trio.Event()

    async def long_poll() -> None:
        await session.wait_changed()
        woken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await trio.testing.wait_all_tasks_blocked()
        p.append(batch(), now_ms=NOW)
        await woken.wait()
    assert list(session.pending) == [("t", 0)]  # only the partition that changed

    session.pending.clear()
    quiet.make_offline()
    assert list(session.pending) == [("t", 1)]

    # A partition replaced under the same name (a topic made again): the old one is not heard.
    session.pending.clear()
    session.watch(session.partitions[("t", 0)], None)
    p.append(batch(), now_ms=NOW)
    assert not session.pending
    cache.remove(session.id)
    quiet.make_leader(PartitionInfo(1, 1, 6, (1, 2, 3), (1, 2, 3), 0), 0)
    assert not session.pending  # closed sessions watch nothing


async def test_a_follower_idle_in_its_session_stays_caught_up(tmp_path: Path) -> None:
    """The follower names an idle partition no more, yet it fetches all along through its
    session: when an append moves the log end, it was caught up until its latest request."""
    p = leader(tmp_path)
    p.append(batch(), now_ms=NOW)
    p.update_follower_fetch(2, 1, now_ms=1_000)  # named in its full fetch: at the log end
    p.update_follower_fetch(3, 1, now_ms=1_000)
    cache = FetchSessionCache(slots=2, max_partitions=1000)
    session = cache.create(1_000, 2, 1)
    assert session is not None
    session.put(cached("t", 0, offset=1), p)
    session.last_used_ms = 50_000  # incremental fetches since, none naming the partition
    p.append(batch(), now_ms=NOW)  # the log end moves away from both followers
    assert p.followers[2].last_caught_up_ms == 50_000
    assert p.followers[3].last_caught_up_ms == 1_000  # no session: its own fetches must say it
    assert p.out_of_sync_replicas(60_000, max_lag_ms=30_000) == [3]


def test_the_cache_counts_partitions_as_sessions_grow_and_shrink() -> None:
    cache = FetchSessionCache(slots=3, max_partitions=5)
    a = filled(cache, -1, 2)
    b = filled(cache, -1, 2)
    assert cache.total_partitions() == 4 and not cache.over_budget()
    a.put(cached("t", 0, offset=9), None)  # an update: no new entry
    assert cache.total_partitions() == 4
    a.put(cached("t", 7), None)
    b.put(cached("t", 8), None)  # grown by incremental fetches past the bound
    assert cache.total_partitions() == 6 and cache.over_budget()
    cache.remove(b.id)
    a.forget(("t", 7))
    assert cache.total_partitions() == 2 and not cache.over_budget()
