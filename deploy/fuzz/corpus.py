"""The seed corpus: valid requests of every API the broker serves, at every version it serves.

Two kinds of seed:
- hand-made requests that reach deep into the broker: produces of real record batches (every
  codec, idempotent, poison batches Kafka refuses), fetches by name and by topic id, consumer
  group traffic, CreateTopics and CreatePartitions with sane, large, negative and huge counts,
  the inter-broker APIs as someone playing controller would send them;
- generic requests of *every* API the codec knows (served or not), each field filled and each
  array holding two elements, so that every length and count of every message can be tampered
  with.

Names are drawn from small fixed sets (two stable topics that are produced to and fetched from,
four churn topics that are created, grown and deleted, two groups), so that a long run keeps
hitting the same state instead of growing it without end.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c

from broker.protocol import messages as m
from broker.protocol.api import API_SPECS, ApiKey
from broker.protocol.records import Compression, Record, build_batch
from broker.server.handlers import HANDLERS
from deploy.fuzz.trace import Field, trace

__all__ = ["CHURN_TOPICS", "GROUPS", "STABLE_TOPICS", "Seed", "Target", "build_corpus"]

STABLE_TOPICS = ("fuzz-0", "fuzz-1")  # created before the run, 3 partitions each; never deleted by seeds
STABLE_PARTITIONS = 3
CHURN_TOPICS = tuple(f"fuzz-tmp-{i}" for i in range(4))  # created, grown and deleted by seeds
GROUPS = ("fuzz-g0", "fuzz-g1")
# Partition counts nobody should get. Counts a broker would grant (up to 5,000 a request by
# default) are kept out, a mutation away included (validate-only flipped, a count one lower):
# creating thousands of partitions again and again would measure the disk, not the parser (on a
# slow disk 5,000 partitions take tens of seconds). One topic of 500 is created for real.
HUGE_COUNTS = (2**31 - 1, 2**31 - 2, 1_000_000, 100_000, 50_000)
VALIDATE_ONLY_COUNTS = (*HUGE_COUNTS, 5001)  # CreateTopics only: the limit plus one
LARGE_TOPIC, LARGE_COUNT = "fuzz-large", 500  # created for real, once per run (then it exists)
BAD_COUNTS = (-1, -2, -(2**31), 0)


@dataclass(frozen=True)
class Target:
    """What the corpus needs to know about the broker under test."""

    broker_id: int = 0
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # the stable topics' ids

    def topic_id(self, name: str) -> uuid.UUID:
        return self.topic_ids.get(name, uuid.UUID(int=0x5EED))


@dataclass(frozen=True, slots=True)
class Seed:
    api_key: int
    version: int
    header_version: int
    body: bytes
    fields: tuple[Field, ...]
    label: str
    silent: bool = False  # an acks=0 produce: the broker sends no answer


def _header_version(api_key: int, version: int) -> int:
    spec = API_SPECS.get(api_key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        return 1
    return spec.request_header_version(version)


def _served_versions(api_key: int) -> range:
    handler = HANDLERS[api_key]
    return range(handler.min_version, handler.max_version + 1)


def _seeds(api_key: int, label: str, message: Any, versions: Iterable[int] | None = None,
           *, silent: bool = False) -> Iterator[Seed]:
    for version in versions if versions is not None else _served_versions(api_key):
        body, fields = trace(message, version)
        yield Seed(api_key, version, _header_version(api_key, version), body, tuple(fields),
                   f"{ApiKey(api_key).name.lower()} v{version} {label}", silent)


# -- record batches ---------------------------------------------------------------------------

def _patched(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    """`batch` with one header field changed and its CRC made right again, so the broker's
    checks past the CRC (codec, count, bits) are what sees it."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def _batches() -> list[tuple[str, bytes]]:
    now = 1_700_000_000_000
    records = [Record(f"k{i}".encode(), b"v" * (i * 7), [("h", b"x")] if i % 2 else [], now + i) for i in range(5)]
    out = [("one record", build_batch([Record(None, b"fuzz", timestamp=now)]))]
    for codec in Compression:
        out.append((f"5 records {codec.name.lower()}", build_batch(records, compression=codec)))
    out.append(("idempotent", build_batch(records, producer_id=4242, producer_epoch=0, base_sequence=0)))
    out.append(("transactional bit", build_batch(records, producer_id=4243, producer_epoch=0, base_sequence=0,
                                                 is_transactional=True)))
    plain = build_batch(records)
    out.append(("control bit", _patched(plain, 21, ">h", 0x20)))
    out.append(("codec 7", _patched(plain, 21, ">h", 7)))
    out.append(("codec 5", _patched(plain, 21, ">h", 5)))
    out.append(("gzip flag on plain bytes", _patched(plain, 21, ">h", 1)))
    out.append(("record count lies", _patched(plain, 57, ">i", 500)))
    out.append(("negative record count", _patched(plain, 57, ">i", -1)))
    out.append(("last offset delta lies", _patched(plain, 23, ">i", 2**31 - 1)))
    out.append(("timestamp far future", build_batch(records, base_timestamp=now + 10 * 365 * 86_400_000)))
    out.append(("two batches", plain + build_batch([Record(b"a", b"b", timestamp=now)])))
    return out


# -- hand-made seeds of the served APIs ---------------------------------------------------------

def _produce(target: Target) -> Iterator[Seed]:
    P = m.ProduceRequest

    def request(records: bytes | None, *, acks: int = 1, topic: str = "fuzz-0", partition: int = 0) -> Any:
        return P(acks=acks, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])])

    for label, batch in _batches():
        yield from _seeds(ApiKey.PRODUCE, label, request(batch, acks=-1 if "idempotent" in label else 1))
    one = _batches()[0][1]
    yield from _seeds(ApiKey.PRODUCE, "acks=0", request(one, acks=0, topic="fuzz-1"), silent=True)
    yield from _seeds(ApiKey.PRODUCE, "acks=7", request(one, acks=7))
    yield from _seeds(ApiKey.PRODUCE, "null records", request(None))
    yield from _seeds(ApiKey.PRODUCE, "empty records", request(b""))
    yield from _seeds(ApiKey.PRODUCE, "unknown partition", request(one, partition=99))
    yield from _seeds(ApiKey.PRODUCE, "unknown topic", request(one, topic="fuzz-nope"))
    yield from _seeds(ApiKey.PRODUCE, "bad topic name", request(one, topic="../../etc"))
    yield from _seeds(ApiKey.PRODUCE, "two partitions", P(acks=1, timeout_ms=1000, topic_data=[P.TopicProduceData(
        name="fuzz-1", partition_data=[P.PartitionProduceData(index=i, records=one) for i in (1, 2)])]))
    yield from _seeds(ApiKey.PRODUCE, "transactional id", P(transactional_id="fuzz-txn", acks=-1, timeout_ms=1000,
                                                            topic_data=request(one).topic_data))


def _fetch(target: Target) -> Iterator[Seed]:
    F = m.FetchRequest

    def request(offset: int, *, max_bytes: int = 65536, wait: int = 0, partitions: Iterable[int] = (0,),
                topic: str = "fuzz-0", forgotten: bool = False) -> Any:
        return F(replica_id=-1, max_wait_ms=wait, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                 session_id=0, session_epoch=-1,
                 topics=[F.FetchTopic(topic=topic, topic_id=target.topic_id(topic), partitions=[
                     F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset,
                                      last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=32768)
                     for p in partitions])],
                 forgotten_topics_data=[F.ForgottenTopic(topic="fuzz-1", topic_id=target.topic_id("fuzz-1"),
                                                         partitions=[0])] if forgotten else [],
                 rack_id="")

    yield from _seeds(ApiKey.FETCH, "from 0", request(0))
    yield from _seeds(ApiKey.FETCH, "3 partitions", request(0, partitions=(0, 1, 2), topic="fuzz-1"))
    yield from _seeds(ApiKey.FETCH, "past the end", request(1 << 40, wait=5))
    yield from _seeds(ApiKey.FETCH, "negative offset", request(-5))
    yield from _seeds(ApiKey.FETCH, "1 MiB max", request(0, max_bytes=1 << 20))
    yield from _seeds(ApiKey.FETCH, "unknown topic", request(0, topic="fuzz-nope"))
    yield from _seeds(ApiKey.FETCH, "forgotten topics", request(0, forgotten=True))
    yield from _seeds(ApiKey.FETCH, "session", F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=4096,
                                                 session_id=77, session_epoch=3, topics=[]))


def _metadata(target: Target) -> Iterator[Seed]:
    M = m.MetadataRequest
    yield from _seeds(ApiKey.METADATA, "all topics", M(topics=None, allow_auto_topic_creation=False))
    yield from _seeds(ApiKey.METADATA, "no topics", M(topics=[], allow_auto_topic_creation=False))
    for name in (*STABLE_TOPICS, CHURN_TOPICS[0]):
        yield from _seeds(ApiKey.METADATA, name, M(topics=[M.MetadataRequestTopic(
            topic_id=target.topic_id(name) if name in target.topic_ids else uuid.UUID(int=0), name=name)],
            allow_auto_topic_creation=False))
    yield from _seeds(ApiKey.METADATA, "auto-create a churn topic", M(topics=[M.MetadataRequestTopic(
        name=CHURN_TOPICS[1])], allow_auto_topic_creation=True))
    yield from _seeds(ApiKey.METADATA, "invalid name", M(topics=[M.MetadataRequestTopic(name="bad/name..")],
                                                          allow_auto_topic_creation=True))


def _list_offsets(target: Target) -> Iterator[Seed]:
    L = m.ListOffsetsRequest
    for label, ts in (("latest", -1), ("earliest", -2), ("max timestamp", -3), ("by time", 1_700_000_000_000)):
        yield from _seeds(ApiKey.LIST_OFFSETS, label, L(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[
            L.ListOffsetsTopic(name="fuzz-0", partitions=[L.ListOffsetsPartition(
                partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1) for p in (0, 1)])]))


def _create_topics(target: Target) -> Iterator[Seed]:
    C = m.CreateTopicsRequest

    def topic(name: str, count: int, rf: int = 1, *, configs: dict[str, str | None] | None = None,
              assignments: list[tuple[int, list[int]]] | None = None) -> Any:
        return C.CreatableTopic(
            name=name, num_partitions=count, replication_factor=rf,
            assignments=[C.CreatableReplicaAssignment(partition_index=p, broker_ids=ids)
                         for p, ids in (assignments or [])],
            configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])

    def request(*topics: Any, validate_only: bool = False) -> Any:
        return C(topics=list(topics), timeout_ms=5000, validate_only=validate_only)

    small: dict[str, str | None] = {"segment.bytes": "1048576", "retention.bytes": "4194304"}
    for i, name in enumerate(CHURN_TOPICS):
        yield from _seeds(ApiKey.CREATE_TOPICS, f"{name} x{i + 1}", request(topic(name, i + 1, configs=small)))
    yield from _seeds(ApiKey.CREATE_TOPICS, "exists", request(topic(STABLE_TOPICS[0], 3)))
    for count in HUGE_COUNTS:
        yield from _seeds(ApiKey.CREATE_TOPICS, f"huge count {count}", request(topic(CHURN_TOPICS[3], count)))
    for count in VALIDATE_ONLY_COUNTS:  # from v1: v0 has no validate_only, it would create them
        yield from _seeds(ApiKey.CREATE_TOPICS, f"validate-only {count}",
                          request(topic(CHURN_TOPICS[2], count), validate_only=True),
                          [v for v in _served_versions(ApiKey.CREATE_TOPICS) if v >= 1])
    yield from _seeds(ApiKey.CREATE_TOPICS, f"large count {LARGE_COUNT}", request(topic(LARGE_TOPIC, LARGE_COUNT)))
    for count in BAD_COUNTS:
        yield from _seeds(ApiKey.CREATE_TOPICS, f"count {count}", request(topic(CHURN_TOPICS[0], count)))
    for rf in (-5, 0, 3, 32767):
        yield from _seeds(ApiKey.CREATE_TOPICS, f"replication factor {rf}", request(topic(CHURN_TOPICS[1], 1, rf)))
    yield from _seeds(ApiKey.CREATE_TOPICS, "assignments", request(topic(
        CHURN_TOPICS[2], -1, -1, assignments=[(0, [target.broker_id]), (1, [target.broker_id])])))
    yield from _seeds(ApiKey.CREATE_TOPICS, "assignment to unknown brokers", request(topic(
        CHURN_TOPICS[2], -1, -1, assignments=[(0, [999, 1000]), (5, [-1])])))
    yield from _seeds(ApiKey.CREATE_TOPICS, "bad configs", request(topic(
        CHURN_TOPICS[3], 1, configs={"cleanup.policy": "shred", "segment.bytes": "-1", "no.such.key": None})))
    yield from _seeds(ApiKey.CREATE_TOPICS, "duplicate topics", request(topic(CHURN_TOPICS[0], 1),
                                                                        topic(CHURN_TOPICS[0], 2)))
    yield from _seeds(ApiKey.CREATE_TOPICS, "many huge topics",
                      request(*(topic(f"{CHURN_TOPICS[3]}{'x' * i}", 2**31 - 1) for i in range(8))))
    yield from _seeds(ApiKey.CREATE_TOPICS, "invalid names", request(topic("", 1), topic("a" * 300, 1),
                                                                     topic("..", 1), topic("bad/name", 1)))


def _create_partitions(target: Target) -> Iterator[Seed]:
    C = m.CreatePartitionsRequest

    def request(name: str, count: int, *, validate_only: bool = False,
                assignments: list[list[int]] | None = None) -> Any:
        return C(topics=[C.CreatePartitionsTopic(
            name=name, count=count,
            assignments=None if assignments is None else [C.CreatePartitionsAssignment(broker_ids=a)
                                                          for a in assignments])],
            timeout_ms=5000, validate_only=validate_only)

    for i, name in enumerate(CHURN_TOPICS):
        yield from _seeds(ApiKey.CREATE_PARTITIONS, f"{name} to {i + 3}", request(name, i + 3))
    yield from _seeds(ApiKey.CREATE_PARTITIONS, "stable topic to 4", request(STABLE_TOPICS[1], 4, validate_only=True))
    for count in HUGE_COUNTS:
        yield from _seeds(ApiKey.CREATE_PARTITIONS, f"huge count {count}", request(CHURN_TOPICS[3], count))
    for count in HUGE_COUNTS:
        yield from _seeds(ApiKey.CREATE_PARTITIONS, f"validate-only {count}",
                          request(CHURN_TOPICS[2], count, validate_only=True))
    yield from _seeds(ApiKey.CREATE_PARTITIONS, f"large topic to {LARGE_COUNT + 1}, validate-only",
                      request(LARGE_TOPIC, LARGE_COUNT + 1, validate_only=True))
    for count in (*BAD_COUNTS, 1):
        yield from _seeds(ApiKey.CREATE_PARTITIONS, f"count {count}", request(CHURN_TOPICS[0], count))
    yield from _seeds(ApiKey.CREATE_PARTITIONS, "assignments", request(
        CHURN_TOPICS[1], 4, assignments=[[target.broker_id], [target.broker_id], [target.broker_id]]))
    yield from _seeds(ApiKey.CREATE_PARTITIONS, "bad assignments", request(
        CHURN_TOPICS[1], 6, assignments=[[999], [], [-1, -1]]))
    yield from _seeds(ApiKey.CREATE_PARTITIONS, "unknown topic", request("fuzz-nope", 2))


def _delete_topics(target: Target) -> Iterator[Seed]:
    D = m.DeleteTopicsRequest
    for name in CHURN_TOPICS:
        yield from _seeds(ApiKey.DELETE_TOPICS, name, D(topic_names=[name], timeout_ms=5000,
                                                          topics=[D.DeleteTopicState(name=name)]))
    yield from _seeds(ApiKey.DELETE_TOPICS, "unknown id", D(timeout_ms=5000, topics=[
        D.DeleteTopicState(name=None, topic_id=uuid.UUID(int=12345))], topic_names=["fuzz-nope"]))


def _groups(target: Target) -> Iterator[Seed]:
    subscription = bytes(m.ConsumerProtocolSubscription(topics=list(STABLE_TOPICS), user_data=None).encode(0))
    assignment = bytes(m.ConsumerProtocolAssignment(assigned_partitions=[
        m.ConsumerProtocolAssignment.TopicPartition(topic="fuzz-0", partitions=[0, 1, 2])]).encode(0))
    group = GROUPS[0]
    J = m.JoinGroupRequest
    # v4+ with no member id answers at once (MEMBER_ID_REQUIRED); older versions wait out the
    # initial rebalance delay, which the fuzzer's deadline allows for.
    yield from _seeds(ApiKey.JOIN_GROUP, "new member", J(
        group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="", protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=subscription)], reason="fuzz"), range(4, 10))
    yield from _seeds(ApiKey.JOIN_GROUP, "unknown member", J(
        group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="nobody",
        protocol_type="consumer", protocols=[J.JoinGroupRequestProtocol(name="range", metadata=subscription)]))
    yield from _seeds(ApiKey.JOIN_GROUP, "session too short", J(
        group_id=group, session_timeout_ms=1, rebalance_timeout_ms=1, member_id="", protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\xff" * 9)]))
    yield from _seeds(ApiKey.HEARTBEAT, "unknown member", m.HeartbeatRequest(
        group_id=group, generation_id=1, member_id="nobody", group_instance_id=None))
    L = m.LeaveGroupRequest
    yield from _seeds(ApiKey.LEAVE_GROUP, "unknown member", L(group_id=group, member_id="nobody", members=[
        L.MemberIdentity(member_id="nobody", group_instance_id=None),
        L.MemberIdentity(member_id="", group_instance_id="i")]))
    S = m.SyncGroupRequest
    yield from _seeds(ApiKey.SYNC_GROUP, "unknown member", S(
        group_id=group, generation_id=1, member_id="nobody", protocol_type="consumer", protocol_name="range",
        assignments=[S.SyncGroupRequestAssignment(member_id="nobody", assignment=assignment)]))
    yield from _seeds(ApiKey.DESCRIBE_GROUPS, "two groups", m.DescribeGroupsRequest(
        groups=[*GROUPS, ""], include_authorized_operations=True))
    yield from _seeds(ApiKey.LIST_GROUPS, "filtered", m.ListGroupsRequest(
        states_filter=["Stable", "Empty", "NoSuchState"], types_filter=["classic"]))
    yield from _seeds(ApiKey.LIST_GROUPS, "all", m.ListGroupsRequest())
    yield from _seeds(ApiKey.DELETE_GROUPS, "groups", m.DeleteGroupsRequest(groups_names=[GROUPS[1], "fuzz-nope"]))
    FC = m.FindCoordinatorRequest
    yield from _seeds(ApiKey.FIND_COORDINATOR, "group", FC(key=group, key_type=0, coordinator_keys=[group, GROUPS[1]]))
    yield from _seeds(ApiKey.FIND_COORDINATOR, "transaction", FC(key="txn", key_type=1, coordinator_keys=["txn"]))
    yield from _seeds(ApiKey.FIND_COORDINATOR, "key type 9", FC(key=group, key_type=9, coordinator_keys=[group]))


def _offsets(target: Target) -> Iterator[Seed]:
    OC = m.OffsetCommitRequest
    yield from _seeds(ApiKey.OFFSET_COMMIT, "admin commit", OC(
        group_id=GROUPS[1], generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
        topics=[OC.OffsetCommitRequestTopic(name="fuzz-0", partitions=[OC.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=5, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata="m" * p * 40) for p in (0, 1, 2)])]))
    yield from _seeds(ApiKey.OFFSET_COMMIT, "unknown topic and member", OC(
        group_id=GROUPS[0], generation_id_or_member_epoch=3, member_id="nobody", retention_time_ms=-1,
        topics=[OC.OffsetCommitRequestTopic(name="fuzz-nope", partitions=[OC.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=-7, committed_metadata=None)])]))
    OF = m.OffsetFetchRequest
    yield from _seeds(ApiKey.OFFSET_FETCH, "partitions", OF(
        group_id=GROUPS[1], topics=[OF.OffsetFetchRequestTopic(name="fuzz-0", partition_indexes=[0, 1, 2])],
        groups=[OF.OffsetFetchRequestGroup(group_id=GROUPS[1], member_id=None, member_epoch=-1, topics=[
            OF.OffsetFetchRequestTopics(name="fuzz-0", partition_indexes=[0, 1, 2])])], require_stable=True))
    yield from _seeds(ApiKey.OFFSET_FETCH, "all", OF(group_id=GROUPS[1], topics=None, groups=[
        OF.OffsetFetchRequestGroup(group_id=GROUPS[1], member_id=None, member_epoch=-1, topics=None)]),
        range(2, 10))
    OD = m.OffsetDeleteRequest
    yield from _seeds(ApiKey.OFFSET_DELETE, "partitions", OD(group_id=GROUPS[1], topics=[
        OD.OffsetDeleteRequestTopic(name="fuzz-0", partitions=[OD.OffsetDeleteRequestPartition(partition_index=9)])]))
    DR = m.DeleteRecordsRequest
    for label, offset in (("to high watermark", -1), ("to 1", 1), ("past the end", 1 << 50), ("negative", -9)):
        yield from _seeds(ApiKey.DELETE_RECORDS, label, DR(timeout_ms=1000, topics=[DR.DeleteRecordsTopic(
            name="fuzz-1", partitions=[DR.DeleteRecordsPartition(partition_index=2, offset=offset)])]))
    OL = m.OffsetForLeaderEpochRequest
    yield from _seeds(ApiKey.OFFSET_FOR_LEADER_EPOCH, "epochs", OL(replica_id=-1, topics=[OL.OffsetForLeaderTopic(
        topic="fuzz-0", partitions=[OL.OffsetForLeaderPartition(partition=p, current_leader_epoch=-1,
                                                                leader_epoch=e) for p, e in ((0, 0), (1, 99))])]))
    yield from _seeds(ApiKey.INIT_PRODUCER_ID, "idempotent", m.InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    yield from _seeds(ApiKey.INIT_PRODUCER_ID, "transactional", m.InitProducerIdRequest(
        transactional_id="fuzz-txn", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))


def _configs(target: Target) -> Iterator[Seed]:
    DC = m.DescribeConfigsRequest
    yield from _seeds(ApiKey.DESCRIBE_CONFIGS, "topic and broker", DC(resources=[
        DC.DescribeConfigsResource(resource_type=2, resource_name="fuzz-0", configuration_keys=None),
        DC.DescribeConfigsResource(resource_type=4, resource_name=str(target.broker_id),
                                   configuration_keys=["log.retention.ms", "no.such"]),
        DC.DescribeConfigsResource(resource_type=8, resource_name="root", configuration_keys=None),
        DC.DescribeConfigsResource(resource_type=77, resource_name="?", configuration_keys=[])],
        include_synonyms=True, include_documentation=True))
    AC = m.AlterConfigsRequest
    for validate_only in (False, True):
        yield from _seeds(ApiKey.ALTER_CONFIGS, f"churn topic validate_only={validate_only}", AC(resources=[
            AC.AlterConfigsResource(resource_type=2, resource_name=CHURN_TOPICS[0], configs=[
                AC.AlterableConfig(name="retention.ms", value="3600000"),
                AC.AlterableConfig(name="cleanup.policy", value="compact,delete")]),
            AC.AlterConfigsResource(resource_type=4, resource_name=str(target.broker_id), configs=[
                AC.AlterableConfig(name="log.retention.ms", value="1")])], validate_only=validate_only))
    IA = m.IncrementalAlterConfigsRequest
    yield from _seeds(ApiKey.INCREMENTAL_ALTER_CONFIGS, "operations", IA(resources=[
        IA.AlterConfigsResource(resource_type=2, resource_name=CHURN_TOPICS[1], configs=[
            IA.AlterableConfig(name="retention.bytes", config_operation=0, value="8388608"),
            IA.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
            IA.AlterableConfig(name="retention.ms", config_operation=1, value=None),
            IA.AlterableConfig(name="segment.ms", config_operation=9, value="x")])], validate_only=False))


def _cluster(target: Target) -> Iterator[Seed]:
    yield from _seeds(ApiKey.API_VERSIONS, "named", m.ApiVersionsRequest(
        client_software_name="causeway-fuzz", client_software_version="1.0"))
    yield from _seeds(ApiKey.API_VERSIONS, "bad software name", m.ApiVersionsRequest(
        client_software_name="not a valid name!", client_software_version=""))
    yield from _seeds(ApiKey.DESCRIBE_CLUSTER, "brokers", m.DescribeClusterRequest(
        include_cluster_authorized_operations=True, endpoint_type=1))


def _inter_broker(target: Target) -> Iterator[Seed]:
    """What a controller sends brokers, and brokers the controller, as someone playing controller
    would send it: this broker's own id as controller, every epoch from stale to the maximum, its
    stable partitions as the subject (become follower of nobody, stop and delete). Each must be
    refused without changing anything, and each refusal must not cost a log line of its own."""
    topic, topic_id = STABLE_TOPICS[0], target.topic_id(STABLE_TOPICS[0])
    me = target.broker_id
    epochs = (("stale epochs", 0, -1), ("maximum epochs", 2**31 - 1, 2**63 - 1))
    LI = m.LeaderAndIsrRequest
    for label, epoch, broker_epoch in epochs:
        yield from _seeds(ApiKey.LEADER_AND_ISR, f"{label}: follow broker 99", LI(
            controller_id=me, controller_epoch=epoch, broker_epoch=broker_epoch, type=0,
            topic_states=[LI.LeaderAndIsrTopicState(topic_name=topic, topic_id=topic_id, partition_states=[
                LI.LeaderAndIsrPartitionState(topic_name=topic, partition_index=p, controller_epoch=epoch, leader=99,
                                              leader_epoch=epoch, isr=[99, me], partition_epoch=epoch,
                                              replicas=[99, me], is_new=p == 0)
                for p in range(STABLE_PARTITIONS)])],
            live_leaders=[LI.LeaderAndIsrLiveLeader(broker_id=99, host_name="127.0.0.1", port=1)]))
    UM = m.UpdateMetadataRequest
    for label, epoch, broker_epoch in epochs:
        yield from _seeds(ApiKey.UPDATE_METADATA, f"{label}: topic led by broker 99", UM(
            controller_id=me, controller_epoch=epoch, broker_epoch=broker_epoch, type=0,
            topic_states=[UM.UpdateMetadataTopicState(topic_name=topic, topic_id=topic_id, partition_states=[
                UM.UpdateMetadataPartitionState(topic_name=topic, partition_index=0, controller_epoch=epoch,
                                                leader=99, leader_epoch=epoch, isr=[99], zk_version=epoch,
                                                replicas=[99], offline_replicas=[me])])],
            live_brokers=[UM.UpdateMetadataBroker(id=99, endpoints=[UM.UpdateMetadataEndpoint(
                port=1, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)], rack=None)]))
    SR = m.StopReplicaRequest
    for label, epoch, broker_epoch in epochs:
        yield from _seeds(ApiKey.STOP_REPLICA, f"{label}: delete the stable partitions", SR(
            controller_id=me, controller_epoch=epoch, broker_epoch=broker_epoch, delete_partitions=True,
            topic_states=[SR.StopReplicaTopicState(topic_name=topic, partition_states=[
                SR.StopReplicaPartitionState(partition_index=p, leader_epoch=-2, delete_partition=True)
                for p in range(STABLE_PARTITIONS)])]))
    yield from _seeds(ApiKey.CONTROLLED_SHUTDOWN, "this broker", m.ControlledShutdownRequest(
        broker_id=me, broker_epoch=-1))
    AP = m.AlterPartitionRequest
    yield from _seeds(ApiKey.ALTER_PARTITION, "shrink to broker 99", AP(broker_id=me, broker_epoch=-1, topics=[
        AP.TopicData(topic_name=topic, topic_id=topic_id, partitions=[AP.PartitionData(
            partition_index=0, leader_epoch=0, new_isr=[99], new_isr_with_epochs=[AP.BrokerState(
                broker_id=99, broker_epoch=-1)], leader_recovery_state=0, partition_epoch=0)])]))


# -- generic seeds of every API ---------------------------------------------------------------

def _filled(cls: Any, top: Any, target: Target, depth: int = 0) -> Any:
    """An instance of `cls` with every field set and every array holding two elements."""
    scalars: dict[str, Any] = {
        "string": "fuzz-generic", "int8": 0, "int16": 1, "uint16": 1, "int32": 1, "int64": 0, "bool": True,
        "float64": 0.5, "uuid": target.topic_id("fuzz-0"), "bytes": b"\x00\x01\x02",
        "records": build_batch([Record(None, b"generic")]),
    }
    obj = cls()
    for spec in cls.FIELDS:
        name, kind = spec[0], spec[1]
        base = kind.removeprefix("[]")
        nested = getattr(top, base, None) if base[:1].isupper() else None
        if nested is not None:
            value: Any = ([_filled(nested, top, target, depth + 1) for _ in range(2)] if kind.startswith("[]")
                          else _filled(nested, top, target, depth + 1))
        elif kind.startswith("[]"):
            value = [scalars[base], scalars[base]]
        else:
            value = scalars[kind]
        setattr(obj, name, value)
    return obj


def _generic(target: Target) -> Iterator[Seed]:
    for api_key, cls in sorted(m.REQUESTS.items()):
        message = _filled(cls, cls, target)
        if api_key in HANDLERS:
            versions: Iterable[int] = _served_versions(api_key)
        else:  # not served: the broker closes the connection; two versions are enough
            versions = sorted({cls.MIN_VERSION, cls.MAX_VERSION})
        yield from _seeds(api_key, "generic", message, versions)


def build_corpus(target: Target) -> dict[int, list[Seed]]:
    """Every seed, grouped by API key."""
    groups: dict[int, list[Seed]] = {}
    makers = (_produce, _fetch, _metadata, _list_offsets, _create_topics, _create_partitions, _delete_topics,
              _groups, _offsets, _configs, _cluster, _inter_broker, _generic)
    for make in makers:
        for seed in make(target):
            groups.setdefault(seed.api_key, []).append(seed)
    return groups
