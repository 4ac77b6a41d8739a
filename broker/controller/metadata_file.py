"""The standalone controller's metadata on disk: a snapshot and a log of changes, read strictly.

Two files in the first log dir, as KRaft keeps its metadata (a log of records, periodically
folded into a snapshot, replayed at start):

- ``cluster-metadata.json``, the **snapshot**: one JSON document with every topic's id,
  partitions and config overrides and the producer-id block handed out last, as of the log offset
  ``end_offset`` (the first record it does not include). Written atomically (temp file, fsync,
  rename, fsync of the directory) when the log is compacted; format version 2. Version 1, the
  document earlier versions rewrote on every change, is read once and migrated.
- ``cluster-metadata.log``, the **log**: one line per batch of records appended since the
  snapshot, ``<crc32c, 8 hex digits> <JSON>``, the JSON ``{"offset": first record's offset,
  "records": [...]}``. Records carry Kafka's KRaft names (TopicRecord, PartitionRecord,
  ConfigRecord, RemoveTopicRecord, ProducerIdsRecord). A batch is one ``write`` and one fsync, and
  the next batch is written only once that fsync returned: a crash can only tear the last line.

Neither file can be silently recreated: a broker that started without them would forget its topics
(their logs would stay on disk, unserved) and could hand out producer ids again. So what does not
read back as what this module writes stops the broker with a :class:`StartupError` that names the
file, the byte offset, what is wrong and what to do. The one exception is a torn last line of the
log, what a crash in the middle of an append leaves: nothing in it was acknowledged, so it is cut
(kept beside the log, logged with its byte offset) and the broker starts.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import crc32c

from broker.atomic_file import write_atomically
from broker.config import StartupError
from broker.controller.model import PartitionInfo, TopicInfo, validate_topic_name
from broker.protocol.errors import KafkaError

__all__ = [
    "FORMAT_VERSION", "LOG_FILE", "SNAPSHOT_FILE", "ConfigRecord", "Loaded", "MetadataImage", "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord", "Record", "RemoveTopicRecord", "TopicRecord", "decode", "encode", "encode_batch", "load",
    "read",
]

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "cluster-metadata.json"
LOG_FILE = "cluster-metadata.log"
FORMAT_VERSION = 2
_MIGRATED_VERSION = 1  # the whole document rewritten on every change: read once, then snapshot + log
# Far above any count a broker allows (max.broker.partitions), yet a bound: a damaged file must
# not make the broker build millions of objects before it notices.
_MAX_ENTRIES = 10_000_000
# The longest line the log is read with: a batch holds the changes of concurrent admin requests,
# each bounded by the partition limits, so whole lines stay far below it; a damaged file without
# newlines is read in pieces of this size, never whole.
MAX_LINE_BYTES = 256 << 20
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


# -- records ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic was created, with its partitions and config overrides (KRaft: TopicRecord and its
    PartitionRecords, one record here so that a creation is never half replayed)."""

    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """Partitions were added to a topic (CreatePartitions): the new ones, in order."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A topic's config overrides were replaced by ``configs``."""

    name: str
    topic_id: uuid.UUID
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A partition's leader epoch was raised (KRaft's PartitionChangeRecord; the standalone
    broker's one replica keeps leading, so only the epoch changes: a link source's, KIP-1279)."""

    name: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """Producer ids below ``producer_id_block_end`` may have been handed out."""

    producer_id_block_end: int


Record = TopicRecord | PartitionRecord | PartitionChangeRecord | ConfigRecord | RemoveTopicRecord | ProducerIdsRecord


class _Bad(Exception):
    """What is wrong with the document or a record, as a phrase ("topics.orders.partitions[3]: ...")."""


class MetadataImage:
    """The metadata as of some log offset, with the indexes that keep every check O(1).

    KRaft's MetadataImage: start-up replays the snapshot and the log into one, the controller
    applies each change to it before the change is durable (a concurrent request sees a name as
    taken), and undoes it when the write fails (:meth:`apply` returns the undo).
    """

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.producer_id_block_end = 0
        self.partition_count = 0
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        # Topic names with '.' folded to '_' (they are the same in metric names): a new name that
        # folds to an existing one's is refused, so this is a lookup, not a scan of every topic.
        self._folded: dict[str, set[str]] = {}

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def colliding(self, name: str) -> str | None:
        """An existing topic, other than ``name``, whose name folds to the same metric name."""
        others = self._folded.get(name.replace(".", "_"), set()) - {name}
        return min(others) if others else None

    def apply(self, record: Record) -> Callable[[], None]:
        """Apply ``record``; returns what undoes it. Raises ValueError, changing nothing, when the
        record does not fit this image (a topic that exists already, or does not, another id)."""
        if isinstance(record, ProducerIdsRecord):
            before = self.producer_id_block_end
            if record.producer_id_block_end < before:
                raise ValueError(f"producer id block end {record.producer_id_block_end} is below {before}")
            self.producer_id_block_end = record.producer_id_block_end
            return lambda: setattr(self, "producer_id_block_end", before)
        name = record.topic.name if isinstance(record, TopicRecord) else record.name
        previous = self.topics.get(name)
        self._put(name, self._applied(record, previous))
        return lambda: self._put(name, previous)

    def _applied(self, record: Record, current: TopicInfo | None) -> TopicInfo | None:
        if isinstance(record, TopicRecord):
            if current is not None:
                raise ValueError(f"topic '{current.name}' exists already")
            holder = self._by_id.get(record.topic.topic_id)
            if holder is not None:
                raise ValueError(f"topic id {record.topic.topic_id} is taken by '{holder.name}'")
            return record.topic
        assert not isinstance(record, ProducerIdsRecord)
        if current is None or current.topic_id != record.topic_id:
            raise ValueError(f"no topic '{record.name}' with id {record.topic_id}")
        if isinstance(record, RemoveTopicRecord):
            return None
        if isinstance(record, ConfigRecord):
            return TopicInfo(current.name, current.topic_id, current.partitions, dict(record.configs),
                             current.is_internal)
        if isinstance(record, PartitionChangeRecord):
            return _with_leader_epoch(current, record.partition, record.leader_epoch)
        expected = len(current.partitions)
        if [p.partition for p in record.partitions] != list(range(expected, expected + len(record.partitions))):
            raise ValueError(f"topic '{record.name}' has {expected} partitions; added partitions must follow them")
        return TopicInfo(current.name, current.topic_id, current.partitions + record.partitions, current.configs,
                         current.is_internal)

    def _put(self, name: str, topic: TopicInfo | None) -> None:
        old = self.topics.pop(name, None)
        folded = name.replace(".", "_")
        if old is not None:
            self._by_id.pop(old.topic_id, None)
            self.partition_count -= len(old.partitions)
            names = self._folded[folded]
            names.discard(name)
            if not names:
                del self._folded[folded]
        if topic is not None:
            self.topics[name] = topic
            self._by_id[topic.topic_id] = topic
            self.partition_count += len(topic.partitions)
            self._folded.setdefault(folded, set()).add(name)


def _with_leader_epoch(topic: TopicInfo, index: int, leader_epoch: int) -> TopicInfo:
    """``topic`` with partition ``index`` at ``leader_epoch``; ValueError when it has no such
    partition or the epoch would not go up (epochs never go back)."""
    if not 0 <= index < len(topic.partitions):
        raise ValueError(f"topic '{topic.name}' has no partition {index}")
    old = topic.partitions[index]
    if leader_epoch <= old.leader_epoch:
        raise ValueError(f"{topic.name}-{index}: leader epoch {leader_epoch} is not above {old.leader_epoch}")
    new = PartitionInfo(old.partition, old.leader, leader_epoch, old.replicas, old.isr, old.partition_epoch)
    partitions = topic.partitions[:index] + (new,) + topic.partitions[index + 1:]
    return TopicInfo(topic.name, topic.topic_id, partitions, topic.configs, topic.is_internal)


# -- the snapshot ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StoredMetadata:
    """A decoded snapshot: the image as of ``end_offset`` (the first log record it lacks)."""

    producer_id_block_end: int
    topics: dict[str, TopicInfo]
    end_offset: int = 0
    version: int = FORMAT_VERSION


def _advice(path: Path) -> str:
    return (
        f"{path} holds every topic's id, partitions and config overrides; the broker will not "
        "start without it rather than lose them. Restore the file from a backup, or repair it "
        "by hand. To start with no topics instead, move it away: the partition directories stay "
        "on disk, and topics created again with the same name and partition count take them back "
        "(their config overrides must be set again)."
    )


def read(path: Path) -> StoredMetadata | None:
    """The snapshot in ``path``, None when the file does not exist (a new data dir).

    Raises StartupError naming the file when it cannot be read or is not what :func:`encode`
    writes (empty, binary, truncated JSON, wrong types, unknown format version).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StartupError(f"cannot read {path}: {exc.strerror or exc}. {_advice(path)}") from None
    try:
        return decode(raw)
    except _Bad as exc:
        raise StartupError(f"{path} is damaged: {exc}. {_advice(path)}") from None


def decode(raw: bytes) -> StoredMetadata:
    """Raises _Bad saying what is wrong."""
    obj = _json_object(raw, "the file")
    version = obj.get("version")
    if version not in (FORMAT_VERSION, _MIGRATED_VERSION):
        raise _Bad(f"format version {version!r}, expected {FORMAT_VERSION}")
    block_end = _int(obj.get("producer_id_block_end", 0), "producer_id_block_end", 0, _INT64_MAX)
    end_offset = 0 if version == _MIGRATED_VERSION else _int(obj.get("end_offset"), "end_offset", 0, _INT64_MAX)
    topics_doc = _dict(obj.get("topics"), "topics")
    if len(topics_doc) > _MAX_ENTRIES:
        raise _Bad(f"topics: {len(topics_doc)} entries")
    topics: dict[str, TopicInfo] = {}
    for name, entry in topics_doc.items():
        topics[name] = _topic(name, entry, f"topics.{name}")
    return StoredMetadata(block_end, topics, end_offset, version)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    if not raw.strip():
        raise _Bad(f"{what} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"byte {exc.start} is not UTF-8 text (binary content)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    except RecursionError:
        raise _Bad("JSON nested too deeply") from None
    return _dict(doc, "the document")


def _topic(name: str, entry: object, where: str) -> TopicInfo:
    problem = validate_topic_name(name)
    if problem is not None:
        raise _Bad(f"{where}: {problem}")
    doc = _dict(entry, where)
    internal = doc.get("internal", False)
    if not isinstance(internal, bool):
        raise _Bad(f"{where}.internal: expected true or false, got {_kind(internal)}")
    return TopicInfo(name=name, topic_id=_uuid(doc.get("topic_id"), f"{where}.topic_id"),
                     partitions=_partitions(doc.get("partitions"), f"{where}.partitions", 0),
                     configs=_configs(doc.get("configs", {}), f"{where}.configs"), is_internal=internal)


def _partitions(value: object, where: str, first: object) -> tuple[PartitionInfo, ...]:
    if not isinstance(value, list) or not value:
        raise _Bad(f"{where}: expected a non-empty list, got {_kind(value)}")
    if len(value) > _MAX_ENTRIES:
        raise _Bad(f"{where}: {len(value)} entries")
    partitions = []
    first = _int(first, f"{where}[0].partition", 0, _INT32_MAX)
    for i, p_doc in enumerate(value, start=first):
        at = f"{where}[{i - first}]"
        p = _dict(p_doc, at)
        index = _int(p.get("partition"), f"{at}.partition", 0, _INT32_MAX)
        if index != i:
            raise _Bad(f"{at}.partition: {index}, expected {i} (partitions in order, none missing)")
        partitions.append(PartitionInfo(
            partition=index,
            leader=_int(p.get("leader"), f"{at}.leader", -1, _INT32_MAX),
            leader_epoch=_int(p.get("leader_epoch"), f"{at}.leader_epoch", 0, _INT32_MAX),
            replicas=_ids(p.get("replicas"), f"{at}.replicas"),
            isr=_ids(p.get("isr"), f"{at}.isr"),
        ))
    return tuple(partitions)


def _configs(value: object, where: str) -> dict[str, str]:
    return {k: _str(v, f"{where}.{k}") for k, v in _dict(value, where).items()}


def _uuid(value: object, where: str) -> uuid.UUID:
    try:
        return uuid.UUID(_str(value, where))
    except ValueError:
        raise _Bad(f"{where}: not a UUID") from None


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__)


def _dict(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where}: expected an object, got {_kind(value)}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{where}: expected a string, got {_kind(value)}")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{where}: expected a number, got {_kind(value)}")
    if not low <= value <= high:
        raise _Bad(f"{where}: {value} is outside [{low}, {high}]")
    return value


def _ids(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 32767:
        raise _Bad(f"{where}: expected a list of broker ids, got {_kind(value)}")
    return tuple(_int(v, f"{where}[{i}]", 0, _INT32_MAX) for i, v in enumerate(value))


def _partition_doc(p: PartitionInfo) -> dict[str, Any]:
    return {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr)}


def _topic_doc(t: TopicInfo) -> dict[str, Any]:
    return {"topic_id": str(t.topic_id), "internal": t.is_internal, "configs": dict(t.configs),
            "partitions": [_partition_doc(p) for p in t.partitions]}


def encode(cluster_id: str, producer_id_block_end: int, topics: Mapping[str, TopicInfo], end_offset: int = 0) -> str:
    """The snapshot document as of ``end_offset``."""
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "cluster_id": cluster_id,
        "end_offset": end_offset,
        "producer_id_block_end": producer_id_block_end,
        "topics": {t.name: _topic_doc(t) for t in sorted(topics.values(), key=lambda t: t.name)},
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


# -- the log -----------------------------------------------------------------------------------

def _record_doc(record: Record) -> dict[str, Any]:
    if isinstance(record, TopicRecord):
        return {"type": "TopicRecord", "name": record.topic.name, "topic": _topic_doc(record.topic)}
    if isinstance(record, ProducerIdsRecord):
        return {"type": "ProducerIdsRecord", "producer_id_block_end": record.producer_id_block_end}
    doc: dict[str, Any] = {"type": type(record).__name__, "name": record.name, "topic_id": str(record.topic_id)}
    if isinstance(record, PartitionRecord):
        doc["partitions"] = [_partition_doc(p) for p in record.partitions]
    elif isinstance(record, ConfigRecord):
        doc["configs"] = dict(record.configs)
    elif isinstance(record, PartitionChangeRecord):
        doc["partition"], doc["leader_epoch"] = record.partition, record.leader_epoch
    return doc


def encode_batch(first_offset: int, records: Sequence[Record]) -> bytes:
    """One log line: the records at offsets ``first_offset``, ``first_offset + 1``, ..."""
    payload = json.dumps({"offset": first_offset, "records": [_record_doc(r) for r in records]},
                         separators=(",", ":"), sort_keys=True).encode("utf-8")
    return b"%08x %s\n" % (crc32c.crc32c(payload), payload)


def _decode_record(doc: dict[str, Any], where: str) -> Record:
    kind = doc.get("type")
    if kind == "ProducerIdsRecord":
        return ProducerIdsRecord(_int(doc.get("producer_id_block_end"), f"{where}.producer_id_block_end", 0,
                                      _INT64_MAX))
    name = _str(doc.get("name"), f"{where}.name")
    if kind == "TopicRecord":
        return TopicRecord(_topic(name, doc.get("topic"), f"{where}.topic"))
    topic_id = _uuid(doc.get("topic_id"), f"{where}.topic_id")
    if kind == "RemoveTopicRecord":
        return RemoveTopicRecord(name, topic_id)
    if kind == "ConfigRecord":
        return ConfigRecord(name, topic_id, _configs(doc.get("configs"), f"{where}.configs"))
    if kind == "PartitionChangeRecord":
        return PartitionChangeRecord(name, topic_id, _int(doc.get("partition"), f"{where}.partition", 0, _INT32_MAX),
                                     _int(doc.get("leader_epoch"), f"{where}.leader_epoch", 0, _INT32_MAX))
    if kind == "PartitionRecord":
        parts = doc.get("partitions")
        first = parts[0].get("partition") if isinstance(parts, list) and parts and isinstance(parts[0], dict) else 0
        # Added partitions continue the topic's: the index of the first one says where.
        return PartitionRecord(name, topic_id, _partitions(parts, f"{where}.partitions", first))
    raise _Bad(f"{where}.type: unknown record type {kind!r}")


def _decode_line(line: bytes) -> tuple[int, list[Record]]:
    """A whole log line: (first offset, records). Raises _Bad: torn, CRC mismatch, not a batch."""
    if not line.endswith(b"\n"):
        raise _Bad("the line has no end (a write cut short)")
    head, space, payload = line[:-1].partition(b" ")
    if not space or len(head) != 8:
        raise _Bad("no CRC at the start of the line")
    try:
        crc = int(head, 16)
    except ValueError:
        raise _Bad("no CRC at the start of the line") from None
    if crc32c.crc32c(payload) != crc:
        raise _Bad(f"CRC mismatch (stored {crc:08x}, computed {crc32c.crc32c(payload):08x})")
    doc = _json_object(payload, "the batch")
    first = _int(doc.get("offset"), "offset", 0, _INT64_MAX)
    docs = doc.get("records")
    if not isinstance(docs, list) or not docs:
        raise _Bad(f"records: expected a non-empty list, got {_kind(docs)}")
    return first, [_decode_record(_dict(r, f"records[{i}]"), f"records[{i}]") for i, r in enumerate(docs)]


@dataclass(slots=True)
class Loaded:
    """What start-up found: the image, where the log goes on, what it had to do to get there."""

    image: MetadataImage
    next_offset: int  # offset of the next record appended
    log_bytes: int  # valid bytes of the log (after any cut)
    snapshot_bytes: int
    migrated: bool = False  # a version-1 document: the caller writes it as a snapshot now
    notes: list[str] = field(default_factory=list)


def load(directory: Path, check_configs: Callable[[Mapping[str, str]], None]) -> Loaded:
    """Read the snapshot, replay the log on it; cut a torn last line (kept beside the log).

    ``check_configs`` raises KafkaError (INVALID_CONFIG) saying why a topic's overrides cannot be
    used (the broker would fail to open its logs); the StartupError then names the file, the topic
    and the byte offset. Blocking (reads and, for a torn tail, writes and fsyncs): call it in a worker
    thread. Raises StartupError for anything else that is not what this module writes.
    """
    snapshot_path, log_path = directory / SNAPSHOT_FILE, directory / LOG_FILE
    stored = read(snapshot_path)
    image = MetadataImage()
    loaded = Loaded(image, 0, 0, 0)
    if stored is not None:
        image.producer_id_block_end = stored.producer_id_block_end
        for topic in stored.topics.values():
            where = f"{snapshot_path} is damaged"
            _check(check_configs, topic.name, topic.configs, where, _advice(snapshot_path))
            try:
                image.apply(TopicRecord(topic))
            except ValueError as exc:
                raise StartupError(f"{where}: {exc}. {_advice(snapshot_path)}") from None
        loaded.next_offset = stored.end_offset
        loaded.migrated = stored.version == _MIGRATED_VERSION
        loaded.snapshot_bytes = snapshot_path.stat().st_size
    try:
        f = open(log_path, "rb")  # noqa: SIM115 - closed below, after a cut that needs the length
    except FileNotFoundError:
        return loaded
    except OSError as exc:
        raise StartupError(f"cannot read {log_path}: {exc.strerror or exc}") from None
    with f:
        torn = _replay(f, log_path, loaded, check_configs)
        size = os.fstat(f.fileno()).st_size
    if torn is not None:
        _cut(log_path, loaded.log_bytes, size, torn, loaded)
    return loaded


def _log_advice(path: Path) -> str:
    return (f"{path} holds the topic changes made since {SNAPSHOT_FILE} was written; the broker will not start "
            "without them rather than lose acknowledged topics. Restore the data dir from a backup; or, to keep "
            "what precedes the damage, cut the file at that byte (truncate -s BYTE) and start again: the topics "
            "changed by what was cut must then be checked by hand.")


def _replay(f: BinaryIO, path: Path, loaded: Loaded, check_configs: Callable[[Mapping[str, str]], None]) -> str | None:
    """Apply every whole line of the log; returns why the last line is torn, None when it is whole."""
    image, covered = loaded.image, loaded.next_offset
    pos, number, bad = 0, 0, None
    while line := f.readline(MAX_LINE_BYTES):
        number += 1
        where = f"{path} is damaged at byte {pos} (line {number})"
        try:
            first, records = _decode_line(line)
        except _Bad as exc:
            if bad is None:
                bad = (pos, number, str(exc))
            pos += len(line)
            continue
        if bad is not None:
            # A whole batch after a bad one: not a write cut short by a crash (the next batch is
            # written only after the previous one's fsync), but damage to acknowledged changes.
            raise StartupError(f"{path} is damaged at byte {bad[0]} (line {bad[1]}): {bad[2]}, and whole records "
                               f"follow it (line {number}). {_log_advice(path)}")
        pos += len(line)
        if first + len(records) <= covered:
            loaded.log_bytes = pos  # written before the snapshot that holds them (a crash before the log was reset)
            continue
        if first != loaded.next_offset:
            raise StartupError(f"{where}: record offset {first}, expected {loaded.next_offset} (records are missing). "
                               f"{_log_advice(path)}")
        for i, record in enumerate(records):
            if isinstance(record, TopicRecord | ConfigRecord):
                configs = record.topic.configs if isinstance(record, TopicRecord) else record.configs
                name = record.topic.name if isinstance(record, TopicRecord) else record.name
                _check(check_configs, name, configs, f"{where}, record offset {first + i}", _log_advice(path))
            try:
                image.apply(record)
            except ValueError as exc:
                raise StartupError(f"{where}, record offset {first + i}: {exc}. {_log_advice(path)}") from None
        loaded.next_offset = first + len(records)
        loaded.log_bytes = pos
    return None if bad is None else f"line {bad[1]}: {bad[2]}"


def _check(check_configs: Callable[[Mapping[str, str]], None], name: str, configs: Mapping[str, str], where: str,
           advice: str) -> None:
    try:
        check_configs(configs)
    except KafkaError as exc:
        raise StartupError(f"{where}: topic '{name}' has a config override the broker cannot use: "
                           f"{exc.message or exc}. {advice}") from None


def _cut(path: Path, keep: int, size: int, why: str, loaded: Loaded) -> None:
    """Move the torn tail ``[keep, size)`` to a file beside the log, then cut the log there."""
    kept = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-at-{keep}")
    try:
        with open(path, "r+b") as f:
            f.seek(keep)
            write_atomically(kept, f.read(size - keep))
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise StartupError(f"{path} ends in a torn write at byte {keep} ({why}), and cutting it failed: "
                           f"{exc.strerror or exc}") from None
    note = (f"{path} ended in a torn write at byte {keep} ({why}): a crash during an append, never "
            f"acknowledged; cut {size - keep} bytes, kept in {kept}")
    log.warning("%s", note)
    loaded.notes.append(note)
