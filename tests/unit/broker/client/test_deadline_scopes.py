"""Deadlines as cancel scopes: the caller's `trio.fail_after` bounds a request, the client names
what timed out, and a timeout on the wire is read from the enclosing deadline."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from broker.client import admin, fetch, produce_batches
from broker.client.cluster import Backoff, TopicPartition, open_client
from broker.client.connection import ConnectionFailed, RequestTimeout, open_connection
from broker.client.deadline import wire_timeout_ms
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.headers import RequestHeader, encode_response
from broker.protocol.messages import MetadataRequest, MetadataResponse
from broker.protocol.records import Record, build_batch
from tests.unit.broker.client.test_connection import FakeBroker, start


async def test_wire_timeout_is_cut_to_the_enclosing_deadline() -> None:
    assert wire_timeout_ms(1234) == 1234  # no deadline: as wanted
    with trio.fail_after(2.5):
        assert wire_timeout_ms(1234) == 1234
        assert 2000 < wire_timeout_ms(60_000) <= 2500
        with trio.move_on_after(0.5):
            assert 0 < wire_timeout_ms(60_000) <= 500  # the nearest deadline wins
            await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
    assert wire_timeout_ms(2**40) == 2**31 - 1  # what an int32 field holds
    with trio.CancelScope(deadline=-math.inf):
        assert wire_timeout_ms(1234) == 0
        await trio.lowlevel.checkpoint()


async def test_callers_deadline_raises_request_timeout_naming_api_and_broker() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker(answer_limit=1))  # answers ApiVersions only
        async with open_connection("127.0.0.1", fake.port, request_timeout_s=60) as conn:
            with pytest.raises(RequestTimeout, match=rf"METADATA v\d+ to 127\.0\.0\.1:{fake.port}: no answer"):
                with trio.fail_after(0.2):
                    await conn.request(MetadataRequest(topics=None))
            # Answers that did not come in time cannot be trusted to come: the socket is closed.
            assert conn.closed
        nursery.cancel_scope.cancel()


async def test_a_cancellation_that_is_no_deadline_passes_through() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker(answer_limit=1))
        async with open_connection("127.0.0.1", fake.port, request_timeout_s=60) as conn:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as requests:
                    requests.start_soon(conn.request, MetadataRequest(topics=None))
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            assert scope.cancelled_caught and not conn.closed
        nursery.cancel_scope.cancel()


async def test_admin_call_under_fail_after_gives_the_last_real_error() -> None:
    with trio.socket.socket() as s:
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with open_client(f"127.0.0.1:{port}", backoff=Backoff(initial_s=0.01, max_s=0.05)) as client:
        with pytest.raises(ConnectionFailed, match=f"127.0.0.1:{port}"):
            with trio.fail_after(0.3):
                await admin.list_topics(client)


class SilentLeader(FakeBroker):
    """Leads partition 0 of topic "t" (Metadata names it at its own port) and answers no Fetch
    and no Produce: a leader behind a link that went quiet."""

    def answer(self, header: RequestHeader) -> bytearray | None:
        if header.api_key == ApiKey.METADATA:
            body = MetadataResponse(
                brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                controller_id=0,
                topics=[MetadataResponse.MetadataResponseTopic(name="t", partitions=[
                    MetadataResponse.MetadataResponsePartition(partition_index=0, leader_id=0)])],
            )
            spec = API_SPECS[ApiKey.METADATA]
            return encode_response(header.correlation_id, spec.response_header_version(header.api_version), body,
                                   header.api_version)
        return super().answer(header)


def silent_leader() -> SilentLeader:
    versions = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 9), ApiKey.FETCH: (4, 12), ApiKey.PRODUCE: (3, 9)}
    return SilentLeader(versions=versions)


async def test_fetch_and_produce_under_fail_after_report_the_timeout_per_partition() -> None:
    # Their contract is to never raise for a partition's failure: the deadline passing while the
    # leader is silent is such a failure, not a TooSlowError out of the caller's scope.
    tp = TopicPartition("t", 0)
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, silent_leader())
        async with open_client(f"127.0.0.1:{fake.port}", request_timeout_s=60) as client:
            with trio.fail_after(0.3):
                fetched = await fetch(client, {tp: 0}, max_wait_ms=100)
            assert fetched[tp].error == ErrorCode.REQUEST_TIMED_OUT, fetched[tp]
            assert f"127.0.0.1:{fake.port}" in (fetched[tp].error_message or "")
            with trio.fail_after(0.3):
                produced = await produce_batches(client, {tp: build_batch([Record(None, b"v")])})
            assert produced[tp].error == ErrorCode.REQUEST_TIMED_OUT, produced[tp]
        nursery.cancel_scope.cancel()
