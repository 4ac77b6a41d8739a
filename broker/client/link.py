"""LinkAppend: a link-mode mirror's byte-identical append to mirror topics on a Causeway target.

LinkAppend (API key 10000) is Causeway's own API, outside Kafka's range: only a Causeway broker
serves it, and says so in ApiVersions (`supports_link_append`). The batches go to each
partition's leader as the source's log holds them (their base offsets, timestamps, producer
fields, control batches); the leader keeps them, skips those it already has and answers where
the copy stands (log end, high watermark, log start). Sending the same batches again is safe:
they are skipped. Each partition's batches say where the source's batch before them ended
(version 1's PreviousEndOffset), so the leader takes a gap only where the source has one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import trio

from broker.client.cluster import Backoff, Client, TopicPartition, metadata_from_response
from broker.client.connection import CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION, ClientError, ConnectionFailed
from broker.client.deadline import wire_timeout_ms
from broker.client.per_leader import send_per_leader
from broker.protocol.api import ApiKey
from broker.protocol.constants import MIRROR_NAME_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    LinkAppendRequest,
    LinkAppendResponse,
    LinkLeaderEpochRequest,
    LinkLeaderEpochResponse,
    MetadataRequest,
)
from broker.protocol.records import BATCH_HEADER_SIZE, read_batch_header

__all__ = ["LINK_APPEND_VERSION", "MIRROR_NAME_CONFIG", "LinkAppendResult", "link_append", "link_leader_epochs",
           "supports_link_append", "wait_leader_epoch"]

Buffer = bytes | bytearray | memoryview
#: The LinkAppend version this client needs: 1 says where the source's previous batch ended.
LINK_APPEND_VERSION = 1


@dataclass(frozen=True)
class LinkAppendResult:
    """The leader's answer for one partition."""

    error: ErrorCode  # ErrorCode.NONE on success
    error_message: str | None
    log_end_offset: int  # the next offset the partition expects; -1 when unknown (an error before the append)
    high_watermark: int
    log_start_offset: int


def _failed(code: ErrorCode, message: str | None) -> LinkAppendResult:
    return LinkAppendResult(code, message, -1, -1, -1)


async def link_append(client: Client, link_name: str, batches: Mapping[TopicPartition, Buffer], *,
                      timeout_ms: int = 30000, log_start_offsets: Mapping[TopicPartition, int] | None = None,
                      previous_ends: Mapping[TopicPartition, int] | None = None,
                      ) -> dict[TopicPartition, LinkAppendResult]:
    """Append each partition's batches (whole RecordBatch v2 batches, as a fetch from the source
    returned them) to its leader, as mirror ``link_name``: one request per leader, the leaders
    concurrently, one attempt: a leader that cannot be reached or drops the connection is
    answered at once (NETWORK_EXCEPTION, and metadata is refreshed at the next call) rather than
    retried until the deadline, as another broker takes over its partitions; resending is the
    caller's, and safe.

    ``timeout_ms`` is the leader's wait for its in-sync replicas (as Produce's acks=all), at most
    what is left of the caller's deadline; the call ends at that deadline (default: the client's
    request timeout plus ``timeout_ms``).

    Never raises for a partition's failure: its result carries the error code. After
    NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION the topic's metadata is refreshed at
    the next call. INVALID_REQUEST: the topic is not (or no longer: promoted) this mirror's
    mirror topic; OFFSET_OUT_OF_RANGE: the copy is not where these batches follow (see
    ``previous_ends``; a batch that straddles its log end: the source diverged); a leader
    that cannot be reached or does not answer in time gives NETWORK_EXCEPTION or
    REQUEST_TIMED_OUT (the batches may or may not be there: send them again).

    ``log_start_offsets``: each source partition's log start offset (from its fetch response);
    the leader moves the copy's log start up to it once the batches are replicated, never past
    the copy's log end (OFFSET_OUT_OF_RANGE). A partition's batches may then be empty: only its
    log start moves.

    ``previous_ends``: for each partition, where the source's batch before the first one sent
    ended (the source holds nothing from there up to that batch: compacted away, deleted).
    Not given: the first batch's base offset (no gap claimed). The leader refuses batches that
    would leave records missing between its log end and there (unless the source's log starts
    there), or that differ from those it holds at their offsets: OFFSET_OUT_OF_RANGE, the copy
    is not where the source's batches follow.
    """
    ends = dict(previous_ends or {})
    for tp, data in batches.items():
        if tp not in ends and len(data) >= BATCH_HEADER_SIZE:
            ends[tp] = read_batch_header(data, 0).base_offset
    with client.deadline("LinkAppend", extra_s=timeout_ms / 1000):
        return await _link_append(client, link_name, batches, wire_timeout_ms(timeout_ms), log_start_offsets or {},
                                  ends)


async def _link_append(client: Client, link_name: str, batches: Mapping[TopicPartition, Buffer],
                       timeout_ms: int, log_start_offsets: Mapping[TopicPartition, int],
                       previous_ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, LinkAppendResult]:
    def request_for(tps: list[TopicPartition]) -> LinkAppendRequest:
        topics: dict[str, list[LinkAppendRequest.LinkAppendPartition]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(
                LinkAppendRequest.LinkAppendPartition(index=tp.partition, records=batches[tp],
                                                      log_start_offset=log_start_offsets.get(tp, -1),
                                                      previous_end_offset=previous_ends.get(tp, -1)))
        return LinkAppendRequest(
            link_name=link_name,
            timeout_ms=timeout_ms,
            topics=[LinkAppendRequest.LinkAppendTopic(name=t, partitions=p) for t, p in topics.items()],
        )

    def results_in(response: LinkAppendResponse, tps: list[TopicPartition]
                   ) -> Iterator[tuple[str, int, LinkAppendResult]]:
        for t in response.topics:
            for p in t.partitions:
                yield t.name, p.index, LinkAppendResult(ErrorCode(p.error_code), p.error_message, p.log_end_offset,
                                                        p.high_watermark, p.log_start_offset)

    return await send_per_leader(client, batches.keys(), request_for, results_in, _failed_with)


def _failed_with(tp: TopicPartition, error: KafkaError | ConnectionFailed, sent: bool) -> LinkAppendResult:
    """No answer from the leader: not reachable or timed out (NETWORK_EXCEPTION,
    REQUEST_TIMED_OUT), no common version (not a Causeway broker), no leader."""
    if isinstance(error, ConnectionFailed):
        return _failed(error.error_code, str(error))
    return _failed(error.code, error.message or None)


async def supports_link_append(client: Client) -> bool:
    """Whether the cluster serves LinkAppend version 1 (a Causeway broker: Kafka does not list
    key 10000 in ApiVersions; an older Causeway serves version 0 only), as any reachable broker
    answers. Raises ConnectionFailed / RequestTimeout when none answers in time."""
    with client.deadline("ApiVersions"):
        response: ApiVersionsResponse = await client.request_any(ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION))
    return any(k.api_key == ApiKey.LINK_APPEND and k.min_version <= LINK_APPEND_VERSION <= k.max_version
               for k in response.api_keys)


async def link_leader_epochs(client: Client, link_name: str, source_epochs: Mapping[TopicPartition, int]
                             ) -> dict[TopicPartition, tuple[ErrorCode, int]]:
    """Ask the target's controller to raise each mirror topic partition's leader epoch to at
    least its source partition's (LinkLeaderEpoch, Causeway's API key 10003; KIP-1279's
    invariant), as mirror ``link_name``. One attempt; per partition (error, its leader epoch now,
    -1 when unknown): NOT_CONTROLLER when the controller moved (metadata is refreshed at the next
    call), INVALID_REQUEST when the topic is not this mirror's mirror topic (or paused) or the
    epoch is out of bounds. Raises ConnectionFailed / RequestTimeout when the controller cannot
    be reached in time."""
    topics: dict[str, list[LinkLeaderEpochRequest.LinkLeaderEpochPartition]] = {}
    for tp, epoch in source_epochs.items():
        topics.setdefault(tp.topic, []).append(
            LinkLeaderEpochRequest.LinkLeaderEpochPartition(index=tp.partition, source_leader_epoch=epoch))
    request = LinkLeaderEpochRequest(link_name=link_name, topics=[
        LinkLeaderEpochRequest.LinkLeaderEpochTopic(name=t, partitions=p) for t, p in topics.items()])
    response: LinkLeaderEpochResponse = await client.request_controller(request)
    results: dict[TopicPartition, tuple[ErrorCode, int]] = {}
    for t in response.topics:
        for p in t.partitions:
            results[TopicPartition(t.name, p.index)] = (ErrorCode(p.error_code), p.leader_epoch)
    if any(code == ErrorCode.NOT_CONTROLLER for code, _ in results.values()):
        client.invalidate_metadata()
    return results


_LEADER_EPOCH_POLL = Backoff(initial_s=0.02, max_s=0.5)


async def wait_leader_epoch(client: Client, tp: TopicPartition, epoch: int, timeout_s: float) -> bool:
    """Wait until ``tp``'s leader leads in ``epoch`` or later, as its own metadata says (a
    ZooKeeper-mode controller sends a broker UpdateMetadata only after the LeaderAndIsr before
    it was answered, so the leader's metadata never runs ahead of its partitions), at most
    ``timeout_s``. True when it does; False at the deadline (a failed request is asked again)."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=tp.topic)],
                              allow_auto_topic_creation=False)
    attempt = 0
    with trio.move_on_after(timeout_s):
        while True:
            try:
                leader = await client.leader_for(tp)
                metadata = metadata_from_response(await client.request(leader.node_id, request))
                if metadata.leader_epoch(tp) >= epoch:
                    return True
            except (KafkaError, ClientError):
                client.invalidate_metadata([tp.topic])
            attempt += 1
            await trio.sleep(_LEADER_EPOCH_POLL.delay(attempt))
    return False
