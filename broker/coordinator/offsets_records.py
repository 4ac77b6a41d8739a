"""The records of Kafka's internal `__consumer_offsets` topic, in Kafka's own format, so tools
that read that topic (kafka-console-consumer's formatters, Burrow, ...) understand ours.

Keys start with an int16 version: 0 and 1 are offset commits (group, topic, partition), 2 is a
group's metadata (group). Values are versioned the same way; a null value is a tombstone.
STRING is an int16 length and UTF-8, BYTES an int32 length.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import Reader, Writer

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_key",
    "decode_group_metadata",
    "decode_offset_commit",
    "java_string_hash",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3  # what Kafka writes unless an explicit expire time is set
GROUP_METADATA_VALUE_VERSION = 3


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group, as Kafka computes it: Utils.abs of the
    hash (the absolute value, with Integer.MIN_VALUE mapped to 0), modulo the partition count."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        w = Writer()
        w.int16(OFFSET_COMMIT_KEY_VERSION)
        w.string(self.group)
        w.string(self.topic)
        w.int32(self.partition)
        return bytes(w.buf)


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str

    def encode(self) -> bytes:
        w = Writer()
        w.int16(GROUP_METADATA_KEY_VERSION)
        w.string(self.group)
        return bytes(w.buf)


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1
    # Where this commit's record sits in `__consumer_offsets` (-1: not written yet). Not part of
    # the record: the coordinator keeps it to order a plain commit against a transactional one
    # decided later (Kafka's OffsetAndMetadata.recordOffset), and two values are equal without it.
    record_offset: int = field(default=-1, compare=False)

    def written_at(self, record_offset: int) -> OffsetCommitValue:
        """This value, known to sit at `record_offset` of its `__consumer_offsets` partition."""
        return replace(self, record_offset=record_offset)

    def encode(self) -> bytes:
        w = Writer()
        version = 1 if self.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
        w.int16(version)
        w.int64(self.offset)
        if version >= 3:
            w.int32(self.leader_epoch)
        w.string(self.metadata)
        w.int64(self.commit_timestamp)
        if version == 1:
            w.int64(self.expire_timestamp)
        return bytes(w.buf)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)

    def encode(self) -> bytes:
        w = Writer()
        w.int16(GROUP_METADATA_VALUE_VERSION)
        w.string(self.protocol_type)
        w.int32(self.generation)
        w.nullable_string(self.protocol)
        w.nullable_string(self.leader)
        w.int64(self.current_state_timestamp)
        w.int32(len(self.members))
        for m in self.members:
            w.string(m.member_id)
            w.nullable_string(m.group_instance_id)
            w.string(m.client_id)
            w.string(m.client_host)
            w.int32(m.rebalance_timeout)
            w.int32(m.session_timeout)
            w.bytes_(m.subscription)
            w.bytes_(m.assignment)
        return bytes(w.buf)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a `__consumer_offsets` record; None for key versions this broker ignores."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit(data: bytes) -> OffsetCommitValue:
    """An offset commit value of any version Kafka writes (0-4; 4 is flexible)."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise ProtocolError(f"offset commit value version {version}")
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.compact_string() if version >= 4 else r.string()
    timestamp = r.int64()
    expire = r.int64() if version == 1 else -1
    return OffsetCommitValue(offset, metadata, timestamp, epoch, expire)


def decode_group_metadata(data: bytes) -> GroupMetadataValue:
    """A group metadata value of any version Kafka writes (0-4; 4 is flexible)."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise ProtocolError(f"group metadata value version {version}")
    flexible = version >= 4

    def string() -> str:
        return r.compact_string() if flexible else r.string()

    def nullable_string() -> str | None:
        return r.compact_nullable_string() if flexible else r.nullable_string()

    def blob() -> bytes:
        return bytes(r.compact_bytes_view() if flexible else r.bytes_view())

    protocol_type = string()
    generation = r.int32()
    protocol = nullable_string()
    leader = nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length(compact=flexible)):
        member_id = string()
        instance = nullable_string() if version >= 3 else None
        client_id = string()
        host = string()
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        subscription = blob()
        assignment = blob()
        if flexible:
            r.skip_tagged_fields()
        members.append(MemberMetadata(member_id, instance, client_id, host, rebalance, session, subscription,
                                      assignment))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
