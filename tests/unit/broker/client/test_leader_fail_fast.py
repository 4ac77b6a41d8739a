"""`Client.request(fail_fast=True)`, the one mechanism behind every leader-routed request: one
connect at most, none while the node backs off, no resend, metadata marked stale; and a
partial metadata refresh that clears that mark (so it is not fetched again before every call).

Against a scripted broker on a loopback socket: it answers ApiVersions and Metadata (naming
itself node 1 and a port nothing listens on as node 2, the leader of t-0), and hangs up on a
Produce request.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import pytest
import trio

from broker.client.cluster import Backoff, Client, NodeNotReady, TopicPartition, open_client
from broker.client.connection import ConnectionFailed
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.headers import decode_request_header, encode_response
from broker.protocol.messages import ApiVersionsResponse, MetadataRequest, MetadataResponse, ProduceRequest
from tests.support.frames import request_frames

T0 = TopicPartition("t", 0)  # led by node 2, which is down
T1 = TopicPartition("t", 1)  # led by node 1, the scripted broker
U0 = TopicPartition("u", 0)  # led by node 1
# Long enough that the backoff after one failure outlasts a test's few calls.
BACKOFF = Backoff(initial_s=30.0, max_s=60.0)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ScriptedBroker:
    dead_port: int
    port: int = 0
    metadata_requests: list[list[str] | None] = field(default_factory=list)  # the topics each asked for
    produce_requests: int = 0

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        Broker, Topic = MetadataResponse.MetadataResponseBroker, MetadataResponse.MetadataResponseTopic
        Partition = MetadataResponse.MetadataResponsePartition
        leaders = {"t": {0: 2, 1: 1}, "u": {0: 1}}
        names = list(leaders) if request.topics is None else [t.name for t in request.topics if t.name]
        self.metadata_requests.append(None if request.topics is None else names)
        return MetadataResponse(
            cluster_id="scripted",
            controller_id=1,
            brokers=[Broker(node_id=1, host="127.0.0.1", port=self.port),
                     Broker(node_id=2, host="127.0.0.1", port=self.dead_port)],
            topics=[Topic(name=name, partitions=[Partition(partition_index=p, leader_id=leader, replica_nodes=[1, 2],
                                                           isr_nodes=[1, 2])
                                                 for p, leader in leaders[name].items()])
                    for name in names if name in leaders],
        )

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            async for frame in request_frames(stream):
                header, pos = decode_request_header(frame)
                key, version = header.api_key, header.api_version
                if key == ApiKey.API_VERSIONS:
                    Version = ApiVersionsResponse.ApiVersion
                    keys = [Version(api_key=k, min_version=a, max_version=b)
                            for k, (a, b) in {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 5),
                                              ApiKey.PRODUCE: (3, 9)}.items()]
                    await stream.send_all(encode_response(header.correlation_id, 0,
                                                          ApiVersionsResponse(api_keys=keys), min(version, 3)))
                elif key == ApiKey.METADATA:
                    request = MetadataRequest.decode(frame[pos:], version)
                    body = self._metadata(request)
                    await stream.send_all(encode_response(
                        header.correlation_id, API_SPECS[key].response_header_version(version), body, version))
                elif key == ApiKey.PRODUCE:
                    self.produce_requests += 1
                    return  # hangs up with the request in flight: as a broker that was killed

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self.handle, listeners, task_status=task_status)  # type: ignore[arg-type]


def _attempts(client: Client, port: int) -> int:
    return client.statistics().connect_attempts_by_peer.get(f"127.0.0.1:{port}", 0)


async def test_a_dead_leader_fails_the_call_at_once_and_marks_metadata_stale() -> None:
    async with trio.open_nursery() as nursery:
        broker = ScriptedBroker(_dead_port())
        await nursery.start(broker.serve)
        async with open_client(f"127.0.0.1:{broker.port}", backoff=BACKOFF) as client:
            leader = await client.leader_for(T0)
            assert leader.node_id == 2
            asked = len(broker.metadata_requests)

            # One connect, refused: NodeNotReady (the request never left), not a retry loop
            # until the deadline (30 s of backoff here would make the call time out instead).
            with pytest.raises(NodeNotReady, match=str(broker.dead_port)):
                await client.request(2, MetadataRequest(topics=[]), fail_fast=True)
            assert _attempts(client, broker.dead_port) == 1

            # Backing off: the next call fails without a connect at all.
            with pytest.raises(NodeNotReady, match="backing off"):
                await client.request(2, MetadataRequest(topics=[]), fail_fast=True)
            assert _attempts(client, broker.dead_port) == 1

            # Metadata was marked stale: the next lookup asks again (for its topic only).
            await client.leader_for(T0)
            assert broker.metadata_requests[asked:] == [["t"]]
        nursery.cancel_scope.cancel()


async def test_a_connection_lost_in_flight_is_not_resent_to_the_same_node() -> None:
    async with trio.open_nursery() as nursery:
        broker = ScriptedBroker(_dead_port())
        await nursery.start(broker.serve)
        async with open_client(f"127.0.0.1:{broker.port}", backoff=Backoff(initial_s=0.01, max_s=0.02)) as client:
            await client.leader_for(T1)
            asked = len(broker.metadata_requests)
            produce = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[])
            with pytest.raises(ConnectionFailed) as info:
                await client.request(1, produce, fail_fast=True)  # idempotent by default: still not resent
            assert not isinstance(info.value, NodeNotReady)  # it was sent: its outcome is unknown
            assert broker.produce_requests == 1
            await client.leader_for(T1)
            assert len(broker.metadata_requests) == asked + 1  # stale after the loss

            # Without fail_fast (a request only that broker can answer) it is resent until the deadline.
            with pytest.raises(ConnectionFailed), trio.fail_after(0.5):
                await client.request(1, produce)
            assert broker.produce_requests > 2
        nursery.cancel_scope.cancel()


async def test_a_partial_refresh_clears_the_stale_mark_and_leaves_the_rest_stale_one_by_one() -> None:
    async with trio.open_nursery() as nursery:
        broker = ScriptedBroker(_dead_port())
        await nursery.start(broker.serve)
        async with open_client(f"127.0.0.1:{broker.port}") as client:
            await client.leaders_for([T0, U0])
            client.invalidate_metadata()  # everything stale, as after a lost connection
            asked = len(broker.metadata_requests)
            await client.leaders_for([T1])
            await client.leaders_for([T1])
            await client.leaders_for([T1])
            # One refresh, for "t"; then t is fresh (the global mark used to stay, and every
            # lookup fetched metadata again until someone asked for every topic).
            assert broker.metadata_requests[asked:] == [["t"]]
            await client.leaders_for([U0])  # "u" was cached before: stale on its own now
            assert broker.metadata_requests[asked:] == [["t"], ["u"]]
        nursery.cancel_scope.cancel()


async def test_request_any_still_goes_round_the_other_peers() -> None:
    async with trio.open_nursery() as nursery:
        broker = ScriptedBroker(_dead_port())
        await nursery.start(broker.serve)
        bootstrap = f"127.0.0.1:{broker.dead_port},127.0.0.1:{broker.port}"
        async with open_client(bootstrap) as client:
            for _ in range(5):  # whichever peer comes first, the live one answers
                client.invalidate_metadata()
                metadata = await client.refresh_metadata()
                assert metadata.cluster_id == "scripted"
        nursery.cancel_scope.cancel()
