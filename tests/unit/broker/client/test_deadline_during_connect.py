"""A caller's deadline that passes while the client connects is the client's RequestTimeout,
never a bare trio.TooSlowError (the race recorded in commit 52395b5).

trio's open_tcp_stream runs its connect attempts in a nursery, so the deadline's Cancelled leaves
it wrapped in an exception group; when the caller's `trio.fail_after` shares the client's
deadline, that outer scope is the one trio hands the cancellation to, and `timeout_error` used to
let the group pass as "not a deadline". The connect here cannot finish before any deadline: the
peer is a real listener whose accept queue is full, so the kernel drops the SYNs. trio's autojump
clock makes the wait virtual, so nothing depends on how fast the machine is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from broker.client.cluster import Backoff, open_client
from broker.client.connection import RequestTimeout, open_connection
from broker.client.deadline import timeout_error
from broker.protocol.messages import MetadataRequest
from tests.support.stalled import stalled_port as stalled
from tests.unit.broker.client.test_leader_fail_fast import ScriptedBroker


class Passed(Exception):
    pass


@pytest.fixture
def stalled_port() -> Iterator[int]:
    with stalled() as port:
        yield port


async def test_timeout_error_names_a_deadline_that_a_nursery_in_the_body_saw(autojump_clock: object) -> None:
    async def body() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()

    with pytest.raises(Passed), trio.fail_after(5):
        with timeout_error(lambda seconds: Passed(seconds)):
            await body()
    # Nested nurseries wrap it twice: still the deadline's.
    with pytest.raises(Passed), trio.fail_after(5):
        with timeout_error(lambda seconds: Passed(seconds)):
            async with trio.open_nursery() as outer:
                outer.start_soon(body)
                await trio.sleep_forever()


async def test_timeout_error_never_hides_a_real_failure_in_the_group(autojump_clock: object) -> None:
    async def fails_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise ValueError("cleanup failed")  # noqa: B012 (a real failure beside the Cancelled)

    with pytest.raises(BaseExceptionGroup) as info, trio.fail_after(5):
        with timeout_error(lambda seconds: Passed(seconds)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fails_when_cancelled)
                await trio.sleep_forever()
    assert info.group_contains(ValueError, match="cleanup failed")
    assert not info.group_contains(Passed)


async def test_a_cancellation_from_a_nursery_is_no_deadline(autojump_clock: object) -> None:
    with trio.CancelScope() as scope:
        with timeout_error(lambda seconds: Passed(seconds), default_s=5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                scope.cancel()
                await trio.sleep_forever()
    assert scope.cancelled_caught


async def test_a_deadline_passing_during_connect_is_a_request_timeout(
    stalled_port: int, autojump_clock: object
) -> None:
    address = f"127.0.0.1:{stalled_port}"
    with pytest.raises(RequestTimeout, match=f"connect to {address}: no answer within 2s"), trio.fail_after(2):
        async with open_connection("127.0.0.1", stalled_port, request_timeout_s=60):
            pass
    async with open_client(address, request_timeout_s=60) as client:
        # A metadata refresh (request_any, resent until the deadline) and an admin-style call.
        with pytest.raises(RequestTimeout, match=address), trio.fail_after(2):
            await client.refresh_metadata()
        with pytest.raises(RequestTimeout, match=address), trio.fail_after(2):
            await client.request_controller(MetadataRequest(topics=[]))


async def test_a_deadline_passing_while_connecting_to_a_leader_is_a_request_timeout(stalled_port: int) -> None:
    # Metadata names node 2 at the stalled port: a request for it, leader-routed (fail_fast) or
    # resent until the deadline, waits in the connect when the caller's deadline passes. (Real
    # time here, as the scripted broker answers on real sockets; the connect cannot finish, so
    # the deadline always passes inside it however slow the machine.)
    async with trio.open_nursery() as nursery:
        broker = ScriptedBroker(stalled_port)
        await nursery.start(broker.serve)
        async with open_client(f"127.0.0.1:{broker.port}", backoff=Backoff(initial_s=0.01, max_s=0.02)) as client:
            await client.refresh_metadata()
            for fail_fast in (True, False):
                with pytest.raises(RequestTimeout, match=str(stalled_port)), trio.fail_after(0.3):
                    await client.request(2, MetadataRequest(topics=[]), fail_fast=fail_fast)
        nursery.cancel_scope.cancel()


async def test_a_body_scope_cancelled_as_the_deadline_passes_is_the_deadline(
        mock_clock: trio.testing.MockClock) -> None:
    # A scope in the body is cancelled for its own reason (as open_tcp_stream cancels its losing
    # attempts when one connects) while the deadline passes: its Cancelled says "explicit", and
    # it leaves the body only because the deadline cancelled the enclosing scope. The CI race of
    # test_a_connection_lost_in_flight_is_not_resent_to_the_same_node.
    with pytest.raises(Passed), trio.fail_after(5):
        with timeout_error(lambda seconds: Passed(seconds)):
            with trio.CancelScope() as inner:
                inner.cancel("successfully found a socket")
                mock_clock.jump(6)
                await trio.lowlevel.checkpoint()
