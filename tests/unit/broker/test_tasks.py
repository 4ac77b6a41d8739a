"""broker.tasks: the fan-out every client call shares, and exception-group leaves."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from broker.tasks import gather, leaves


async def test_results_come_in_call_order_whatever_order_they_finish_in(
        autojump_clock: trio.testing.MockClock) -> None:
    async def after(delay: float, value: str) -> str:
        await trio.sleep(delay)
        return value

    calls = [partial(after, 3, "a"), partial(after, 1, "b"), partial(after, 2, "c")]
    assert await gather(calls, collect=(KeyError,)) == ["a", "b", "c"]
    assert await gather([], collect=(KeyError,)) == []


async def test_the_first_collected_error_is_raised_alone_once_all_have_ended(
        autojump_clock: trio.testing.MockClock) -> None:
    finished: list[str] = []

    async def fail(delay: float, name: str) -> None:
        await trio.sleep(delay)
        raise KeyError(name)

    async def work(delay: float) -> None:
        await trio.sleep(delay)
        finished.append("slow")

    with pytest.raises(KeyError) as caught:
        await gather([partial(fail, 2, "late"), partial(fail, 1, "early"), partial(work, 5)], collect=(KeyError,))
    assert caught.value.args == ("early",)
    assert finished == ["slow"]  # not cancelled by the others' failures


async def test_an_unexpected_error_cancels_the_rest_and_comes_as_a_group(
        autojump_clock: trio.testing.MockClock) -> None:
    finished: list[str] = []

    async def bug() -> None:
        raise ZeroDivisionError

    async def work() -> None:
        await trio.sleep(5)
        finished.append("slow")

    with pytest.raises(BaseExceptionGroup) as caught:
        await gather([bug, work], collect=(KeyError,))
    assert [type(e) for e in leaves(caught.value)] == [ZeroDivisionError]
    assert finished == []


def test_leaves_flattens_nested_groups_in_order() -> None:
    a, b, c = KeyError("a"), ValueError("b"), OSError("c")
    group = BaseExceptionGroup("outer", [a, ExceptionGroup("inner", [b, ExceptionGroup("deep", [c])])])
    assert leaves(group) == [a, b, c]
    assert leaves(a) == [a]
