"""Sparse indexes of a segment, as Kafka lays them out on disk.

`.index`: 8-byte entries (offset relative to the segment's base int32, file position int32);
`.timeindex`: 12-byte entries (timestamp int64, relative offset int32); big-endian. Entries are
kept in memory for lookups and appended to the file as they are made; a file whose entries are
not increasing or point past the log is rejected on load, and the caller rebuilds it.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

__all__ = ["IndexError_", "OffsetIndex", "TimeIndex"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexError_(Exception):  # noqa: N801 - IndexError is a builtin
    """An index file that fails its sanity check."""


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self.keys: list[int] = []
        self.values: list[int] = []
        self._pending = bytearray()

    @property
    def full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def __len__(self) -> int:
        return len(self.keys)

    def _load_rows(self) -> list[tuple[int, int]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise IndexError_(f"{self.path}: missing") from None
        size = self.entry.size
        if len(data) % size:
            raise IndexError_(f"{self.path}: size {len(data)} is not a multiple of {size}")
        return [self.entry.unpack_from(data, i) for i in range(0, len(data), size)]

    def _write_all(self, rows: list[bytes]) -> None:
        data = b"".join(rows)
        # Recovery rewrites the indexes of every segment it scans; after a clean stop they are
        # what is on disk already. Reading is far cheaper than a new file and a rename, which
        # made restarting a broker with thousands of partitions slow.
        try:
            if self.path.stat().st_size == len(data) and self.path.read_bytes() == data:
                return
        except FileNotFoundError:
            pass
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def flush(self) -> None:
        """Append the entries made since the last flush to the file."""
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                f.flush()
                os.fsync(f.fileno())
            self._pending.clear()

    def truncate_entries(self, keep: int) -> None:
        del self.keys[keep:]
        del self.values[keep:]
        self._pending.clear()
        self.rewrite()

    def _row(self, key: int, value: int) -> bytes:
        """An entry as the file holds it (offsets relative to the segment's base)."""
        raise NotImplementedError

    def _add(self, key: int, value: int) -> None:
        """Index `key` -> `value`, unless `key` does not pass the last entry's: keys only grow."""
        if self.keys and key <= self.keys[-1]:
            return
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._row(key, value)

    def rewrite(self) -> None:
        """Write the whole file from the entries in memory."""
        self._write_all([self._row(k, v) for k, v in zip(self.keys, self.values, strict=True)])

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """Maps a batch's last offset to its file position (Kafka indexes the last offset)."""

    entry = _OFFSET_ENTRY

    def load(self, log_size: int) -> None:
        prev_offset, prev_pos = -1, -1
        for rel, pos in self._load_rows():
            if rel <= prev_offset or pos <= prev_pos or pos >= log_size:
                raise IndexError_(f"{self.path}: entry ({rel}, {pos}) out of order or past the log")
            self.keys.append(self.base_offset + rel)
            self.values.append(pos)
            prev_offset, prev_pos = rel, pos

    def _row(self, key: int, value: int) -> bytes:
        return _OFFSET_ENTRY.pack(key - self.base_offset, value)

    def append(self, last_offset: int, position: int) -> None:
        self._add(last_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of a batch at or before the one holding `offset` (0 when none is indexed)."""
        i = bisect.bisect_right(self.keys, offset) - 1
        return self.values[i] if i >= 0 else 0

    def offset_after(self, position: int) -> int | None:
        """The last offset of the first indexed batch that starts at or past `position`: no batch
        before `position` reaches it (Kafka's fetchUpperBoundOffset); None when none is indexed."""
        i = bisect.bisect_left(self.values, position)
        return self.keys[i] if i < len(self.keys) else None

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or past `position`."""
        self.truncate_entries(bisect.bisect_left(self.values, position))


class TimeIndex(_Index):
    """Maps the largest timestamp seen so far to the offset of the batch that carried it."""

    entry = _TIME_ENTRY

    def load(self, next_offset: int) -> None:
        prev_ts, prev_rel = -(2**63), -1
        for ts, rel in self._load_rows():
            if ts < prev_ts or rel < prev_rel or self.base_offset + rel >= next_offset:
                raise IndexError_(f"{self.path}: entry ({ts}, {rel}) out of order or past the log")
            self.keys.append(ts)
            self.values.append(self.base_offset + rel)
            prev_ts, prev_rel = ts, rel

    def _row(self, key: int, value: int) -> bytes:
        return _TIME_ENTRY.pack(key, value - self.base_offset)

    def append(self, timestamp: int, offset: int) -> None:
        self._add(timestamp, offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which a scan finds the first batch with max timestamp >= `timestamp`."""
        i = bisect.bisect_left(self.keys, timestamp) - 1
        return self.values[i] if i >= 0 else self.base_offset

    @property
    def last_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets at or past `offset`."""
        keep = 0
        while keep < len(self.values) and self.values[keep] < offset:
            keep += 1
        self.truncate_entries(keep)
