"""MirrorMaker 2's record formats for its internal topics, so MM2's tools and operators can read
what Causeway writes (facts from Apache Kafka's mirror-client: Heartbeat, Checkpoint, OffsetSync).

STRING is an int16 length then UTF-8; every integer is big-endian. Heartbeat and Checkpoint values
start with an int16 version (0); OffsetSync values have none. Positions use Kafka Connect's JSON
offset records, as MM2's source task stores them in `mm2-offsets.<source>.internal`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from broker.protocol.errors import ProtocolError
from broker.protocol.primitives import Reader, Writer
from broker.protocol.records import DecodedRecord

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

#: A record key's or value's layout, as Kafka's mirror-client declares each as a Schema of
#: Fields: the attributes in wire order, each with its type (a Reader/Writer method's name).
Layout = tuple[tuple[str, Literal["string", "int32", "int64"]], ...]


class _Format:
    """A record of an MM2 internal topic: its key and value bytes, written and read by its
    class's layouts. `VERSIONED` names the record in errors when its value starts with an
    int16 version (0); None when it has none."""

    __slots__ = ()
    KEY: ClassVar[Layout]
    VALUE: ClassVar[Layout]
    VERSIONED: ClassVar[str | None] = None

    def key(self) -> bytes:
        return self._encode(self.KEY, versioned=False)

    def value(self) -> bytes:
        return self._encode(self.VALUE, versioned=self.VERSIONED is not None)

    def _encode(self, layout: Layout, *, versioned: bool) -> bytes:
        w = Writer()
        if versioned:
            w.int16(_VERSION)
        for name, kind in layout:
            getattr(w, kind)(getattr(self, name))
        return bytes(w.buf)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Self:
        """The record these bytes hold: the key's fields then the value's, in the dataclass's
        order. Raises ProtocolError (short, or an unknown version)."""
        k, v = Reader(key), Reader(value)
        if cls.VERSIONED is not None:
            version = v.int16()
            if version != _VERSION:
                raise ProtocolError(f"{cls.VERSIONED} value version {version} is not supported (only {_VERSION})")
        fields: list[Any] = [getattr(k, kind)() for _, kind in cls.KEY] + [getattr(v, kind)() for _, kind in cls.VALUE]
        return cls(*fields)


@dataclass(frozen=True, slots=True)
class Heartbeat(_Format):
    source_alias: str
    target_alias: str
    timestamp_ms: int

    KEY: ClassVar[Layout] = (("source_alias", "string"), ("target_alias", "string"))
    VALUE: ClassVar[Layout] = (("timestamp_ms", "int64"),)
    VERSIONED: ClassVar[str | None] = "heartbeat"


@dataclass(frozen=True, slots=True)
class Checkpoint(_Format):
    """A consumer group's position, upstream and translated downstream (topic: the remote name)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    KEY: ClassVar[Layout] = (("group", "string"), ("topic", "string"), ("partition", "int32"))
    VALUE: ClassVar[Layout] = (("upstream_offset", "int64"), ("downstream_offset", "int64"), ("metadata", "string"))
    VERSIONED: ClassVar[str | None] = "checkpoint"


@dataclass(frozen=True, slots=True)
class OffsetSync(_Format):
    """Upstream offset U of a source partition was written downstream at offset D."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    KEY: ClassVar[Layout] = (("topic", "string"), ("partition", "int32"))
    VALUE: ClassVar[Layout] = (("upstream_offset", "int64"), ("downstream_offset", "int64"))


def encode_position(source_alias: str, topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    """Connect's offset record for a mirrored partition: the last upstream offset written."""
    key = [CONNECTOR_NAME, {"cluster": source_alias, "partition": partition, "topic": topic}]
    return (json.dumps(key, separators=(",", ":")).encode(),
            json.dumps({"offset": offset}, separators=(",", ":")).encode())


def fold_positions(records: Iterable[DecodedRecord], cluster: str) -> dict[tuple[str, int], int]:
    """Each (topic, partition)'s newest position of `cluster` in the records of a positions
    topic, in offset order (a tombstone forgets it; other records are skipped)."""
    positions: dict[tuple[str, int], int] = {}
    for record in records:
        decoded = decode_position(record.key or b"", record.value)
        if decoded is None or decoded[0] != cluster:
            continue
        _, topic, partition, offset = decoded
        if offset is None:
            positions.pop((topic, partition), None)
        else:
            positions[(topic, partition)] = offset
    return positions


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
