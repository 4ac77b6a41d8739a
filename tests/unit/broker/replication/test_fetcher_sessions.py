"""The follower's side of a fetch session (KIP-227), against a fake leader connection: a full
fetch opens it, later fetches name only what changed and forget what stopped being fetchable,
and a session error (evicted, or the leader restarted) starts over with a full fetch."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from broker.controller.model import PartitionInfo
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import FetchRequest, FetchResponse
from broker.protocol.records import Record, build_batch
from broker.replication.fetcher import Fetcher, FetcherSettings
from broker.replication.partition import Partition
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000
TOPIC_ID = uuid.uuid4()


class ScriptedLeader:
    """Answers each Fetch with the next scripted response; keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[FetchRequest] = []
        self.answers: list[FetchResponse] = []

    async def request(self, msg: Any, **_: Any) -> FetchResponse:
        assert isinstance(msg, FetchRequest)
        self.requests.append(msg)
        return self.answers.pop(0)


def follower_of(tmp_path: Path, index: int) -> Partition:
    log = Log.open(tmp_path / f"t-{index}", LogConfig(), recovery_point=None)
    p = Partition("t", index, log, leader_epoch=3, is_leader=False, broker_id=2, replicas=(1, 2), topic_id=TOPIC_ID)
    p.make_follower(PartitionInfo(index, 1, 3, (1, 2), (1, 2)))
    return p


def answer(session_id: int, parts: Sequence[FetchResponse.PartitionData] = (),
           error: ErrorCode = ErrorCode.NONE) -> FetchResponse:
    topics = [FetchResponse.FetchableTopicResponse(topic="t", topic_id=TOPIC_ID, partitions=list(parts))]
    if not parts:
        topics = []
    return FetchResponse(error_code=error, session_id=session_id, responses=topics)


def named(request: FetchRequest) -> list[tuple[int, int]]:
    return [(p.partition, p.fetch_offset) for t in request.topics for p in t.partitions]


def forgotten(request: FetchRequest) -> list[int]:
    return [i for t in request.forgotten_topics_data for i in t.partitions]


async def test_a_session_names_what_changed_and_starts_over_when_evicted(tmp_path: Path) -> None:
    fetcher = Fetcher(FetcherSettings(2, backoff_ms=60_000), 1, "127.0.0.1", 1)
    for i in range(3):
        fetcher.add(follower_of(tmp_path, i))
    leader = ScriptedLeader()
    conn: Any = leader
    with trio.fail_after(5):
        await fetcher._one_round(conn)  # empty logs: no truncation needed, nothing asked
        leader.answers.append(answer(77))
        await fetcher._one_round(conn)
        full = leader.requests[-1]
        assert (full.session_id, full.session_epoch) == (0, 0)
        assert sorted(named(full)) == [(0, 0), (1, 0), (2, 0)]

        # Nothing changed: the incremental fetch names nothing; the leader answers that its
        # session is gone (evicted): the next fetch is full again, every partition in it.
        leader.answers.append(answer(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
        await fetcher._one_round(conn)
        assert (leader.requests[-1].session_id, leader.requests[-1].session_epoch) == (77, 1)
        assert named(leader.requests[-1]) == []
        leader.answers.append(answer(88))
        await fetcher._one_round(conn)
        again = leader.requests[-1]
        assert (again.session_id, again.session_epoch) == (0, 0)
        assert sorted(named(again)) == [(0, 0), (1, 0), (2, 0)]

        # Records for partition 1, an error for partition 2: the next fetch names partition 1 at
        # its new offset and forgets partition 2 (backing off), nothing about partition 0.
        records = build_batch([Record(None, b"x", timestamp=NOW)])
        leader.answers.append(answer(88, [
            FetchResponse.PartitionData(partition_index=1, high_watermark=1, records=records),
            FetchResponse.PartitionData(partition_index=2, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)]))
        await fetcher._one_round(conn)
        assert (leader.requests[-1].session_id, leader.requests[-1].session_epoch) == (88, 1)
        leader.answers.append(answer(88))
        await fetcher._one_round(conn)
        moved = leader.requests[-1]
        assert (moved.session_id, moved.session_epoch) == (88, 2)
        assert named(moved) == [(1, 1)] and forgotten(moved) == [2]
        assert moved.forgotten_topics_data[0].topic_id == TOPIC_ID

        # A stale epoch: start over with a full fetch that closes the old session (its id sent).
        leader.answers.append(answer(0, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH))
        await fetcher._one_round(conn)
        leader.answers.append(answer(99))
        await fetcher._one_round(conn)
        closing = leader.requests[-1]
        assert (closing.session_id, closing.session_epoch) == (88, 0)
        assert sorted(named(closing)) == [(0, 0), (1, 1)]  # partition 2 still backs off
