"""A fetch lane (mirror/fetcher.py) after a partition's leader died: the partition's fetches fail
until the source elects another leader (an Apache Kafka source fences a dead broker after
broker.session.timeout.ms, 9 s by default), and the lane asks again at most Kafka's consumer's
retry.backoff.max.ms (1 s) apart, so the copy resumes within about a second of the election
rather than after a backoff grown through the outage. On trio's fake clock."""

from __future__ import annotations

import pytest
import trio

import mirror.fetcher
from broker.client import TopicPartition
from broker.client.fetch import FetchedPartition
from broker.protocol.errors import ErrorCode
from mirror.fetcher import FETCH_RETRY, FetchLane, FetchSettings
from mirror.partition import PartitionMirror

TP = TopicPartition("orders", 0)
ELECTED_AT = 9.0  # fake seconds after the leader died
MAX_WAIT_S = 0.5  # a broker's answer with nothing new comes after max.wait.ms


async def test_a_partition_is_fetched_again_within_a_second_of_its_new_leader(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    pm = PartitionMirror(TP, TP, 100, 1000, 1 << 20)
    asked: list[tuple[float, int]] = []

    async def leader_dead_then_elected(client: object, positions: dict[TopicPartition, int],
                                       **settings: object) -> dict[TopicPartition, FetchedPartition]:
        now = trio.current_time()
        if now < ELECTED_AT:  # refused at once: the dead leader, then the old one that lost it
            error = ErrorCode.NETWORK_EXCEPTION if now < ELECTED_AT / 2 else ErrorCode.NOT_LEADER_OR_FOLLOWER
            asked.append((now, error))
            return {TP: FetchedPartition(TP.topic, TP.partition, error)}
        asked.append((now, ErrorCode.NONE))
        await trio.sleep(MAX_WAIT_S)
        return {TP: FetchedPartition(TP.topic, TP.partition, ErrorCode.NONE, high_watermark=100, log_start_offset=0)}

    monkeypatch.setattr(mirror.fetcher, "fetch", leader_dead_then_elected)
    async with trio.open_nursery() as nursery:
        lane = FetchLane(client=None, settings=FetchSettings(),  # type: ignore[arg-type]  # never used
                         on_idle=lambda _: nursery.cancel_scope.cancel())
        lane.add(pm)
        nursery.start_soon(lane.run)

    answered = next(at for at, error in asked if error == ErrorCode.NONE)
    assert ELECTED_AT <= answered <= ELECTED_AT + FETCH_RETRY.max_s * (1 + FETCH_RETRY.jitter)
    gaps = [b - a for (a, _), (b, _) in zip(asked, asked[1:], strict=False)]
    assert max(gaps) <= FETCH_RETRY.max_s * (1 + FETCH_RETRY.jitter)
    assert len(asked) < 20, asked  # backed off all the same: no busy loop on a dead leader
    assert pm.fetch_failures == 0 and pm.error is None
