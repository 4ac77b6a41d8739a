"""The write-retry loop both mirror writers share (mirror/write_retry.py): what was written comes
back; a retriable refusal is retried with backoff; any other parks the partition (which says at
which source offset) and tries again slowly; a writer's own verdict (send again, give up) is
followed; a stop or a rewind ends the loop with nothing written. On trio's fake clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from broker.client import Backoff, TopicPartition
from broker.protocol.errors import ErrorCode
from mirror.partition import PartitionMirror
from mirror.write_retry import PARK_BACKOFF, Failed, Handled, write_with_retries

TP = TopicPartition("orders", 0)
BACKOFF = Backoff(initial_s=0.2, max_s=10.0, jitter=0.0)  # waits known to the fake clock
Outcome = int | Failed | Handled


def partition() -> PartitionMirror:
    return PartitionMirror(TP, TP, 0, 1000, 1 << 20)


def scripted(pm: PartitionMirror, answers: list[Outcome], *,
             before: Callable[[int], None] = lambda attempt: None) -> tuple[Callable[[], object], list[float]]:
    """A `send` that answers from `answers` in turn (setting the partition's error on a Failed,
    as a writer does), and the fake clock's time at each attempt."""
    times: list[float] = []

    async def send() -> Outcome:
        before(len(times))
        times.append(trio.current_time())
        answer = answers[len(times) - 1]
        if isinstance(answer, Failed):
            pm.error = f"{answer.code.name} writing to orders-0"
        return answer

    return send, times


async def test_what_was_written_comes_back_at_once(autojump_clock: object) -> None:
    pm = partition()
    send, times = scripted(pm, [42])
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=7) == 42
    assert len(times) == 1


async def test_a_retriable_refusal_is_retried_with_backoff(autojump_clock: object) -> None:
    pm = partition()
    refused = Failed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    send, times = scripted(pm, [refused, refused, 5])
    start = trio.current_time()
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=7) == 5
    waits = [b - a for a, b in zip([start, *times], times, strict=False)][1:]  # fake clock: exact
    assert waits == [pytest.approx(0.2), pytest.approx(0.4)]
    assert not pm.parked


async def test_any_other_refusal_parks_the_partition_and_tries_again_slowly(autojump_clock: object) -> None:
    pm = partition()
    send, times = scripted(pm, [Failed(ErrorCode.TOPIC_AUTHORIZATION_FAILED), 9])
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=7) == 9
    assert pm.parked
    assert pm.error == "parked at source offset 7: TOPIC_AUTHORIZATION_FAILED writing to orders-0"
    # Slowly: PARK_BACKOFF's first wait (a second, give or take its jitter), not the write backoff's.
    assert times[1] - times[0] >= PARK_BACKOFF.initial_s * (1 - PARK_BACKOFF.jitter)


async def test_the_writers_own_verdicts_are_followed(autojump_clock: object) -> None:
    pm = partition()
    send, times = scripted(pm, [Handled.SEND_AGAIN, 3])
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=0) == 3
    assert times[1] == times[0]  # sent again at once
    send, times = scripted(pm, [Handled.GIVE_UP, 3])
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=0) is None
    assert len(times) == 1


async def test_a_stop_or_a_rewind_ends_the_loop_with_nothing_written(autojump_clock: object) -> None:
    pm = partition()
    refused = Failed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    send, times = scripted(pm, [refused, refused], before=lambda attempt: pm.rewind(0) if attempt == 1 else None)
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=0) is None
    assert len(times) == 2  # the answer to the attempt begun after the rewind is not retried

    pm = partition()
    send, times = scripted(pm, [refused])
    pm.stop()
    assert await write_with_retries(pm, pm.epoch, send, backoff=BACKOFF, at_offset=0) is None
    assert times == []
