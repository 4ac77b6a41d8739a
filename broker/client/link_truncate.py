"""LinkTruncate: failback at the old primary of a link-mode mirror (Causeway's API key 10001).

Each partition's leader is told where its log diverges from the new primary's and which batch
both still share; it makes the topic the mirror topic of the named mirror again, cuts the
diverged tail into its quarantine directory and waits for its replicas to cut theirs
(broker/server/handlers/link_truncate.py). ``validate_only`` checks every partition and changes
nothing. Sending the same request again is safe: nothing more is cut.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from broker.client.cluster import Client, TopicPartition
from broker.client.connection import ConnectionFailed
from broker.client.deadline import wire_timeout_ms
from broker.client.per_leader import send_per_leader
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import LinkTruncateRequest, LinkTruncateResponse

__all__ = ["CutPoint", "LinkTruncateResult", "link_truncate"]


@dataclass(frozen=True)
class CutPoint:
    """Where one partition's log diverges from the new primary's."""

    offset: int  # everything at or past it is cut
    shared_base: int = -1  # the last batch both logs hold before `offset` (-1: none)
    shared_last: int = -1
    shared_crc: int = -1


@dataclass(frozen=True)
class LinkTruncateResult:
    """The leader's answer for one partition."""

    error: ErrorCode
    error_message: str | None
    log_end_offset: int = -1
    batches: int = 0  # what this request cut (0: nothing, or cut by an earlier run)
    records: int = 0
    first_offset: int = -1
    last_offset: int = -1
    quarantine: str | None = None  # the leader's directory holding what was cut


async def link_truncate(client: Client, link_name: str, points: Mapping[TopicPartition, CutPoint], *,
                        allow_truncation: bool = True, validate_only: bool = False,
                        timeout_ms: int = 30000) -> dict[TopicPartition, LinkTruncateResult]:
    """Send each partition's cut point to its leader, one request per leader, the leaders
    concurrently, one attempt. Never raises for a partition's failure: its result carries the
    error (a leader that cannot be reached: NETWORK_EXCEPTION or REQUEST_TIMED_OUT)."""
    with client.deadline("LinkTruncate", extra_s=timeout_ms / 1000):
        return await _send(client, link_name, points, allow_truncation, validate_only, wire_timeout_ms(timeout_ms))


async def _send(client: Client, link_name: str, points: Mapping[TopicPartition, CutPoint], allow_truncation: bool,
                validate_only: bool, timeout_ms: int) -> dict[TopicPartition, LinkTruncateResult]:
    def request_for(tps: list[TopicPartition]) -> LinkTruncateRequest:
        topics: dict[str, list[LinkTruncateRequest.LinkTruncatePartition]] = {}
        for tp in tps:
            p = points[tp]
            topics.setdefault(tp.topic, []).append(LinkTruncateRequest.LinkTruncatePartition(
                index=tp.partition, truncate_offset=p.offset, shared_base_offset=p.shared_base,
                shared_last_offset=p.shared_last, shared_crc=p.shared_crc, allow_truncation=allow_truncation))
        return LinkTruncateRequest(
            link_name=link_name, timeout_ms=timeout_ms, validate_only=validate_only,
            topics=[LinkTruncateRequest.LinkTruncateTopic(name=t, partitions=ps) for t, ps in topics.items()])

    def results_in(response: LinkTruncateResponse, tps: list[TopicPartition]
                   ) -> Iterator[tuple[str, int, LinkTruncateResult]]:
        for t in response.topics:
            for p in t.partitions:
                yield t.name, p.index, LinkTruncateResult(
                    ErrorCode(p.error_code), p.error_message, p.log_end_offset, p.truncated_batches,
                    p.truncated_records, p.first_truncated_offset, p.last_truncated_offset, p.quarantine_path)

    return await send_per_leader(client, points.keys(), request_for, results_in, _failed)


def _failed(tp: TopicPartition, error: KafkaError | ConnectionFailed, sent: bool) -> LinkTruncateResult:
    """No answer from the leader: not reachable or timed out (NETWORK_EXCEPTION,
    REQUEST_TIMED_OUT), no common version (not a Causeway broker, or an older one), no leader."""
    if isinstance(error, ConnectionFailed):
        return LinkTruncateResult(error.error_code, str(error))
    return LinkTruncateResult(error.code, error.message or None)
