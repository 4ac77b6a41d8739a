"""Admin operations: topics, partitions, configs, offsets, record deletion, ACLs.

Each function takes a `Client`, sends the Kafka request to the broker that must answer it
(the controller for topic changes, the leader for offsets and record deletion, any broker for
descriptions), and raises `KafkaError` carrying the broker's error code, with the topic or
resource named in its message, when anything failed. Retriable errors (NOT_CONTROLLER,
LEADER_NOT_AVAILABLE, ...) are retried with fresh metadata until the deadline (the caller's
cancel scope, or the client's request timeout when it set none); an unknown topic is not
retried (it is an answer). Requests that carry a timeout to the broker carry what is left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from broker.client.cluster import Client, TopicMetadata, TopicPartition
from broker.client.connection import ConnectionFailed, Message, check_error
from broker.client.deadline import wire_timeout_ms
from broker.protocol.constants import EARLIEST, LATEST, AlterConfigOp, ConfigSource
from broker.protocol.constants import ConfigResourceType as ConfigResource  # the admin API's name
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from broker.retry import retry
from broker.tasks import gather
from security.acl import (
    AclBinding,
    AclBindingFilter,
    binding_from_wire,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ListedOffset",
    "NewTopic",
    "ScramUpsertion",
    "alter_configs",
    "alter_user_scram_credentials",
    "create_acls",
    "create_partitions",
    "create_topics",
    "delete_acls",
    "delete_records",
    "delete_topics",
    "describe_acls",
    "describe_configs",
    "describe_topics",
    "describe_user_scram_credentials",
    "list_offsets",
    "list_topics",
]

T = TypeVar("T")

# Errors that say "ask again (elsewhere) shortly". Narrower than Kafka's retriable set: an
# unknown topic is an answer for an admin call, and a timed-out topic change may still happen.
_RETRIED = frozenset(
    {
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,  # an OffsetFetch with require_stable: a commit is settling
    }
)


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; replication_factor -1 means the broker's default."""

    partitions: int = 1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a sensitive or unset value
    source: int = ConfigSource.UNKNOWN
    read_only: bool = False
    is_sensitive: bool = False

    @property
    def is_default(self) -> bool:
        # Anything but the topic's own override: the broker's value, static or dynamic.
        return self.source in (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
                               ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int = -1
    leader_epoch: int = -1


async def retrying(client: Client, what: str, attempt: Callable[[], Awaitable[T]], *,
                   unreachable_leader: bool = False) -> T:
    """Run `attempt()` again after a retriable KafkaError (and, with `unreachable_leader`, after
    a ConnectionFailed from a leader-routed request: the leader is moving), with fresh metadata
    and backoff, until the call's deadline; then (or for any other error) raise."""

    def retriable(exc: Exception) -> bool:
        if isinstance(exc, KafkaError):
            return exc.code in _RETRIED
        return unreachable_leader and isinstance(exc, ConnectionFailed)

    with client.deadline(what):
        return await retry(
            attempt,
            retriable=retriable,
            backoff=client.backoff,
            on_failure=lambda exc, failures: client.invalidate_metadata(),
        )


def _timeout_ms(client: Client) -> int:
    """The timeout a request carries to the broker: the request timeout, cut to what is left of
    the call's deadline."""
    return wire_timeout_ms(int(client.request_timeout_s * 1000))


# -- topics ---------------------------------------------------------------------------------


async def create_topics(
    client: Client,
    topics: Mapping[str, int | NewTopic],
    *,
    exist_ok: bool = False,
    validate_only: bool = False,
) -> None:
    """Create topics: name -> partition count, or name -> NewTopic (replication, configs).

    Raises KafkaError (TOPIC_ALREADY_EXISTS unless `exist_ok`, INVALID_PARTITIONS,
    INVALID_CONFIG, INVALID_TOPIC_EXCEPTION, ...) for the first topic that failed; the others
    may have been created.
    """
    specs = {name: spec if isinstance(spec, NewTopic) else NewTopic(spec) for name, spec in topics.items()}
    creatable = [
        CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in spec.configs.items()],
        )
        for name, spec in specs.items()
    ]

    def request() -> CreateTopicsRequest:
        return CreateTopicsRequest(topics=creatable, timeout_ms=_timeout_ms(client), validate_only=validate_only)

    await _change_topics(client, request, lambda r: r.topics, "create topic", specs,
                         tolerated=ErrorCode.TOPIC_ALREADY_EXISTS if exist_ok else None)


async def delete_topics(client: Client, names: Iterable[str], *, missing_ok: bool = False) -> None:
    """Delete topics. Raises KafkaError (UNKNOWN_TOPIC_OR_PARTITION unless `missing_ok`, ...)
    for the first topic that failed."""
    names = list(names)

    def request() -> DeleteTopicsRequest:
        # v6 names topics in structs (name or id); v0-5 by a list of names. The version is known
        # only once connected, so fill both: each version encodes the one it has.
        return DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
            topic_names=list(names),
            timeout_ms=_timeout_ms(client),
        )

    await _change_topics(client, request, lambda r: r.responses, "delete topic", names,
                         tolerated=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if missing_ok else None)


async def describe_topics(client: Client, names: Iterable[str] | None = None) -> dict[str, TopicMetadata]:
    """Metadata of the named topics (all topics when None), partitions with leaders and ISR.

    Raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION, ...) for a named topic that has an error.
    """
    wanted = None if names is None else list(names)

    async def attempt() -> dict[str, TopicMetadata]:
        metadata = await client.refresh_metadata(wanted)
        if wanted is None:
            return dict(metadata.topics)
        out: dict[str, TopicMetadata] = {}
        for name in wanted:
            topic = metadata.topics.get(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r}")
            check_error(topic.error, f"describe topic {name!r}")
            out[name] = topic
        return out

    return await retrying(client, "describe topics", attempt)


async def list_topics(client: Client, *, include_internal: bool = False) -> dict[str, int]:
    """Every topic's partition count (internal topics such as __consumer_offsets only when
    asked). Raises ConnectionFailed when no broker answers in time."""
    topics = await describe_topics(client, None)
    return {
        name: t.partition_count
        for name, t in sorted(topics.items())
        if t.error == ErrorCode.NONE and (include_internal or not t.is_internal)
    }


async def create_partitions(client: Client, counts: Mapping[str, int], *, validate_only: bool = False) -> None:
    """Raise topics' partition counts to the given totals.

    Raises KafkaError (INVALID_PARTITIONS when a count is not above the current one,
    UNKNOWN_TOPIC_OR_PARTITION, ...) for the first topic that failed.
    """
    changes = [CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=c, assignments=None)
               for n, c in counts.items()]

    def request() -> CreatePartitionsRequest:
        return CreatePartitionsRequest(topics=changes, timeout_ms=_timeout_ms(client), validate_only=validate_only)

    await _change_topics(client, request, lambda r: r.results, "create partitions for", counts)


async def _change_topics(
    client: Client,
    request: Callable[[], Message],
    results_of: Callable[[Any], Iterable[Any]],
    what: str,
    names: Iterable[str],
    *,
    tolerated: ErrorCode | None = None,
) -> None:
    """Send a topic change (`request()`, built for each attempt so that its timeout_ms is what
    is left of the deadline) to the controller, retried as `retrying` does; raise KafkaError
    for the first of `results_of(response)` (each with name, error code and message) that
    failed other than with `tolerated`. The topics' metadata is fetched again afterwards."""

    async def attempt() -> None:
        response = await client.request_controller(request())
        for result in results_of(response):
            if result.error_code != tolerated:
                check_error(result.error_code, f"{what} {result.name!r}", result.error_message)

    names = list(names)
    await retrying(client, f"{what} {', '.join(map(repr, names))}", attempt)
    client.invalidate_metadata(names)


# -- configs --------------------------------------------------------------------------------


async def describe_configs(
    client: Client,
    name: str,
    *,
    resource: ConfigResource = ConfigResource.TOPIC,
    keys: Iterable[str] | None = None,
    node_id: int | None = None,
) -> dict[str, ConfigEntry]:
    """The configs of a topic (or, with resource=BROKER, of broker `name`, its node id),
    all or only `keys`; as broker `node_id` has them, when given (in a ZooKeeper-mode cluster each
    broker applies a config change when it hears of it). Raises KafkaError (UNKNOWN_TOPIC_OR_PARTITION, ...)."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=int(resource), resource_name=name, configuration_keys=None if keys is None else list(keys)
            )
        ]
    )

    async def attempt() -> dict[str, ConfigEntry]:
        response: DescribeConfigsResponse = (await client.request(node_id, request) if node_id is not None
                                             else await _config_request(client, resource, name, request))
        out: dict[str, ConfigEntry] = {}
        for result in response.results:
            what = f"describe configs of {resource.name.lower()} {name!r}"
            check_error(result.error_code, what, result.error_message)
            for c in result.configs:
                source = c.config_source
                if source == ConfigSource.UNKNOWN and c.is_default:  # v0 has only a default flag
                    source = ConfigSource.DEFAULT_CONFIG
                out[c.name] = ConfigEntry(c.name, c.value, source, c.read_only, c.is_sensitive)
        return out

    return await retrying(client, f"describe configs of {resource.name.lower()} {name!r}", attempt)


async def alter_configs(
    client: Client,
    name: str,
    updates: Mapping[str, str | None],
    *,
    resource: ConfigResource = ConfigResource.TOPIC,
    validate_only: bool = False,
) -> None:
    """Set (value) or remove (None, back to the default) configs of a topic or broker,
    leaving the others as they are (IncrementalAlterConfigs).

    Raises KafkaError (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION, ...).
    """
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=int(resource),
                resource_name=name,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=AlterConfigOp.DELETE if v is None else AlterConfigOp.SET, value=v
                    )
                    for k, v in updates.items()
                ],
            )
        ],
        validate_only=validate_only,
    )

    async def attempt() -> None:
        response: IncrementalAlterConfigsResponse = await _config_request(client, resource, name, request)
        for result in response.responses:
            check_error(result.error_code, f"alter configs of {resource.name.lower()} {name!r}", result.error_message)

    await retrying(client, f"alter configs of {resource.name.lower()} {name!r}", attempt)


async def _config_request(
    client: Client,
    resource: ConfigResource,
    name: str,
    request: DescribeConfigsRequest | IncrementalAlterConfigsRequest,
) -> Any:
    # A broker's own configs are answered by that broker; topic configs by any.
    if resource == ConfigResource.BROKER and name.isdigit():
        return await client.request(int(name), request)
    return await client.request_any(request)


# -- offsets --------------------------------------------------------------------------------


async def _per_leader(
    client: Client,
    partitions: Iterable[TopicPartition],
    what: str,
    request_for: Callable[[list[TopicPartition], int], Message],
    value_of: Callable[[Any], T],
) -> dict[TopicPartition, T]:
    """Send `request_for(its partitions, timeout_ms left)` to each leader of `partitions`, the
    leaders concurrently, retried as `retrying` does (an unreachable leader too), and map each
    partition to `value_of` its part of the answer (a response with `topics[].name` and
    `topics[].partitions[]` carrying `partition_index` and `error_code`, as ListOffsets and
    DeleteRecords have). Raises KafkaError (naming `what` and the partition) for the first
    partition with an error, or ConnectionFailed, after all answered; KafkaError when a
    partition is missing from the answers."""
    wanted = list(partitions)

    async def ask(node_id: int, tps: list[TopicPartition]) -> dict[TopicPartition, T]:
        # One attempt per leader (fail_fast): a dead leader is left at once for the one fresh
        # metadata names, as Kafka's AdminClient retries a disconnected call after a metadata update.
        response = await client.request(node_id, request_for(tps, _timeout_ms(client)), fail_fast=True)
        out: dict[TopicPartition, T] = {}
        for topic in response.topics:
            for part in topic.partitions:
                check_error(part.error_code, f"{what} of {topic.name}-{part.partition_index}")
                out[TopicPartition(topic.name, part.partition_index)] = value_of(part)
        return out

    async def attempt() -> dict[TopicPartition, T]:
        by_leader, leaderless = await client.partitions_by_leader(wanted)
        if leaderless:
            raise next(iter(leaderless.values()))  # the first partition without a leader, as asked
        answers = await gather([partial(ask, node_id, tps) for node_id, tps in by_leader.items()],
                               collect=(KafkaError, ConnectionFailed))
        return _all_answered(wanted, {tp: value for answer in answers for tp, value in answer.items()})

    return await retrying(client, what, attempt, unreachable_leader=True)


def _by_topic(tps: Iterable[TopicPartition], topic: Callable[..., T], partition: Callable[[TopicPartition], Any]
              ) -> list[T]:
    """A request's topic list: one `topic(name=, partitions=[partition(tp), ...])` per topic."""
    grouped: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp)
    return [topic(name=name, partitions=[partition(tp) for tp in group]) for name, group in grouped.items()]


def _all_answered(wanted: Iterable[TopicPartition], out: Mapping[TopicPartition, T]) -> dict[TopicPartition, T]:
    missing = [tp for tp in wanted if tp not in out]
    if missing:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {missing}")
    return {tp: out[tp] for tp in wanted}


async def list_offsets(
    client: Client,
    specs: Mapping[TopicPartition, int],
    *,
    isolation_level: int = 0,
) -> dict[TopicPartition, ListedOffset]:
    """For each partition: EARLIEST (log start), LATEST (log end; the last stable offset with
    isolation_level 1), or a timestamp in ms (the first offset whose timestamp is at or after
    it; offset -1 when there is none). Asks each partition's leader.

    Raises KafkaError for the first partition with an error.
    """

    def partition(tp: TopicPartition) -> ListOffsetsRequest.ListOffsetsPartition:
        return ListOffsetsRequest.ListOffsetsPartition(partition_index=tp.partition, timestamp=specs[tp])

    def request_for(tps: list[TopicPartition], timeout_ms: int) -> ListOffsetsRequest:
        topics = _by_topic(tps, ListOffsetsRequest.ListOffsetsTopic, partition)
        return ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=topics, timeout_ms=timeout_ms)

    def listed(part: ListOffsetsResponse.ListOffsetsPartitionResponse) -> ListedOffset:
        offset = part.offset
        if part.old_style_offsets and offset <= 0:  # v0 answers with a list
            offset = part.old_style_offsets[0]
        return ListedOffset(offset, part.timestamp, part.leader_epoch)

    return await _per_leader(client, specs, "list offsets", request_for, listed)


async def delete_records(client: Client, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Delete every record below `before[tp]` (-1: the high watermark) in each partition;
    returns each partition's new log start offset (low watermark).

    Raises KafkaError (OFFSET_OUT_OF_RANGE, ...) for the first partition that failed.
    """

    def partition(tp: TopicPartition) -> DeleteRecordsRequest.DeleteRecordsPartition:
        return DeleteRecordsRequest.DeleteRecordsPartition(partition_index=tp.partition, offset=before[tp])

    def request_for(tps: list[TopicPartition], timeout_ms: int) -> DeleteRecordsRequest:
        topics = _by_topic(tps, DeleteRecordsRequest.DeleteRecordsTopic, partition)
        return DeleteRecordsRequest(topics=topics, timeout_ms=timeout_ms)

    def low_watermark(part: DeleteRecordsResponse.DeleteRecordsPartitionResult) -> int:
        return part.low_watermark

    return await _per_leader(client, before, "delete records", request_for, low_watermark)


# -- users' SCRAM credentials (KIP-554) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A credential to set: the client salts the password, so it never crosses the wire."""

    user: str
    mechanism: int  # Kafka's ScramMechanism number: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes = field(repr=False)


async def describe_user_scram_credentials(client: Client, users: Iterable[str] | None = None
                                          ) -> dict[str, list[tuple[int, int]]]:
    """User -> its credentials' (mechanism number, iterations); every user with one when `users`
    is None. Raises KafkaError for the request, or for a named user (RESOURCE_NOT_FOUND)."""
    request = DescribeUserScramCredentialsRequest(
        users=None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])
    response = await retrying(client, "describe user scram credentials", lambda: client.request_any(request))
    check_error(response.error_code, "describe user scram credentials", response.error_message)
    out: dict[str, list[tuple[int, int]]] = {}
    for result in response.results:
        check_error(result.error_code, f"describe the credentials of {result.user}", result.error_message)
        out[result.user] = [(info.mechanism, info.iterations) for info in result.credential_infos]
    return out


async def alter_user_scram_credentials(client: Client, upsertions: Iterable[ScramUpsertion] = (),
                                       deletions: Iterable[tuple[str, int]] = ()) -> None:
    """Set and delete (user, mechanism number) credentials. Raises KafkaError for the first user
    refused (the others may have changed)."""
    request = AlterUserScramCredentialsRequest(
        deletions=[AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=user, mechanism=mechanism)
                   for user, mechanism in deletions],
        upsertions=[AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=u.user, mechanism=u.mechanism, iterations=u.iterations, salt=u.salt,
            salted_password=u.salted_password) for u in upsertions])
    with client.deadline("alter user scram credentials"):
        response = await client.request_any(request, idempotent=False)
    for result in response.results:
        check_error(result.error_code, f"alter the credentials of {result.user}", result.error_message)


# -- ACLs -----------------------------------------------------------------------------------


_EVERY_ACL = AclBindingFilter()


async def create_acls(client: Client, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
    """Create `bindings` (CreateAcls, answered by any broker; one that exists already is no
    change). Per binding, in order: None when it is in force, else the broker's KafkaError for
    it (SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without Alter on
    the cluster, INVALID_REQUEST, ...).

    Raises KafkaError when the answer does not carry one result per binding.
    """
    request = CreateAclsRequest(creations=[
        CreateAclsRequest.AclCreation(
            resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
            resource_pattern_type=b.pattern.pattern_type, principal=b.entry.principal, host=b.entry.host,
            operation=b.entry.operation, permission_type=b.entry.permission)
        for b in bindings])

    async def attempt() -> list[KafkaError | None]:
        response: CreateAclsResponse = await client.request_any(request)
        if len(response.results) != len(bindings):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"create ACLs: {len(response.results)} results for {len(bindings)} ACLs")
        out: list[KafkaError | None] = []
        for binding, result in zip(bindings, response.results, strict=True):
            try:
                check_error(result.error_code, f"create ACL {binding}", result.error_message)
            except KafkaError as exc:
                out.append(exc)
            else:
                out.append(None)
        return out

    if not bindings:
        return []
    return await retrying(client, "create ACLs", attempt)


async def describe_acls(client: Client, selected: AclBindingFilter = _EVERY_ACL, *,
                        node_id: int | None = None) -> list[AclBinding]:
    """The ACLs `selected` matches (all by default), as any broker (or broker `node_id`) has
    them. Raises KafkaError with the broker's message (CLUSTER_AUTHORIZATION_FAILED,
    SECURITY_DISABLED, ...)."""
    request = DescribeAclsRequest(
        resource_type_filter=selected.resource_type, resource_name_filter=selected.name,
        pattern_type_filter=selected.pattern_type, principal_filter=selected.principal, host_filter=selected.host,
        operation=selected.operation, permission_type=selected.permission)

    async def attempt() -> list[AclBinding]:
        response: DescribeAclsResponse = (await client.request(node_id, request) if node_id is not None
                                          else await client.request_any(request))
        check_error(response.error_code, "describe ACLs", response.error_message)
        return [binding_from_wire(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                                  a.permission_type) for r in response.resources for a in r.acls]

    return await retrying(client, "describe ACLs", attempt)


async def delete_acls(client: Client, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    """Delete the ACLs each filter matches; the deleted ones, per filter. Raises KafkaError with
    the broker's message for the first filter refused (the others' deletions stand). Not resent
    after a failure in flight (its answer names what it deleted)."""
    request = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)
        for f in filters])

    async def attempt() -> list[list[AclBinding]]:
        response: DeleteAclsResponse = await client.request_any(request, idempotent=False)
        out = []
        for result in response.filter_results:
            check_error(result.error_code, "delete ACLs", result.error_message)
            out.append([binding_from_wire(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                          m.operation, m.permission_type) for m in result.matching_acls])
        return out

    return await retrying(client, "delete ACLs", attempt)
