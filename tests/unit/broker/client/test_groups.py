"""broker.client.groups: assignment decoding, argument checks, and the coordinator dance
(lookup, retry, cache, NOT_COORDINATOR) against a scripted two-broker cluster on loopback sockets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from broker.client import (
    Backoff,
    Client,
    CommittedOffset,
    ErrorCode,
    KafkaError,
    TopicPartition,
    commit_offsets,
    delete_groups,
    delete_offsets,
    describe_groups,
    fetch_offsets,
    find_coordinator,
    list_groups,
    open_client,
)
from broker.client.groups import decode_assignment
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.headers import decode_request_header, encode_response
from broker.protocol.messages import (
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    ListGroupsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)
from broker.protocol.primitives import Writer
from tests.support.frames import request_frames

# -- decoding ---------------------------------------------------------------------------------


def assignment_bytes(version: int, partitions: dict[str, list[int]], trailer: bytes = b"") -> bytes:
    w = Writer()
    w.int16(version)
    ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(t, ps) for t, ps in partitions.items()],
        user_data=b"opaque",
    ).encode_into(w, min(version, ConsumerProtocolAssignment.MAX_VERSION))
    return bytes(w.getvalue()) + trailer


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_decode_assignment_every_version(version: int) -> None:
    data = assignment_bytes(version, {"orders": [2, 0], "audit": [1]})
    assert decode_assignment(data) == [
        TopicPartition("orders", 2), TopicPartition("orders", 0), TopicPartition("audit", 1)]


def test_decode_assignment_reads_a_newer_version_as_the_newest_known() -> None:
    # A future consumer protocol appends fields; what we know is still where it was.
    data = assignment_bytes(9, {"t": [0]}, trailer=b"\x00\x01future")
    assert decode_assignment(data) == [TopicPartition("t", 0)]


def test_decode_assignment_empty_and_corrupt() -> None:
    assert decode_assignment(b"") == []
    with pytest.raises(KafkaError) as info:
        decode_assignment(b"\x00\x00\x00\x00\x00\x05ab")  # a topic count, then a cut-off name
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


# -- argument checks (no broker needed: they fail or return before any request) ---------------------


async def test_commit_refuses_negative_offsets_before_sending() -> None:
    async with open_client("127.0.0.1:1", request_timeout_s=1) as client:
        with pytest.raises(ValueError, match="t-0"):
            await commit_offsets(client, "g", {TopicPartition("t", 0): -1})
        with pytest.raises(ValueError):
            await commit_offsets(client, "g", {TopicPartition("t", 0): CommittedOffset(-5)})
        await commit_offsets(client, "g", {})  # nothing to commit, nothing sent
        assert await fetch_offsets(client, "g", []) == {}
        assert await delete_offsets(client, "g", []) == {}
        assert client.statistics().connect_attempts == 0


# -- a scripted cluster -----------------------------------------------------------------------

Handler = Callable[[int, int, Any, int], Any]  # (node id, api key, request, version) -> response


@dataclass
class FakeCluster:
    """Brokers 1 and 2 on loopback ports; ApiVersions and Metadata answered here, everything
    else by `handler`. Every request is logged as (node id, api key, version, request)."""

    handler: Handler
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    log: list[tuple[int, int, int, Any]] = field(default_factory=list)

    def calls(self, api_key: int) -> list[tuple[int, Any]]:
        return [(node, request) for node, key, _, request in self.log if key == api_key]

    def _answer(self, node_id: int, api_key: int, version: int, request: Any) -> Any:
        if api_key == ApiKey.API_VERSIONS:
            table = {k: (s.min_version, s.max_version) for k, s in API_SPECS.items()}
            table.update(self.versions)
            return ApiVersionsResponse(api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=a, max_version=b) for k, (a, b) in table.items()])
        if api_key == ApiKey.METADATA:
            return MetadataResponse(cluster_id="fake", controller_id=1, brokers=[
                MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=p)
                for n, p in sorted(self.ports.items())])
        self.log.append((node_id, api_key, version, request))
        return self.handler(node_id, api_key, request, version)

    async def _serve(self, node_id: int, stream: trio.SocketStream) -> None:
        async with stream:
            async for frame in request_frames(stream):
                header, pos = decode_request_header(frame)
                spec = API_SPECS[header.api_key]
                request = spec.request.decode(frame[pos:], header.api_version)
                response = self._answer(node_id, header.api_key, header.api_version, request)
                await stream.send_all(encode_response(
                    header.correlation_id, spec.response_header_version(header.api_version), response,
                    header.api_version))

    async def start(self, nursery: trio.Nursery) -> None:
        for node_id in (1, 2):
            listeners = await nursery.start(
                trio.serve_tcp, lambda s, n=node_id: self._serve(n, s), 0)
            self.ports[node_id] = listeners[0].socket.getsockname()[1]


@asynccontextmanager
async def cluster(handler: Handler, **versions: tuple[int, int]) -> AsyncIterator[tuple[FakeCluster, Client]]:
    fake = FakeCluster(handler, {ApiKey[k.upper()]: v for k, v in versions.items()})
    async with trio.open_nursery() as nursery:
        await fake.start(nursery)
        async with open_client(f"127.0.0.1:{fake.ports[1]}", request_timeout_s=10,
                               backoff=Backoff(initial_s=0.001, max_s=0.01)) as client:
            yield fake, client
        nursery.cancel_scope.cancel()


def coordinator_answer(request: Any, version: int, node_id: int, port: int, code: int = 0) -> FindCoordinatorResponse:
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=node_id, host="127.0.0.1", port=port, error_code=code)
            for k in request.coordinator_keys])
    return FindCoordinatorResponse(error_code=code, node_id=node_id, host="127.0.0.1", port=port)


@pytest.mark.parametrize("find_max", [2, 4])  # one key per request (v0-3) and batched keys (v4+)
async def test_coordinator_is_retried_while_unavailable_then_cached(find_max: int) -> None:
    unavailable = 2

    def handler(node: int, key: int, request: Any, version: int) -> Any:
        nonlocal unavailable
        if key == ApiKey.FIND_COORDINATOR:
            if unavailable:
                unavailable -= 1
                return coordinator_answer(request, version, -1, -1, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return coordinator_answer(request, version, 2, fake_ports[2])
        raise AssertionError(f"unexpected api {key}")

    fake_ports: dict[int, int] = {}
    async with cluster(handler, find_coordinator=(0, find_max)) as (fake, client):
        fake_ports.update(fake.ports)
        broker = await find_coordinator(client, "g")
        assert (broker.node_id, broker.port) == (2, fake.ports[2])
        assert len(fake.calls(ApiKey.FIND_COORDINATOR)) == 3
        assert {v for _, k, v, _ in fake.log if k == ApiKey.FIND_COORDINATOR} == {find_max}
        assert await find_coordinator(client, "g") == broker  # cached: no new request
        assert len(fake.calls(ApiKey.FIND_COORDINATOR)) == 3


async def test_not_coordinator_makes_the_client_look_again() -> None:
    coordinator = 1  # moves to 2 after the first OffsetFetch

    def handler(node: int, key: int, request: Any, version: int) -> Any:
        nonlocal coordinator
        if key == ApiKey.FIND_COORDINATOR:
            return coordinator_answer(request, version, coordinator, ports[coordinator])
        if key == ApiKey.OFFSET_FETCH:
            if node == 1:  # no longer the coordinator
                coordinator = 2
                return OffsetFetchResponse(error_code=ErrorCode.NOT_COORDINATOR, groups=[
                    OffsetFetchResponse.OffsetFetchResponseGroup(group_id="g", error_code=ErrorCode.NOT_COORDINATOR)])
            Part = OffsetFetchResponse.OffsetFetchResponsePartitions
            return OffsetFetchResponse(groups=[OffsetFetchResponse.OffsetFetchResponseGroup(group_id="g", topics=[
                OffsetFetchResponse.OffsetFetchResponseTopics(name="t", partitions=[
                    Part(partition_index=0, committed_offset=7, committed_leader_epoch=3, metadata="m"),
                    Part(partition_index=1, committed_offset=-1, committed_leader_epoch=-1, metadata=""),
                ])])])
        raise AssertionError(f"unexpected api {key}")

    ports: dict[int, int] = {}
    async with cluster(handler) as (fake, client):
        ports.update(fake.ports)
        offsets = await fetch_offsets(client, "g")
        assert offsets == {TopicPartition("t", 0): CommittedOffset(7, 3, "m")}  # no commit: omitted
        assert [node for node, _ in fake.calls(ApiKey.OFFSET_FETCH)] == [1, 2]
        assert len(fake.calls(ApiKey.FIND_COORDINATOR)) == 2
        request = fake.calls(ApiKey.OFFSET_FETCH)[0][1]
        assert request.groups[0].topics is None and request.groups[0].member_epoch == -1  # all partitions


async def test_commit_is_an_admin_commit_and_names_the_refused_partition() -> None:
    def handler(node: int, key: int, request: Any, version: int) -> Any:
        if key == ApiKey.FIND_COORDINATOR:
            return coordinator_answer(request, version, 1, ports[1])
        if key == ApiKey.OFFSET_COMMIT:
            code = ErrorCode.UNKNOWN_MEMBER_ID if request.group_id == "live" else ErrorCode.NONE
            return OffsetCommitResponse(topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                       error_code=code)
                    for p in t.partitions])
                for t in request.topics])
        raise AssertionError(f"unexpected api {key}")

    ports: dict[int, int] = {}
    async with cluster(handler) as (fake, client):
        ports.update(fake.ports)
        await commit_offsets(client, "idle", {TopicPartition("t", 0): 5,
                                               TopicPartition("t", 1): CommittedOffset(6, 2, "note")})
        request = fake.calls(ApiKey.OFFSET_COMMIT)[0][1]
        assert (request.generation_id_or_member_epoch, request.member_id) == (-1, "")
        sent = {p.partition_index: (p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                for p in request.topics[0].partitions}
        assert sent == {0: (5, -1, ""), 1: (6, 2, "note")}
        with pytest.raises(KafkaError) as info:
            await commit_offsets(client, "live", {TopicPartition("t", 3): 1})
        assert info.value.code == ErrorCode.UNKNOWN_MEMBER_ID
        assert "t-3" in str(info.value) and "'live'" in str(info.value) and "active members" in str(info.value)


async def test_list_asks_every_broker_and_describe_decodes_assignments() -> None:
    def handler(node: int, key: int, request: Any, version: int) -> Any:
        if key == ApiKey.LIST_GROUPS:
            Listed = ListGroupsResponse.ListedGroup
            return ListGroupsResponse(groups=[Listed(group_id=f"g{node}", protocol_type="consumer",
                                                     group_state="Stable")])
        if key == ApiKey.FIND_COORDINATOR:
            return coordinator_answer(request, version, 2, ports[2])
        if key == ApiKey.DESCRIBE_GROUPS:
            Member = DescribeGroupsResponse.DescribedGroupMember
            return DescribeGroupsResponse(groups=[
                DescribeGroupsResponse.DescribedGroup(
                    group_id=g, group_state="Stable", protocol_type="consumer" if g == "g1" else "connect",
                    protocol_data="range", members=[
                        Member(member_id="m-1", group_instance_id="i-1", client_id="c", client_host="/10.0.0.1",
                               member_assignment=assignment_bytes(1, {"t": [0, 1]}))])
                for g in request.groups])
        if key == ApiKey.DELETE_GROUPS:
            return DeleteGroupsResponse(results=[
                DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=ErrorCode.NON_EMPTY_GROUP)
                for g in request.groups_names])
        raise AssertionError(f"unexpected api {key}")

    ports: dict[int, int] = {}
    async with cluster(handler) as (fake, client):
        ports.update(fake.ports)
        listed = await list_groups(client)
        assert [(g.group_id, g.state, g.is_simple) for g in listed] == [("g1", "Stable", False),
                                                                        ("g2", "Stable", False)]
        assert sorted(node for node, _ in fake.calls(ApiKey.LIST_GROUPS)) == [1, 2]

        described = await describe_groups(client, ["g1", "g2"])
        assert list(described) == ["g1", "g2"]
        g1 = described["g1"]
        assert (g1.state, g1.protocol, g1.coordinator.node_id, g1.exists) == ("Stable", "range", 2, True)
        member = g1.members[0]
        assert (member.member_id, member.group_instance_id, member.client_id, member.client_host) == (
            "m-1", "i-1", "c", "/10.0.0.1")
        assert member.assignment == (TopicPartition("t", 0), TopicPartition("t", 1))
        # Not a consumer group: its assignment bytes are its own business, kept undecoded.
        other = described["g2"].members[0]
        assert other.assignment == () and other.assignment_bytes == member.assignment_bytes
        # Both groups have coordinator 2: one request asks it about both.
        assert [(node, r.groups) for node, r in fake.calls(ApiKey.DESCRIBE_GROUPS)] == [(2, ["g1", "g2"])]

        assert await delete_groups(client, ["g1"]) == {"g1": ErrorCode.NON_EMPTY_GROUP}
