"""KIP-279 truncation by the fetcher, against a leader log answered by a fake connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from broker.controller.model import PartitionInfo
from broker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from broker.protocol.records import Record, build_batch
from broker.replication.fetcher import Fetcher, FetcherSettings
from broker.replication.partition import Partition
from broker.storage import Log, LogConfig

NOW = 1_700_000_000_000


class LeaderAnswers:
    """Answers OffsetForLeaderEpoch from `leader` as the handler does; records what was asked."""

    def __init__(self, leader: Log) -> None:
        self.leader = leader
        self.asked: list[int] = []

    async def request(self, msg: Any, **_: Any) -> OffsetForLeaderEpochResponse:
        assert isinstance(msg, OffsetForLeaderEpochRequest)
        out = []
        for topic in msg.topics:
            parts = []
            for p in topic.partitions:
                self.asked.append(p.leader_epoch)
                epoch, end = self.leader.end_offset_for_epoch(p.leader_epoch)
                parts.append(OffsetForLeaderEpochResponse.EpochEndOffset(partition=p.partition, leader_epoch=epoch,
                                                                         end_offset=end))
            out.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=parts))
        return OffsetForLeaderEpochResponse(topics=out)


def log_with(path: Path, epochs: list[int]) -> Log:
    log = Log.open(path, LogConfig(), recovery_point=None)
    for i, epoch in enumerate(epochs):
        log.append_as_leader(build_batch([Record(None, b"%d-%d" % (epoch, i))]), leader_epoch=epoch, now_ms=NOW)
    return log


async def truncate(follower: Log, leader: Log) -> LeaderAnswers:
    partition = Partition("t", 0, follower, leader_epoch=9, is_leader=False, broker_id=2, replicas=(1, 2))
    partition.make_follower(PartitionInfo(0, 1, 9, (1, 2), (1, 2)))
    fetcher = Fetcher(FetcherSettings(2), 1, "127.0.0.1", 1)
    fetcher.add(partition)
    conn = LeaderAnswers(leader)
    with trio.fail_after(5):
        for _ in range(5):  # rounds until truncation is complete
            following = fetcher._partitions[("t", 0)]
            if not following.needs_truncation:
                break
            await fetcher._truncate(conn, [following])  # type: ignore[arg-type]
    assert not fetcher._partitions[("t", 0)].needs_truncation
    return conn


async def test_follower_with_an_epoch_the_leader_never_had_asks_again(tmp_path: Path) -> None:
    # Epochs: both wrote offsets 0-1 in epoch 0. The follower then led epoch 2 alone (offsets
    # 2-3, never replicated); the leader led epoch 1 (offsets 2-4) and epoch 3 (offset 5).
    follower = log_with(tmp_path / "f" / "t-0", [0, 0, 2, 2])
    leader = log_with(tmp_path / "l" / "t-0", [0, 0, 1, 1, 1, 3])
    conn = await truncate(follower, leader)
    # Asked for epoch 2: the leader answered epoch 1 (ends at 5), which the follower does not
    # hold: it cut to its own end of epoch 0 (offset 2) and asked again for epoch 0.
    assert conn.asked == [2, 0]
    assert follower.log_end_offset == 2 and follower.epochs.entries == [(0, 0)]


async def test_a_follower_ahead_in_the_same_epoch_is_cut_at_the_leaders_end(tmp_path: Path) -> None:
    follower = log_with(tmp_path / "f" / "t-0", [0, 0, 1, 1, 1])
    leader = log_with(tmp_path / "l" / "t-0", [0, 0, 1, 2])
    conn = await truncate(follower, leader)
    assert conn.asked == [1] and follower.log_end_offset == 3
    assert follower.epochs.entries == [(0, 0), (1, 2)]


async def test_a_follower_behind_is_not_cut(tmp_path: Path) -> None:
    follower = log_with(tmp_path / "f" / "t-0", [0, 0])
    leader = log_with(tmp_path / "l" / "t-0", [0, 0, 0, 1])
    conn = await truncate(follower, leader)
    assert conn.asked == [0] and follower.log_end_offset == 2
