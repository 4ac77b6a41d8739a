"""Producer state snapshots: Kafka's ``<offset, 20 digits>.snapshot`` files in a partition's dir.

A snapshot holds every producer's state as of ``offset`` (the log end when it was taken), so that
opening a log replays only the batches after it instead of reading the whole log (transactions)
or guessing from the last segments (sequences). Kafka's format, version 1::

    version int16, crc uint32 (CRC32C of everything after it),
    producer_entries: int32 count, then per producer:
      producer_id int64, epoch int16, last_sequence int32, last_offset int64,
      offset_delta int32, timestamp int64, coordinator_epoch int32, current_txn_first_offset int64

Taken at every roll and at close, as Kafka does; the two newest are kept. A snapshot past the
log end (the log was cut after it was taken) or one that fails its CRC is not used: the next
older one is, or the log is read.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

__all__ = ["SnapshotEntry", "SnapshotError", "delete_snapshots_after", "keep_newest", "read_snapshot",
           "snapshot_offsets", "snapshot_path", "write_snapshot"]

log = logging.getLogger(__name__)

VERSION = 1
KEPT = 2  # snapshots kept after each write
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_NAME = re.compile(r"^(\d{20})\.snapshot$")


class SnapshotError(Exception):
    """A snapshot file that cannot be used (Kafka's CorruptSnapshotException)."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no ongoing transaction


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}.snapshot"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, ascending."""
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name)))


def write_snapshot(directory: Path, offset: int, entries: list[SnapshotEntry]) -> None:
    """Write the snapshot at ``offset`` (through a temporary file: a crash leaves the old one or
    none) and keep the newest :data:`KEPT`. Raises OSError."""
    body = _COUNT.pack(len(entries)) + b"".join(
        _ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                    e.coordinator_epoch, e.current_txn_first_offset) for e in entries)
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_HEAD.pack(VERSION, crc32c.crc32c(body)) + body)
    os.replace(tmp, path)
    keep_newest(directory)


def read_snapshot(path: Path, max_bytes: int = 1 << 30) -> list[SnapshotEntry]:
    """The entries of a snapshot file. Raises SnapshotError for a file that is not one (short,
    another version, a CRC or count that does not match), OSError when it cannot be read."""
    if path.stat().st_size > max_bytes:
        raise SnapshotError(f"{path.name}: larger than {max_bytes} bytes")
    data = path.read_bytes()
    if len(data) < _HEAD.size + _COUNT.size:
        raise SnapshotError(f"{path.name}: {len(data)} bytes, too short for a snapshot")
    version, crc = _HEAD.unpack_from(data)
    if version != VERSION:
        raise SnapshotError(f"{path.name}: version {version}, expected {VERSION}")
    body = memoryview(data)[_HEAD.size:]
    if crc32c.crc32c(body) != crc:
        raise SnapshotError(f"{path.name}: CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise SnapshotError(f"{path.name}: {count} entries do not fill {len(body)} bytes")
    return [SnapshotEntry(*_ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size)) for i in range(count)]


def keep_newest(directory: Path, kept: int = KEPT) -> None:
    for offset in snapshot_offsets(directory)[:-kept]:
        snapshot_path(directory, offset).unlink(missing_ok=True)


def delete_snapshots_after(directory: Path, offset: int) -> None:
    """Remove the snapshots past ``offset`` (the log was cut there: they describe batches that went)."""
    for found in snapshot_offsets(directory):
        if found > offset:
            snapshot_path(directory, found).unlink(missing_ok=True)
