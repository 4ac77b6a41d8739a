"""One request per partition leader: the round that produce, fetch, LinkAppend and LinkTruncate share.

Each partition goes to its leader (one request per leader, the leaders concurrently, one attempt:
`Client.request(fail_fast=True)`), and comes back as the caller's result for it: the leader's
answer, or the error that kept it from one. Never raises for a partition's failure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable
from typing import Any, Protocol, TypeVar

import trio

from broker.client.cluster import LEADER_MOVED, Client, NodeNotReady, TopicPartition, asked_for
from broker.client.connection import ConnectionFailed, Message
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["PartitionResult", "send_per_leader"]


class PartitionResult(Protocol):
    @property
    def error(self) -> int: ...


R = TypeVar("R", bound=PartitionResult)


async def send_per_leader(
    client: Client,
    partitions: Collection[TopicPartition],
    request_for: Callable[[list[TopicPartition]], Message],
    results_in: Callable[[Any, list[TopicPartition]], Iterable[tuple[str, int, R]]],
    failed: Callable[[TopicPartition, KafkaError | ConnectionFailed, bool], R],
    *,
    max_version: int | None = None,
    leader_moved: Container[int] = LEADER_MOVED,
    stale_after_failure: bool = False,
) -> dict[TopicPartition, R]:
    """Send `request_for(the partitions it leads)` to each leader of `partitions` and return
    each partition's result, in the order of `partitions`.

    `results_in(response, the partitions asked)`: the (topic, partition, result) triples of an
    answer (an answer for a partition not asked of that leader is passed over); it may raise
    KafkaError for an error that covers the whole answer. A result whose `error` is one of
    `leader_moved` marks its topic's metadata stale.

    `failed(partition, error, sent)`: the result of a partition without an answer: its leader
    is unknown (the lookup's KafkaError) or metadata could not be fetched (ConnectionFailed),
    the request failed (ConnectionFailed; KafkaError, e.g. no common version), or the answer
    left it out (UNKNOWN_SERVER_ERROR). `sent` is False when the request never left the client,
    so sending it again cannot write anything twice. `stale_after_failure`: a failed request
    also marks its topics' metadata stale (for a caller that asks again in a loop).
    """
    results: dict[TopicPartition, R] = {}
    try:
        by_leader, leaderless = await client.partitions_by_leader(partitions)
    except ConnectionFailed as exc:
        return {tp: failed(tp, exc, False) for tp in partitions}
    for tp, error in leaderless.items():
        results[tp] = failed(tp, error, False)

    async def send(node_id: int, tps: list[TopicPartition]) -> None:
        try:
            # One attempt (fail_fast): a leader that died is answered at once, and metadata
            # marked stale, not retried until the deadline while another broker takes over.
            response = await client.request(node_id, request_for(tps), max_version=max_version, fail_fast=True)
        except (ConnectionFailed, KafkaError) as exc:
            if stale_after_failure:
                client.invalidate_metadata({tp.topic for tp in tps})
            for tp in tps:
                results[tp] = failed(tp, exc, not isinstance(exc, NodeNotReady))
            return
        try:
            for tp, result in asked_for(results_in(response, tps), set(tps)):
                results[tp] = result
                client.note_partition_error(tp.topic, result.error, leader_moved)
        except KafkaError as exc:  # an error for the whole answer
            for tp in tps:
                results[tp] = failed(tp, exc, True)
            return
        for tp in tps:
            if tp not in results:
                results[tp] = failed(tp, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for this partition"),
                                     True)

    async with trio.open_nursery() as nursery:
        for node_id, tps in by_leader.items():
            nursery.start_soon(send, node_id, tps)
    return {tp: results[tp] for tp in partitions}
