"""Retrying with capped exponential backoff: one loop for the client, the mirror and the tools.

    await retry(lambda: admin.list_topics(client), retriable=(ClientError, KafkaError),
                backoff=Backoff(0.2, 10.0), on_failure=report, deadline=math.inf)

`Backoff` says how long to wait after n failures in a row; `retry` awaits an attempt until it
returns, waiting between failures that its `retriable` test accepts and raising any other error
at once; `worth_reporting` keeps a long outage to a few log lines.

Why not a library: stamina (over tenacity) runs on trio, but measures its time limit by
time.monotonic rather than trio's clock (so neither a cancel scope's deadline nor trio's
MockClock in tests governs it), reports retries through process-wide hooks rather than per call
(the mirror shows each loop's last error in its status), and adds its jitter in seconds rather
than as a share of the delay, as Kafka's reconnect backoff does.

It sits beside `broker.client`, not in it: importing anything under `broker.client` loads the
whole client and its generated codec (about a second), which the launcher's supervisor and the
WAN emulator, that use only this, must not pay at every start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import trio

__all__ = ["Backoff", "retry", "worth_reporting"]

T = TypeVar("T")

Retriable = type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect backoff: `initial_s` after the first failure, doubling up to `max_s`, each
    delay multiplied by a random factor in [1 - jitter, 1 + jitter] so that many clients do
    not retry in step (Kafka: reconnect.backoff.ms, reconnect.backoff.max.ms)."""

    initial_s: float = 0.05
    max_s: float = 1.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (0 < self.initial_s <= self.max_s) or not 0 <= self.jitter < 1:
            raise ValueError(f"bad backoff {self}: need 0 < initial_s <= max_s and 0 <= jitter < 1")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """The wait after `failures` consecutive failures (0 failures: no wait)."""
        if failures <= 0:
            return 0.0
        # Capping the exponent first keeps 2**n finite however long a peer stays down.
        base = min(self.max_s, self.initial_s * 2.0 ** min(failures - 1, 62))
        factor = 1.0 + self.jitter * (2.0 * (rng or random).random() - 1.0)
        return base * factor


def worth_reporting(failures: int, first: int = 1) -> bool:
    """Whether failure number `failures` in a row deserves a log line: the `first`, ten times
    that, then every hundred times that, so an outage of hours leaves a few lines, not
    thousands, and still shows it goes on."""
    return failures in (first, 10 * first) or failures % (100 * first) == 0


async def retry(
    attempt: Callable[[], Awaitable[T]],
    *,
    retriable: Retriable,
    backoff: Backoff,
    on_failure: Callable[[Exception, int], object] | None = None,
    deadline: float | None = None,
    max_pause_s: float = math.inf,
    rng: random.Random | None = None,
) -> T:
    """Await `attempt()` until it returns, and return what it returned.

    An exception `retriable` accepts (an exception class, a tuple of them, or a predicate)
    counts as the n-th failure in a row and is followed by a pause of `backoff.delay(n)`, at
    most `max_pause_s`; any other exception is raised at once. `on_failure(error, n)` runs
    after each retriable failure, before the pause (or the giving up): the place to log, count,
    show the error in a status, or mark cached metadata stale.

    Gives up, raising the last error, when a pause would end at or past `deadline` (trio time),
    rather than sleeping into a cancellation. `deadline` None takes the enclosing cancel scope's
    (`trio.current_effective_deadline()`), so under `trio.fail_after` the caller gets the real
    error, not TooSlowError; `math.inf` retries until cancelled.
    """
    if deadline is None:
        deadline = trio.current_effective_deadline()
    accepts = _predicate(retriable)
    failures = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not accepts(exc):
                raise
            failures += 1
            if on_failure is not None:
                on_failure(exc, failures)
            pause = min(max_pause_s, backoff.delay(failures, rng))
            if trio.current_time() + pause >= deadline:
                raise
        # Outside the handler: a cancellation during the pause must not carry this error along.
        await trio.sleep(pause)


def _predicate(retriable: Retriable) -> Callable[[Exception], bool]:
    if isinstance(retriable, tuple) or (isinstance(retriable, type) and issubclass(retriable, BaseException)):
        kinds = retriable
        return lambda exc: isinstance(exc, kinds)
    return cast(Callable[[Exception], bool], retriable)  # an exception class is callable too
