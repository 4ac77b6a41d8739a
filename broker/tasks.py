"""Running calls side by side, and reading what a nursery raised.

`gather` is the client's fan-out (one request per leader, per coordinator, per partition): all
calls run to their end, and the caller gets the first expected error by itself rather than an
ExceptionGroup. `leaves` flattens what a nursery raised, for a command that reports each
failure in one line. Beside `broker.client` rather than in it for the same reason as
`broker.retry`: the WAN emulator uses `leaves` and must not load the client's codec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

__all__ = ["gather", "leaves"]

T = TypeVar("T")


async def gather(calls: Iterable[Callable[[], Awaitable[T]]], *,
                 collect: tuple[type[Exception], ...]) -> list[T]:
    """Await every call concurrently, each to its end, and return their results in order.

    A call that raises one of `collect` does not stop the others: once all have ended, the
    first such error (the first to happen) is raised by itself. Any other exception is a bug
    or a cancellation: it propagates from the nursery as trio raises it, cancelling the rest.
    """
    pending = list(calls)
    results: dict[int, T] = {}
    errors: list[Exception] = []

    async def one(index: int, call: Callable[[], Awaitable[T]]) -> None:
        try:
            results[index] = await call()
        except collect as exc:  # raised below, outside the nursery
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for index, call in enumerate(pending):
            nursery.start_soon(one, index, call)
    if errors:
        raise errors[0]
    return [results[index] for index in range(len(pending))]


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order, or `error` itself."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]
