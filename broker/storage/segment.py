"""One segment of a partition log: `<base offset, 20 digits>.log` with its two indexes."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.protocol.errors import KafkaError
from broker.protocol.records import BATCH_HEADER_SIZE, BatchHeader, batch_crc_ok, read_batch_header
from broker.storage.index import IndexError_, OffsetIndex, TimeIndex

__all__ = ["LogSegment", "segment_name"]

log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 20


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class RecoveryResult:
    truncated_bytes: int
    batches: int


class LogSegment:
    """Append-only batch file plus sparse offset and time indexes.

    Not thread-safe; the owning Log serialises access.
    """

    def __init__(self, directory: Path, base_offset: int, *, index_max_bytes: int, create: bool) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = directory / segment_name(base_offset, ".log")
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self.fd = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(directory / segment_name(base_offset, ".index"), base_offset,
                                        index_max_bytes // 8)
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex"), base_offset,
                                    index_max_bytes // 12)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms: int | None = None
        self._bytes_since_index = 0
        if create:
            self.offset_index.path.touch()
            self.time_index.path.touch()

    # -- loading -------------------------------------------------------------------------

    def load(self, *, trust_indexes: bool) -> None:
        """Load indexes written earlier, or rebuild them by a scan when they fail their checks."""
        if trust_indexes:
            try:
                self.offset_index.load(self.size)
                start = self.offset_index.lookup(2**63 - 1)
                tail = list(self.iter_headers(start))
                if self.offset_index.keys and (not tail or tail[0][1].last_offset != self.offset_index.keys[-1]):
                    raise IndexError_(f"{self.offset_index.path}: last entry does not point at its batch")
                self.next_offset = tail[-1][1].last_offset + 1 if tail else self.base_offset
                self.time_index.load(self.next_offset)
                if self.time_index.keys:
                    self.max_timestamp = self.time_index.keys[-1]
                    self.offset_of_max_timestamp = self.time_index.values[-1]
                # The index is sparse: batches after its last entry may carry a larger timestamp,
                # and time retention must not see the segment as older than it is.
                for _, header in tail:
                    if header.max_timestamp > self.max_timestamp:
                        self.max_timestamp = header.max_timestamp
                        self.offset_of_max_timestamp = header.last_offset
                return
            except (IndexError_, KafkaError) as exc:
                log.warning("rebuilding indexes of %s: %s", self.path, exc)
        self.recover(check_crc=False)

    def recover(self, *, check_crc: bool = True) -> RecoveryResult:
        """Scan every batch, rebuild both indexes, and cut the file at the first bad batch.

        A batch is bad when its header is short or malformed, it runs past the end of the file,
        its offsets go backwards, or (with `check_crc`) its CRC does not match: what a torn
        write leaves behind.
        """
        self.offset_index.keys.clear()
        self.offset_index.values.clear()
        self.time_index.keys.clear()
        self.time_index.values.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        valid_end = 0
        batches = 0
        pos = 0
        while pos < self.size:
            header_bytes = os.pread(self.fd, BATCH_HEADER_SIZE, pos)
            try:
                header = read_batch_header(header_bytes)
            except KafkaError as exc:
                log.warning("%s: bad batch header at position %d: %s", self.path, pos, exc)
                break
            if pos + header.size > self.size or header.base_offset < self.next_offset:
                log.warning("%s: batch at position %d is torn or out of order", self.path, pos)
                break
            if check_crc:
                data = os.pread(self.fd, header.size, pos)
                if not batch_crc_ok(data, 0, header):
                    log.warning("%s: CRC mismatch in batch at position %d", self.path, pos)
                    break
            self._index(header, pos)
            pos += header.size
            valid_end = pos
            batches += 1
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self.offset_index.rewrite()
        self.time_index.rewrite()
        self.offset_index._pending.clear()
        self.time_index._pending.clear()
        return RecoveryResult(truncated, batches)

    # -- appending -----------------------------------------------------------------------

    def _index(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index >= self._index_interval or not self.offset_index.keys:
            self.offset_index.append(header.last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.last_offset + 1

    _index_interval = 4096

    def append(self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]], *,
               index_interval_bytes: int, now_ms: int) -> None:
        """Write `data` (whole batches with offsets assigned) at the end; index its batches."""
        if self.created_ms is None:
            self.created_ms = now_ms
        self._index_interval = index_interval_bytes
        position = self.size
        written = os.pwrite(self.fd, data, position)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        for pos, header in batches:
            self._index(header, position + pos)
        self.size += len(data)

    # -- reading -------------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start` (a batch boundary) to `end`."""
        end = self.size if end is None else end
        pos = start
        while pos < end:
            header = read_batch_header(os.pread(self.fd, BATCH_HEADER_SIZE, pos))
            yield pos, header
            pos += header.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The batch that holds `offset` (or the first after it), or None past the end."""
        for pos, header in self.iter_headers(self.offset_index.lookup(offset)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def position_of(self, offset: int) -> int:
        """File position where the batch holding `offset` starts; the size when past the end."""
        found = self.find(offset)
        return found[0] if found else self.size

    # -- maintenance ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch that starts at or after `offset`; returns bytes removed."""
        position = self.position_of(offset)
        found = self.find(offset)
        if found and found[1].base_offset < offset:
            position = found[0] + found[1].size  # keep the batch that straddles `offset`
        removed = self.size - position
        if removed <= 0:
            return 0
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        # Rebuild the rest of the in-memory state from what remains.
        self.recover(check_crc=False)
        return removed

    def seal(self) -> None:
        """Index the largest timestamp once more as the segment stops being active, as Kafka
        does at a roll, so the time index of a finished segment ends at its true maximum."""
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    @property
    def index_full(self) -> bool:
        return self.offset_index.full or self.time_index.full

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()
        os.close(self.fd)

    def close_quietly(self) -> None:
        """Close the file without touching the index files (they are being replaced)."""
        os.close(self.fd)

    def delete(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
