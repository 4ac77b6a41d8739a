"""Consumer-group administration: coordinators, listings, descriptions, committed offsets.

What Kafka's AdminClient does for groups, with the same requests and rules, so it works against
Apache Kafka as well as Causeway:

- every group has one coordinator broker (FindCoordinator); requests about a group go to it.
  Coordinators are cached per client and group, and forgotten when a broker answers
  NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, or cannot be reached;
- `list_groups` asks every broker (each lists the groups it coordinates);
- `commit_offsets` is an *admin* commit (generation -1, no member id), which Kafka accepts only
  for a group with no active members; a live group answers UNKNOWN_MEMBER_ID (or
  REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION while it rebalances).

Coordinator errors (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)
are retried with fresh lookups and backoff until the call's deadline; anything else raises
`KafkaError` naming the group (and partition) it concerns.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TypeAlias, TypeVar

from broker.client.admin import retrying
from broker.client.cluster import BrokerInfo, Client, TopicPartition
from broker.client.connection import ConnectionFailed, check_error
from broker.protocol.constants import CoordinatorType
from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError
from broker.protocol.messages import (
    ConsumerProtocolAssignment,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    LinkOffsetCommitRequest,
    LinkOffsetCommitResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from broker.protocol.primitives import Reader
from broker.tasks import gather

__all__ = [
    "CommittedOffset",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "commit_offsets",
    "decode_assignment",
    "delete_groups",
    "delete_offsets",
    "describe_groups",
    "fetch_offsets",
    "find_coordinator",
    "forget_coordinator",
    "link_commit_offsets",
    "list_groups",
]

CONSUMER_PROTOCOL = "consumer"  # the protocol type of Kafka consumers' groups

# The coordinator moved, is starting, or is not elected yet: look it up again and retry.
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_COORDINATOR_ERRORS = _COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}

T = TypeVar("T")
_Answer: TypeAlias = T | KafkaError  # a group's result, or the error the broker gave for it

# group id -> coordinator, per client; dropped with the client.
_coordinators: weakref.WeakKeyDictionary[Client, dict[str, BrokerInfo]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups reports it. `state` is Kafka's state name ("Stable", "Empty",
    ...), or "" from a broker too old to say (ListGroups before v4)."""

    group_id: str
    protocol_type: str  # "consumer" for consumer groups; "" for offsets-only (simple) groups
    state: str = ""

    @property
    def is_simple(self) -> bool:
        """A group that only stores offsets (assign() consumers, tools): no group protocol."""
        return not self.protocol_type


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str  # as the broker reports it; Kafka writes "/10.0.0.1"
    # The member's partitions, decoded from its ConsumerProtocolAssignment; empty when the group
    # is not a consumer group, is rebalancing (brokers send no assignment then), or the bytes
    # do not parse (they are in `assignment_bytes` either way).
    assignment: tuple[TopicPartition, ...] = ()
    assignment_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # Kafka's names: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str
    protocol: str  # the assignor chosen ("range", "cooperative-sticky", ...); "" unless Stable
    members: tuple[MemberDescription, ...]
    coordinator: BrokerInfo

    @property
    def exists(self) -> bool:
        """False for a group the coordinator does not know (Kafka describes it as Dead)."""
        return self.state != "Dead"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A committed position: the next offset the group will read, with the leader epoch of
    the last record read (-1: unknown) and the committer's free-form metadata."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


# -- decoding ---------------------------------------------------------------------------------


def decode_assignment(data: bytes | bytearray | memoryview) -> list[TopicPartition]:
    """The partitions in a consumer's assignment (the ConsumerProtocolAssignment bytes a
    leader hands out in SyncGroup and DescribeGroups reports), in the order written.

    Versions newer than this codec knows are read as the newest it knows: the consumer
    protocol only ever appends fields. Empty bytes are an empty assignment.
    Raises KafkaError(CORRUPT_MESSAGE) for bytes that do not parse.
    """
    if not data:
        return []
    try:
        r = Reader(data)
        version = min(max(r.int16(), 0), ConsumerProtocolAssignment.MAX_VERSION)
        decoded = ConsumerProtocolAssignment.decode_from(r, version)
    except ProtocolError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"consumer assignment does not parse: {exc}") from exc
    return [TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions]


# -- coordinators -----------------------------------------------------------------------------


def _cache(client: Client) -> dict[str, BrokerInfo]:
    found = _coordinators.get(client)
    if found is None:
        found = _coordinators[client] = {}
    return found


def forget_coordinator(client: Client, group_id: str) -> None:
    """Drop the cached coordinator of `group_id`, so the next call looks it up again."""
    _cache(client).pop(group_id, None)


async def find_coordinator(client: Client, group_id: str) -> BrokerInfo:
    """The broker coordinating `group_id` (FindCoordinator), cached per client and group.

    Retries COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR with
    backoff until the deadline (a new cluster elects the offsets topic's leaders a moment
    after it starts). Raises KafkaError (INVALID_GROUP_ID, GROUP_AUTHORIZATION_FAILED, or the
    last retriable code at the deadline), ConnectionFailed when no broker answers in time.
    """
    cache = _cache(client)
    known = cache.get(group_id)
    if known is not None:
        return known
    # v4+ names keys in a batch, v0-3 one key: fill both, each version encodes its own.
    request = FindCoordinatorRequest(key=group_id, key_type=CoordinatorType.GROUP, coordinator_keys=[group_id])

    async def attempt() -> BrokerInfo:
        response: FindCoordinatorResponse = await client.request_any(request)
        if response.coordinators:
            found = next((c for c in response.coordinators if c.key == group_id), response.coordinators[0])
            code, message = found.error_code, found.error_message
            broker = BrokerInfo(found.node_id, found.host, found.port)
        else:
            code, message = response.error_code, response.error_message
            broker = BrokerInfo(response.node_id, response.host, response.port)
        check_error(code, f"find coordinator of group {group_id!r}", message)
        return broker

    broker = await retrying(client, f"find coordinator of group {group_id!r}", attempt)
    cache[group_id] = broker
    return broker


async def _ask_coordinator(
    client: Client,
    group_id: str,
    what: str,
    ask: Callable[[BrokerInfo], Awaitable[T]],
) -> T:
    """Run `ask(coordinator)` against the group's coordinator, looking it up again and
    retrying when `ask` raises a coordinator error, until the deadline."""

    async def attempt() -> T:
        coordinator = await find_coordinator(client, group_id)
        try:
            return await ask(coordinator)
        except KafkaError as exc:
            if exc.code in _COORDINATOR_MOVED or exc.code == ErrorCode.BROKER_NOT_AVAILABLE:
                forget_coordinator(client, group_id)
            raise
        except ConnectionFailed:
            forget_coordinator(client, group_id)
            raise

    return await retrying(client, f"{what} of group {group_id!r}", attempt)


# -- groups -----------------------------------------------------------------------------------


async def list_groups(client: Client) -> list[GroupListing]:
    """Every group of the cluster, sorted by id: ListGroups to every broker, since each lists
    only the groups it coordinates.

    Raises KafkaError when a broker answers with an error (COORDINATOR_LOAD_IN_PROGRESS is
    retried until the deadline), ConnectionFailed when a broker cannot be reached in time: a
    listing with a broker missing would be silently incomplete.
    """

    async def attempt() -> list[GroupListing]:
        metadata = await client.refresh_metadata([])  # brokers only

        async def ask(node_id: int) -> list[GroupListing]:
            response: ListGroupsResponse = await client.request(node_id, ListGroupsRequest())
            check_error(response.error_code, f"list groups on broker {node_id}")
            return [GroupListing(g.group_id, g.protocol_type, g.group_state) for g in response.groups]

        listings = await gather([partial(ask, node_id) for node_id in metadata.brokers],
                                collect=(KafkaError, ConnectionFailed))
        found = {g.group_id: g for listing in listings for g in listing}
        return [found[g] for g in sorted(found)]

    return await retrying(client, "list groups", attempt)


async def describe_groups(client: Client, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
    """Each group's state, protocol and members with their decoded assignments: one
    DescribeGroups per coordinator, the coordinators concurrently.

    A group the coordinator does not know comes back with state "Dead" and no members, as
    Kafka describes it (`GroupDescription.exists` is False). Raises KafkaError for a group
    with an error (GROUP_AUTHORIZATION_FAILED, ...; coordinator errors are retried until
    the deadline), ConnectionFailed when a coordinator cannot be reached in time.
    """

    async def ask(coordinator: BrokerInfo, groups: list[str]) -> dict[str, _Answer[GroupDescription]]:
        request = DescribeGroupsRequest(groups=groups, include_authorized_operations=False)
        response: DescribeGroupsResponse = await client.request(coordinator.node_id, request)
        out: dict[str, _Answer[GroupDescription]] = {}
        for group in response.groups:
            code = ErrorCode(group.error_code)
            if code == ErrorCode.NONE:
                out[group.group_id] = _description(group, coordinator)
            else:
                out[group.group_id] = KafkaError(code, f"describe group {group.group_id!r}")
        return out

    return await _per_coordinator(client, group_ids, "describe groups", ask)


def _description(group: DescribeGroupsResponse.DescribedGroup, coordinator: BrokerInfo) -> GroupDescription:
    members = []
    for m in group.members:
        raw = bytes(m.member_assignment or b"")
        assignment: tuple[TopicPartition, ...] = ()
        if group.protocol_type == CONSUMER_PROTOCOL:
            try:
                assignment = tuple(decode_assignment(raw))
            except KafkaError:
                pass  # a member with its own idea of the format: its bytes are kept as they are
        members.append(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment, raw)
        )
    return GroupDescription(
        group.group_id, group.group_state, group.protocol_type, group.protocol_data, tuple(members), coordinator
    )


async def delete_groups(client: Client, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
    """Delete groups (their committed offsets go with them): one DeleteGroups per coordinator.
    Each group's outcome: ErrorCode.NONE, NON_EMPTY_GROUP (it has active members),
    GROUP_ID_NOT_FOUND, GROUP_AUTHORIZATION_FAILED, ...

    Coordinator errors are retried until the deadline, then raised as KafkaError, as is
    ConnectionFailed when a coordinator cannot be reached in time.
    """

    async def ask(coordinator: BrokerInfo, groups: list[str]) -> dict[str, _Answer[ErrorCode]]:
        # Not resent after a lost connection: a second try would report GROUP_ID_NOT_FOUND
        # for a group the first one deleted.
        response: DeleteGroupsResponse = await client.request(
            coordinator.node_id, DeleteGroupsRequest(groups_names=groups), idempotent=False
        )
        out: dict[str, _Answer[ErrorCode]] = {}
        for result in response.results:
            code = ErrorCode(result.error_code)
            # Coordinator errors are raised so that they are retried; the others are answers.
            if code in _COORDINATOR_ERRORS:
                out[result.group_id] = KafkaError(code, f"delete group {result.group_id!r}")
            else:
                out[result.group_id] = code
        return out

    return await _per_coordinator(client, group_ids, "delete groups", ask)


async def _per_coordinator(
    client: Client,
    group_ids: Iterable[str],
    what: str,
    ask: Callable[[BrokerInfo, list[str]], Awaitable[dict[str, _Answer[T]]]],
) -> dict[str, T]:
    """Find each group's coordinator, then `ask(coordinator, its groups)` once per
    coordinator, concurrently. Groups whose answer is a coordinator error are looked up and asked
    again (with backoff, until the deadline); any other error is raised."""
    wanted = list(dict.fromkeys(group_ids))
    results: dict[str, T] = {}

    async def attempt() -> None:
        pending = [g for g in wanted if g not in results]
        coordinators: dict[str, BrokerInfo] = {}

        async def locate(group_id: str) -> None:
            coordinators[group_id] = await find_coordinator(client, group_id)

        await gather([partial(locate, g) for g in pending], collect=(KafkaError, ConnectionFailed))
        by_node: dict[int, list[str]] = {}
        for group_id in pending:
            by_node.setdefault(coordinators[group_id].node_id, []).append(group_id)
        retry: list[KafkaError] = []

        async def ask_node(node_id: int) -> None:
            groups = by_node[node_id]
            try:
                answers = await ask(coordinators[groups[0]], groups)
            except (KafkaError, ConnectionFailed):
                for group_id in groups:
                    forget_coordinator(client, group_id)
                raise
            for group_id in groups:
                answer = answers.get(group_id)
                if answer is None:
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"group {group_id!r} missing from the answer")
                if isinstance(answer, KafkaError):
                    if answer.code not in _COORDINATOR_ERRORS:
                        raise answer
                    if answer.code in _COORDINATOR_MOVED:
                        forget_coordinator(client, group_id)
                    retry.append(answer)
                    continue
                results[group_id] = answer

        await gather([partial(ask_node, node) for node in by_node], collect=(KafkaError, ConnectionFailed))
        if retry:
            raise retry[0]  # retrying asks again for the groups still without an answer

    if wanted:
        await retrying(client, what, attempt)
    return {g: results[g] for g in wanted}


# -- offsets ----------------------------------------------------------------------------------


async def fetch_offsets(
    client: Client,
    group_id: str,
    partitions: Iterable[TopicPartition] | None = None,
    *,
    require_stable: bool = False,
) -> dict[TopicPartition, CommittedOffset]:
    """The group's committed offsets (OffsetFetch): of every partition it committed when
    `partitions` is None, else of those. Partitions with no committed offset are omitted, so
    the answer holds only real commits. Works for groups with or without active members.
    `require_stable` (KIP-447): a partition whose offset a commit already made may still change
    (a transaction not decided, a commit not yet replicated) is asked again until the deadline,
    so the answer holds every commit made before the call.

    Raises KafkaError for a group-level or partition-level error (GROUP_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION from older brokers, ...; coordinator errors are retried until
    the deadline), ConnectionFailed when the coordinator cannot be reached in time.
    """
    wanted = None if partitions is None else list(dict.fromkeys(partitions))
    if wanted is not None and not wanted:
        return {}
    by_topic: dict[str, list[int]] | None = None
    if wanted is not None:
        by_topic = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
    # v8+ asks per group, v0-7 for one group: fill both, each version encodes its own.
    request = OffsetFetchRequest(
        group_id=group_id,
        topics=None
        if by_topic is None
        else [OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group_id,
                member_id=None,
                member_epoch=-1,
                topics=None
                if by_topic is None
                else [
                    OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()
                ],
            )
        ],
        require_stable=require_stable,
    )

    async def ask(coordinator: BrokerInfo) -> dict[TopicPartition, CommittedOffset]:
        response: OffsetFetchResponse = await client.request(coordinator.node_id, request)
        what = f"fetch offsets of group {group_id!r}"
        # (topic, partition, offset, leader epoch, metadata, error code)
        rows: list[tuple[str, int, int, int, str | None, int]]
        if response.groups:  # v8+
            group = next((g for g in response.groups if g.group_id == group_id), response.groups[0])
            check_error(group.error_code, what)
            rows = [
                (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
                for t in group.topics
                for p in t.partitions
            ]
        else:
            check_error(response.error_code, what)
            rows = [
                (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
                for t in response.topics
                for p in t.partitions
            ]
        out: dict[TopicPartition, CommittedOffset] = {}
        for topic, partition, offset, epoch, metadata, code in rows:
            check_error(code, f"{what}, partition {topic}-{partition}")
            if offset < 0:
                continue  # nothing committed
            out[TopicPartition(topic, partition)] = CommittedOffset(offset, epoch, metadata or "")
        return out

    return await _ask_coordinator(client, group_id, "fetch offsets", ask)


async def commit_offsets(
    client: Client,
    group_id: str,
    offsets: Mapping[TopicPartition, int | CommittedOffset],
) -> None:
    """Commit offsets for a group from outside it (OffsetCommit with generation -1 and no
    member id), as AdminClient.alterConsumerGroupOffsets and `kafka-consumer-groups
    --reset-offsets --execute` do. A plain int is an offset with no leader epoch and no
    metadata. Creates the group (with no members) when it does not exist.

    Kafka accepts this only while the group has no active members: a live group answers
    UNKNOWN_MEMBER_ID (REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION while it rebalances), and
    nothing is committed. Raises KafkaError naming the first partition that failed
    (UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, ...; coordinator errors are
    retried until the deadline), ValueError for a negative offset, ConnectionFailed when the
    coordinator cannot be reached in time.
    """
    values = _committed_values(offsets)
    if not values:
        return
    topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for tp, v in values.items():
        topics.setdefault(tp.topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=v.offset,
                committed_leader_epoch=v.leader_epoch,
                committed_metadata=v.metadata,
            )
        )
    request = OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )

    async def ask(coordinator: BrokerInfo) -> None:
        # Resending the same offsets after a lost connection commits the same thing again.
        response: OffsetCommitResponse = await client.request(coordinator.node_id, request)
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                answered.add(TopicPartition(topic.name, p.partition_index))
                code = ErrorCode(p.error_code)
                if code == ErrorCode.NONE:
                    continue
                what = f"commit offset of {topic.name}-{p.partition_index} for group {group_id!r}"
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    what += " (the group has active members; Kafka takes admin commits only for an empty group)"
                raise KafkaError(code, what)
        _all_answered(group_id, values, answered)

    await _ask_coordinator(client, group_id, "commit offsets", ask)


def _committed_values(offsets: Mapping[TopicPartition, int | CommittedOffset]) -> dict[TopicPartition, CommittedOffset]:
    """A commit's offsets, a plain int as an offset with no leader epoch and no metadata.
    Raises ValueError for a negative offset."""
    values = {tp: v if isinstance(v, CommittedOffset) else CommittedOffset(v) for tp, v in offsets.items()}
    for tp, v in values.items():
        if v.offset < 0:
            raise ValueError(f"offset for {tp.topic}-{tp.partition} must be >= 0, not {v.offset}")
    return values


def _all_answered(group_id: str, values: Mapping[TopicPartition, CommittedOffset],
                  answered: set[TopicPartition]) -> None:
    """Raises UNKNOWN_SERVER_ERROR when a commit's answer left out a partition it asked for."""
    missing = [tp for tp in values if tp not in answered]
    if missing:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"commit for group {group_id!r}: no answer for {missing}")


async def link_commit_offsets(
    client: Client,
    link_name: str,
    group_id: str,
    offsets: Mapping[TopicPartition, int | CommittedOffset],
) -> dict[TopicPartition, str]:
    """Commit offsets for a group from outside it, as mirror `link_name` (Causeway's
    LinkOffsetCommit, API key 10002): as `commit_offsets`, but the broker commits a partition
    only while its topic is `link_name`'s mirror topic. Leader epochs are not sent (none kept).

    Returns the partitions refused because their topic is not (any more) the mirror's (promoted,
    a normal topic, another mirror's: INVALID_REQUEST), each with the broker's reason; the rest
    were committed. Raises as `commit_offsets` for any other failure (UNKNOWN_MEMBER_ID when the
    group has active members, ...), ValueError for a negative offset, UNSUPPORTED_VERSION from a
    broker that does not serve the API (not Causeway, or older).
    """
    values = _committed_values(offsets)
    if not values:
        return {}
    topics: dict[str, list[LinkOffsetCommitRequest.LinkOffsetCommitPartition]] = {}
    for tp, v in values.items():
        topics.setdefault(tp.topic, []).append(LinkOffsetCommitRequest.LinkOffsetCommitPartition(
            partition_index=tp.partition, committed_offset=v.offset, committed_metadata=v.metadata))
    request = LinkOffsetCommitRequest(
        link_name=link_name, group_id=group_id,
        topics=[LinkOffsetCommitRequest.LinkOffsetCommitTopic(name=t, partitions=ps) for t, ps in topics.items()])

    async def ask(coordinator: BrokerInfo) -> dict[TopicPartition, str]:
        response: LinkOffsetCommitResponse = await client.request(coordinator.node_id, request)
        refused: dict[TopicPartition, str] = {}
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                answered.add(tp)
                code = ErrorCode(p.error_code)
                if code == ErrorCode.INVALID_REQUEST:
                    refused[tp] = p.error_message or f"topic {topic.name} is not mirror {link_name}'s mirror topic"
                elif code != ErrorCode.NONE:
                    raise KafkaError(code, p.error_message or f"commit offset of {topic.name}-{p.partition_index} "
                                                               f"for group {group_id!r} as mirror {link_name}")
        _all_answered(group_id, values, answered)
        return refused

    return await _ask_coordinator(client, group_id, "commit offsets", ask)


async def delete_offsets(
    client: Client,
    group_id: str,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """Delete the group's committed offsets of `partitions` (OffsetDelete); each partition's
    outcome: ErrorCode.NONE, or GROUP_SUBSCRIBED_TO_TOPIC when a live member of the group
    consumes its topic, UNKNOWN_TOPIC_OR_PARTITION, ...

    Raises KafkaError for a group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a live
    group that is not a consumer group, ...; coordinator errors are retried until the
    deadline), ConnectionFailed when the coordinator cannot be reached in time.
    """
    wanted = list(dict.fromkeys(partitions))
    if not wanted:
        return {}
    topics: dict[str, list[OffsetDeleteRequest.OffsetDeleteRequestPartition]] = {}
    for tp in wanted:
        topics.setdefault(tp.topic, []).append(OffsetDeleteRequest.OffsetDeleteRequestPartition(tp.partition))
    request = OffsetDeleteRequest(
        group_id=group_id,
        topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )

    async def ask(coordinator: BrokerInfo) -> dict[TopicPartition, ErrorCode]:
        response: OffsetDeleteResponse = await client.request(coordinator.node_id, request)
        check_error(response.error_code, f"delete offsets of group {group_id!r}")
        codes = {
            TopicPartition(t.name, p.partition_index): ErrorCode(p.error_code)
            for t in response.topics
            for p in t.partitions
        }
        return {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in wanted}

    return await _ask_coordinator(client, group_id, "delete offsets", ask)
