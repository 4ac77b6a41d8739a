"""MirrorMaker 2's record formats for its internal topics, so MM2's tools and operators can read
what Causeway writes (facts from Apache Kafka's mirror-client: Heartbeat, Checkpoint, OffsetSync).

STRING is an int16 length then UTF-8; every integer is big-endian. Heartbeat and Checkpoint values
start with an int16 version (0); OffsetSync values have none. Positions use Kafka Connect's JSON
offset records, as MM2's source task stores them in `mm2-offsets.<source>.internal`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import Reader, Writer

__all__ = [
    "CONNECTOR_NAME",
    "Checkpoint",
    "Heartbeat",
    "OffsetSync",
    "decode_position",
    "encode_position",
]

CONNECTOR_NAME = "MirrorSourceConnector"
_VERSION = 0


def _check_version(r: Reader, what: str) -> None:
    version = r.int16()
    if version != _VERSION:
        raise ProtocolError(f"{what} value version {version} is not supported (only {_VERSION})")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        w = Writer()
        w.string(self.source_alias)
        w.string(self.target_alias)
        return bytes(w.buf)

    def value(self) -> bytes:
        w = Writer()
        w.int16(_VERSION)
        w.int64(self.timestamp_ms)
        return bytes(w.buf)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = Reader(key), Reader(value)
        source, target = k.string(), k.string()
        _check_version(v, "heartbeat")
        return cls(source, target, v.int64())


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A consumer group's position, upstream and translated downstream (topic: the remote name)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        w = Writer()
        w.string(self.group)
        w.string(self.topic)
        w.int32(self.partition)
        return bytes(w.buf)

    def value(self) -> bytes:
        w = Writer()
        w.int16(_VERSION)
        w.int64(self.upstream_offset)
        w.int64(self.downstream_offset)
        w.string(self.metadata)
        return bytes(w.buf)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = Reader(key), Reader(value)
        group, topic, partition = k.string(), k.string(), k.int32()
        _check_version(v, "checkpoint")
        upstream, downstream = v.int64(), v.int64()
        return cls(group, topic, partition, upstream, downstream, v.string())


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """Upstream offset U of a source partition was written downstream at offset D."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        w = Writer()
        w.string(self.topic)
        w.int32(self.partition)
        return bytes(w.buf)

    def value(self) -> bytes:
        w = Writer()
        w.int64(self.upstream_offset)
        w.int64(self.downstream_offset)
        return bytes(w.buf)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = Reader(key), Reader(value)
        topic, partition = k.string(), k.int32()
        return cls(topic, partition, v.int64(), v.int64())


def encode_position(source_alias: str, topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    """Connect's offset record for a mirrored partition: the last upstream offset written."""
    key = [CONNECTOR_NAME, {"cluster": source_alias, "partition": partition, "topic": topic}]
    return (json.dumps(key, separators=(",", ":")).encode(),
            json.dumps({"offset": offset}, separators=(",", ":")).encode())


def decode_position(key: bytes, value: bytes | None) -> tuple[str, str, int, int | None] | None:
    """(cluster, topic, partition, offset or None for a tombstone), or None for a record that is
    not a mirror position (another connector's, or malformed)."""
    try:
        parsed = json.loads(key)
        if not (isinstance(parsed, list) and len(parsed) == 2 and isinstance(parsed[1], dict)):
            return None
        where = parsed[1]
        cluster, topic, partition = where["cluster"], where["topic"], where["partition"]
        offset = None if value is None else json.loads(value)["offset"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (isinstance(cluster, str) and isinstance(topic, str) and isinstance(partition, int)):
        return None
    if offset is not None and not isinstance(offset, int):
        return None
    return cluster, topic, partition, offset
