"""Cluster client helpers: backoff math, bootstrap parsing, reconnect pacing."""

from __future__ import annotations

import random
import socket
from functools import partial

import pytest
import trio

from broker.client.cluster import (
    Backoff,
    TopicPartition,
    asked_for,
    metadata_from_response,
    open_client,
    parse_bootstrap,
)
from broker.client.connection import ConnectionFailed
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import MetadataResponse


def test_backoff_doubles_up_to_the_cap_without_jitter() -> None:
    backoff = Backoff(initial_s=0.1, max_s=1.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(7)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.delay(10_000) == 1.0  # no overflow however long the peer stays down


def test_backoff_jitter_stays_within_its_band() -> None:
    backoff = Backoff(initial_s=0.1, max_s=1.0, jitter=0.2)
    rng = random.Random(7)
    delays = [backoff.delay(3, rng) for _ in range(1000)]
    assert all(0.4 * 0.8 <= d <= 0.4 * 1.2 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100  # actually jittered


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(initial_s=0)
    with pytest.raises(ValueError):
        Backoff(initial_s=2, max_s=1)
    with pytest.raises(ValueError):
        Backoff(jitter=1.5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", [("127.0.0.1", 9092)]),
        ("a:1, b:2,", [("a", 1), ("b", 2)]),
        (["h:3"], [("h", 3)]),
        ("[::1]:9092", [("::1", 9092)]),
    ],
)
def test_parse_bootstrap(text: str | list[str], expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize("text", ["", "host", "host:", ":9092", "host:port", "host:70000", "a b:1", "[::1]9092"])
def test_parse_bootstrap_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(text)


def test_metadata_from_response_maps_leaders() -> None:
    response = MetadataResponse(
        cluster_id="c",
        controller_id=1,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9)],
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name="t",
                partitions=[
                    MetadataResponse.MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=[1]),
                    MetadataResponse.MetadataResponsePartition(partition_index=1, leader_id=-1, error_code=5),
                ],
            )
        ],
    )
    metadata = metadata_from_response(response)
    assert metadata.brokers[1].address == "h:9"
    assert metadata.topics["t"].partition_count == 2
    assert metadata.leader(TopicPartition("t", 0)) == 1
    assert metadata.leader(TopicPartition("t", 1)) is None
    assert metadata.leader(TopicPartition("u", 0)) is None


def test_asked_for_keys_the_answers_asked_about_and_passes_over_the_rest() -> None:
    answers = [("t", 0, "a"), ("t", 1, "b"), ("u", 0, "c")]
    assert list(asked_for(answers, {TopicPartition("t", 1), TopicPartition("u", 0)})) == [
        (TopicPartition("t", 1), "b"), (TopicPartition("u", 0), "c")]


async def test_a_partition_error_saying_the_leader_moved_makes_its_topic_stale() -> None:
    async with open_client(f"127.0.0.1:{_dead_port()}") as client:
        client.note_partition_error("kept", ErrorCode.NONE)
        client.note_partition_error("kept", ErrorCode.FENCED_LEADER_EPOCH)  # not in the default set
        client.note_partition_error("moved", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        client.note_partition_error("fenced", ErrorCode.FENCED_LEADER_EPOCH, {ErrorCode.FENCED_LEADER_EPOCH})
        assert client._stale_topics == {"moved", "fenced"}


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_dead_peer_is_retried_with_backoff_not_in_a_spin() -> None:
    port = _dead_port()
    async with open_client(f"127.0.0.1:{port}", backoff=Backoff(initial_s=0.05, max_s=1.0)) as client:
        # A bounded window of real time: backoff allows a handful of attempts in it (0, .05,
        # .15, .35, .75 s); a client without backoff would make thousands.
        with pytest.raises(ConnectionFailed), trio.fail_after(1.0):
            await client.refresh_metadata()
        attempts = client.statistics().connect_attempts
    assert 2 <= attempts <= 10, attempts


async def test_deadline_ends_the_retries_with_the_last_error() -> None:
    port = _dead_port()
    async with open_client(f"127.0.0.1:{port}", backoff=Backoff(initial_s=0.01, max_s=0.05)) as client:
        with pytest.raises(ConnectionFailed, match=f"127.0.0.1:{port}"):
            with trio.fail_after(0.2):
                await client.refresh_metadata()


async def test_peer_that_accepts_then_hangs_up_is_backed_off_too() -> None:
    # What a WAN-link emulator does while its upstream is down: accept, then close.
    accepted = 0

    async def hang_up(stream: trio.SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, hang_up, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with open_client(f"127.0.0.1:{port}", backoff=Backoff(initial_s=0.05, max_s=1.0)) as client:
            with pytest.raises(ConnectionFailed), trio.fail_after(1.0):
                await client.refresh_metadata()
            attempts = client.statistics().connect_attempts
        nursery.cancel_scope.cancel()
    assert 2 <= attempts <= 10, attempts
    assert accepted <= attempts
