"""BrokerConnection against a scripted in-process broker on a loopback socket."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import pytest
import trio
import trio.testing

from broker.client.connection import (
    ConnectionFailed,
    RequestTimeout,
    check_error,
    open_connection,
    pick_version,
)
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.headers import RequestHeader, decode_request_header, encode_response
from broker.protocol.messages import (
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)
from tests.support.frames import request_frames


@pytest.mark.parametrize(
    ("ours", "theirs", "cap", "expected"),
    [
        ((0, 12), (0, 9), None, 9),
        ((0, 12), (0, 20), None, 12),
        ((4, 12), (0, 3), None, None),  # disjoint ranges
        ((0, 12), None, None, None),  # broker does not list the API
        ((0, 12), (0, 12), 5, 5),
        ((3, 12), (0, 12), 2, None),  # cap below our minimum
        ((0, 12), (7, 7), None, 7),
    ],
)
def test_pick_version(
    ours: tuple[int, int], theirs: tuple[int, int] | None, cap: int | None, expected: int | None
) -> None:
    assert pick_version(ours, theirs, cap) == expected


def test_check_error_names_the_code() -> None:
    check_error(0, "fine")
    with pytest.raises(KafkaError) as info:
        check_error(36, "create topic 'x'", "exists")
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert "TOPIC_ALREADY_EXISTS" in str(info.value) and "'x'" in str(info.value)
    with pytest.raises(KafkaError) as info:
        check_error(31000, "something")
    assert info.value.code == ErrorCode.UNKNOWN_SERVER_ERROR and "31000" in str(info.value)


@dataclass
class FakeBroker:
    """Answers ApiVersions and Metadata; everything else is recorded and left unanswered.

    `api_versions_max`: the highest ApiVersions version it knows (older ones get error 35 as a
    v0 answer, as KIP-511 says). `answer_limit`: after that many answers, stop answering.
    `wrong_correlation`: answer Metadata with a correlation id off by one.
    """

    versions: dict[int, tuple[int, int]] = field(
        default_factory=lambda: {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 5), ApiKey.PRODUCE: (3, 9)}
    )
    answer_limit: int | None = None
    wrong_correlation: bool = False
    gate: trio.Event | None = None  # when set, Metadata answers wait for it
    requests: list[RequestHeader] = field(default_factory=list)
    answered: int = 0
    port: int = 0

    def _api_keys(self) -> list[ApiVersionsResponse.ApiVersion]:
        Version = ApiVersionsResponse.ApiVersion
        return [Version(api_key=k, min_version=a, max_version=b) for k, (a, b) in self.versions.items()]

    def answer(self, header: RequestHeader) -> bytearray | None:
        if self.answer_limit is not None and self.answered >= self.answer_limit:
            return None
        key, version, cid = header.api_key, header.api_version, header.correlation_id
        if key == ApiKey.API_VERSIONS:
            if version > self.versions[ApiKey.API_VERSIONS][1]:
                body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self._api_keys())
                return encode_response(cid, 0, body, 0)
            return encode_response(cid, 0, ApiVersionsResponse(api_keys=self._api_keys()), version)
        if key == ApiKey.METADATA:
            # The controller id echoes the correlation id so tests can match answers to requests.
            body = MetadataResponse(controller_id=cid, cluster_id="fake")
            if self.wrong_correlation:
                cid += 1
            return encode_response(cid, API_SPECS[key].response_header_version(version), body, version)
        return None

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            async for frame in request_frames(stream):
                header, _ = decode_request_header(frame)
                self.requests.append(header)
                reply = self.answer(header)
                if reply is not None and header.api_key == ApiKey.METADATA and self.gate is not None:
                    await self.gate.wait()
                if reply is not None:
                    self.answered += 1
                    await stream.send_all(reply)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self.handle, listeners, task_status=task_status)  # type: ignore[arg-type]


async def start(nursery: trio.Nursery, fake: FakeBroker) -> FakeBroker:
    await nursery.start(fake.serve)
    return fake


async def test_negotiates_highest_common_versions_and_falls_back_to_api_versions_v0() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker(versions={ApiKey.API_VERSIONS: (0, 2), ApiKey.METADATA: (0, 5)}))
        async with open_connection("127.0.0.1", fake.port, version_caps={ApiKey.METADATA: 4}) as conn:
            assert [(h.api_key, h.api_version) for h in fake.requests] == [(18, 3), (18, 2)]
            assert conn.broker_versions[ApiKey.METADATA] == (0, 5)
            assert conn.version_for(ApiKey.METADATA) == 4  # capped by the connection
            assert conn.version_for(ApiKey.METADATA, max_version=1) == 1
            with pytest.raises(KafkaError) as info:
                conn.version_for(ApiKey.FETCH)  # not listed by the broker
            assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
            response = await conn.request(MetadataRequest(topics=None))
            assert isinstance(response, MetadataResponse) and response.cluster_id == "fake"
            assert fake.requests[-1].api_version == 4
        nursery.cancel_scope.cancel()


async def test_pipelined_requests_are_matched_in_order() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker())
        async with open_connection("127.0.0.1", fake.port, client_id="pipeline") as conn:
            got: dict[int, int] = {}

            async def one(i: int) -> None:
                response = await conn.request(MetadataRequest(topics=None))
                got[i] = response.controller_id

            async with trio.open_nursery() as requests:
                for i in range(50):
                    requests.start_soon(one, i)
            # Every answer went to the request that carried its correlation id.
            sent = {h.correlation_id for h in fake.requests if h.api_key == ApiKey.METADATA}
            assert sorted(got.values()) == sorted(sent) and len(sent) == 50
            assert all(h.client_id == "pipeline" for h in fake.requests)
            assert conn.in_flight == 0
        nursery.cancel_scope.cancel()


async def test_acks_zero_produce_expects_no_answer() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker())
        async with open_connection("127.0.0.1", fake.port) as conn:
            assert await conn.request(ProduceRequest(acks=0, timeout_ms=1000)) is None
            assert conn.in_flight == 0
            # The connection still works, and the next answer is not mistaken for the produce's.
            response = await conn.request(MetadataRequest(topics=None))
            assert response.controller_id == fake.requests[-1].correlation_id
        nursery.cancel_scope.cancel()


async def test_timeout_closes_the_connection_and_fails_requests_in_flight() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker(answer_limit=1))  # answers ApiVersions only
        async with open_connection("127.0.0.1", fake.port, request_timeout_s=0.2) as conn:
            outcomes: list[BaseException] = []

            async def waiting() -> None:
                try:
                    # acks=all with a 60 s broker-side wait: bounded by 60.2 s, not 0.2 s
                    await conn.request(ProduceRequest(acks=-1, timeout_ms=60_000))
                except ConnectionFailed as exc:
                    outcomes.append(exc)

            async with trio.open_nursery() as requests:
                requests.start_soon(waiting)
                with pytest.raises(RequestTimeout):
                    await conn.request(MetadataRequest(topics=None))
            assert conn.closed
            assert len(outcomes) == 1 and isinstance(outcomes[0], ConnectionFailed)
            with pytest.raises(ConnectionFailed):
                await conn.request(MetadataRequest(topics=None))
        nursery.cancel_scope.cancel()


async def test_cancelled_caller_leaves_the_connection_usable() -> None:
    async with trio.open_nursery() as nursery:
        gate = trio.Event()
        fake = await start(nursery, FakeBroker(gate=gate))
        async with open_connection("127.0.0.1", fake.port) as conn:
            async with trio.open_nursery() as requests:
                requests.start_soon(conn.request, MetadataRequest(topics=None))
                await trio.testing.wait_all_tasks_blocked()
                assert conn.in_flight == 1
                requests.cancel_scope.cancel()  # the caller goes away; its answer is still due
            gate.set()
            assert not conn.closed
            response = await conn.request(MetadataRequest(topics=None))
            assert response.controller_id == fake.requests[-1].correlation_id
        nursery.cancel_scope.cancel()


async def test_wrong_correlation_id_closes_the_connection() -> None:
    async with trio.open_nursery() as nursery:
        fake = await start(nursery, FakeBroker(wrong_correlation=True))
        async with open_connection("127.0.0.1", fake.port) as conn:
            with pytest.raises(ConnectionFailed, match="correlation id"):
                await conn.request(MetadataRequest(topics=None))
            assert conn.closed
        nursery.cancel_scope.cancel()


async def test_broker_closing_the_socket_fails_the_request() -> None:
    async def accept_then_close(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, accept_then_close, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(ConnectionFailed):
            async with open_connection("127.0.0.1", port):
                pass
        nursery.cancel_scope.cancel()
