"""broker.retry: the one retry loop (driven by trio's autojump clock: no real sleeps)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from broker.retry import Backoff, retry, worth_reporting

STEADY = Backoff(initial_s=1.0, max_s=4.0, jitter=0.0)


class Flaky:
    """Fails `failures` times with `error`, then returns "done"; notes the trio time of each call."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.left = failures
        self.error = error or ConnectionError("down")
        self.calls: list[float] = []

    async def __call__(self) -> str:
        self.calls.append(trio.current_time())
        if self.left > 0:
            self.left -= 1
            raise self.error
        return "done"


async def test_pauses_double_up_to_the_cap_between_retriable_failures(
        autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(5)
    start = trio.current_time()
    assert await retry(attempt, retriable=ConnectionError, backoff=STEADY, deadline=math.inf) == "done"
    gaps = [b - a for a, b in zip([start, *attempt.calls], attempt.calls, strict=False)]
    assert gaps == [0.0, 1.0, 2.0, 4.0, 4.0, 4.0]


async def test_max_pause_caps_below_the_backoff(autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(3)
    await retry(attempt, retriable=ConnectionError, backoff=STEADY, deadline=math.inf, max_pause_s=1.5)
    assert [b - a for a, b in zip(attempt.calls, attempt.calls[1:], strict=False)] == [1.0, 1.5, 1.5]


async def test_another_error_is_raised_at_once(autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(1, KeyError("bug"))
    with pytest.raises(KeyError):
        await retry(attempt, retriable=ConnectionError, backoff=STEADY, deadline=math.inf)
    assert len(attempt.calls) == 1


@pytest.mark.parametrize("retriable", [ConnectionError, (KeyError, ConnectionError),
                                       lambda exc: "down" in str(exc)])
async def test_retriable_is_a_class_a_tuple_or_a_test(autojump_clock: trio.testing.MockClock,
                                                      retriable: object) -> None:
    attempt = Flaky(2)
    assert await retry(attempt, retriable=retriable, backoff=STEADY, deadline=math.inf) == "done"  # type: ignore[arg-type]
    assert len(attempt.calls) == 3


async def test_the_hook_sees_every_failure_in_order(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[tuple[str, int]] = []
    await retry(Flaky(3), retriable=ConnectionError, backoff=STEADY, deadline=math.inf,
                on_failure=lambda exc, n: seen.append((str(exc), n)))
    assert seen == [("down", 1), ("down", 2), ("down", 3)]


async def test_gives_up_with_the_last_error_rather_than_pause_past_the_deadline(
        autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(100)
    seen: list[int] = []
    deadline = trio.current_time() + 5.0
    with pytest.raises(ConnectionError, match="down"):
        await retry(attempt, retriable=ConnectionError, backoff=STEADY, deadline=deadline,
                    on_failure=lambda exc, n: seen.append(n))
    # Attempts at 0, 1 and 3; the pause of 4 s after the third would end past 5 s.
    assert [t - attempt.calls[0] for t in attempt.calls] == [0.0, 1.0, 3.0]
    assert seen == [1, 2, 3]  # the last failure is reported too
    assert trio.current_time() < deadline


async def test_takes_its_deadline_from_the_enclosing_cancel_scope(autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(100)
    with trio.fail_after(5.0):
        with pytest.raises(ConnectionError):  # the real error, not TooSlowError
            await retry(attempt, retriable=ConnectionError, backoff=STEADY)
    assert len(attempt.calls) == 3


async def test_an_infinite_deadline_retries_until_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    attempt = Flaky(10**9)
    with trio.move_on_after(100.0) as scope:
        await retry(attempt, retriable=ConnectionError, backoff=STEADY, deadline=math.inf)
    assert scope.cancelled_caught
    assert 20 <= len(attempt.calls) <= 30  # about 100 s / 4 s


def test_worth_reporting_keeps_a_long_outage_to_a_few_lines() -> None:
    assert [n for n in range(1, 1001) if worth_reporting(n)] == [1, 10, *range(100, 1001, 100)]
    assert [n for n in range(1, 1001) if worth_reporting(n, first=3)] == [3, 30, 300, 600, 900]
