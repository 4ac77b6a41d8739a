"""Deadlines as cancel scopes: the caller bounds a call, the client reads the bound.

A caller bounds a client call with `trio.fail_after` / `trio.move_on_after`; nothing takes a
timeout argument. Inside, two things need the deadline as a number:

- a timeout that goes on the wire (a request's `timeout_ms`, a fetch's `max_wait_ms`):
  `wire_timeout_ms` cuts the wanted one (the default when the caller set no deadline) to the
  milliseconds left until the enclosing deadline;
- an error that names what timed out: `timeout_error` runs a request (or a connect) and, when
  the deadline passes inside it, raises the client's own error naming the operation and the
  broker's address in place of the bare cancellation. So under `trio.fail_after` the caller
  gets `RequestTimeout("METADATA v12 to 10.0.0.1:9092: no answer within 5s")`, not
  `TooSlowError`, as `broker.retry.retry` gives the real error rather than TooSlowError. That
  holds wherever in the body the deadline passes, inside a nursery too (trio's open_tcp_stream
  connects in one, and hands the cancellation on wrapped in an exception group); a cancellation
  that is not a deadline (a nursery shutting down), or a group that also holds a real failure,
  passes unchanged.

A call with no enclosing deadline still ends: `timeout_error(..., default_s=...)` sets one
(Kafka's request.timeout.ms, the client's `request_timeout_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

from broker.tasks import leaves

__all__ = ["timeout_error", "wire_timeout_ms"]

_INT32_MAX = 2**31 - 1


def wire_timeout_ms(wanted_ms: int) -> int:
    """A timeout for a request to carry to the broker (its `timeout_ms`, a fetch's
    `max_wait_ms`): `wanted_ms`, cut to what is left of the enclosing cancel scope's deadline,
    so the broker never holds a request longer than its caller waits for it. `wanted_ms` as it
    is when no scope sets a deadline. Never negative, never above what an int32 field holds."""
    left_ms = (trio.current_effective_deadline() - trio.current_time()) * 1000  # inf: no deadline
    return int(max(0.0, min(float(wanted_ms), float(_INT32_MAX), left_ms)))


@contextmanager
def timeout_error(make_error: Callable[[float], Exception], *, default_s: float | None = None,
                  at_most_s: float | None = None) -> Iterator[trio.CancelScope]:
    """Run the body until the enclosing deadline; when it passes inside the body, raise
    `make_error(seconds the body had)` instead of the cancellation.

    `default_s` sets a deadline that far ahead when no enclosing scope has one; `at_most_s`
    bounds the body that long even when the enclosing deadline is further away (a request's
    own timeout). A cancellation that is not a deadline's propagates unchanged. Yields the
    body's cancel scope (its `deadline` is the one in force).
    """
    now = trio.current_time()
    deadline = trio.current_effective_deadline()
    if deadline == math.inf and default_s is not None:
        deadline = now + default_s
    if at_most_s is not None:
        deadline = min(deadline, now + at_most_s)
    try:
        with trio.CancelScope(deadline=deadline) as scope:
            yield scope
    except (trio.Cancelled, BaseExceptionGroup) as exc:
        # An enclosing scope with the same (or an earlier) deadline takes the cancellation
        # from this one (trio delivers it to the outermost cancelled scope): the deadline has
        # still passed in the body, and the caller is owed the error that says where. The
        # cancellation comes wrapped in a group when a nursery in the body saw it (trio's
        # open_tcp_stream runs its connect attempts in one), and is the deadline's all the same.
        if not _is_deadline(exc) or trio.current_time() < deadline:
            raise
        raise make_error(deadline - now) from None
    if scope.cancelled_caught:
        raise make_error(deadline - now)


def _is_deadline(exc: BaseException) -> bool:
    """Whether `exc` is only cancellation (a Cancelled, or a group, nested or not, of Cancelled),
    which the caller, having seen the deadline pass, owes to the deadline. A leaf's own source
    does not decide it: when a scope in the body was cancelled for its own reasons at the moment
    the deadline passed (trio's open_tcp_stream cancels its losing connect attempts once one
    succeeds), its Cancelled says "explicit", yet it leaves the body only because the deadline
    cancelled an enclosing scope too. A group that holds any other exception carries a real
    failure, which must not be hidden behind a timeout."""
    return all(isinstance(leaf, trio.Cancelled) for leaf in leaves(exc))
