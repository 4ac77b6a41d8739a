"""The aborted transaction index of a segment: Kafka's ``<base offset>.txnindex``.

One entry per transaction aborted by a marker in the segment, in marker order, 34 bytes each as
Kafka writes them: ``version int16 (0), producerId int64, firstOffset int64, lastOffset int64,
lastStableOffset int64`` (lastOffset is the marker's offset; lastStableOffset the partition's
last stable offset once the abort completed). A read_committed fetch gives the consumer the
entries that overlap what it reads (Kafka's ``collectAbortedTxns``), so that it drops the
aborted producers' records without the broker looking at them.

The entries are held in memory (a fetch looks them up, never the file); the file is appended at
each abort, fsynced with its segment, and rewritten when a truncation cuts entries. Like Kafka's,
it is created only when a segment gets its first entry. At open a log reads the files of the
segments before its producer state snapshot (broker/storage/producer_snapshot.py), which a
recovery never cuts (a snapshot past what recovery kept is not used), and rebuilds the others
from their batches (``Log._rebuild_producer_state``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENTRY", "AbortedTxn", "TransactionIndex", "read_entries"]

ENTRY = struct.Struct(">hqqqq")
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int


class TransactionIndex:
    """A segment's aborted transactions (see the module). Not thread-safe: the log's thread
    owns it; :meth:`delete` may run in a worker thread once the segment is retired."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self.unsynced = False  # entries appended since the segment's last fsync


    def append(self, entry: AbortedTxn) -> None:
        """Add an entry and append it to the file (made at the first entry). Raises OSError."""
        self.entries.append(entry)
        self.unsynced = True
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _encode(entry))
        finally:
            os.close(fd)

    def sync(self) -> None:
        """fsync the file when entries were appended since the last time (with the segment's
        flush, in the flusher's worker thread). Raises OSError; a file gone meanwhile is skipped."""
        if not self.unsynced:
            return
        self.unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def collect(self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]) -> bool:
        """Add to ``into`` the entries a read from ``fetch_offset`` below ``upper_bound`` overlaps;
        True when no later entry (here or in a later segment) can overlap it (an entry whose last
        stable offset reaches the bound: every later transaction starts at or after it)."""
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                into.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset`` (the log was cut there)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.replace(kept)

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Hold exactly ``entries``, and the file too (removed when there are none). Raises OSError."""
        self.entries = list(entries)
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        data = b"".join(_encode(e) for e in self.entries)
        try:
            with open(self.path, "rb") as f:
                if f.read(len(data) + 1) == data:
                    return  # already so: nothing to write
        except FileNotFoundError:
            pass
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def _encode(entry: AbortedTxn) -> bytes:
    return ENTRY.pack(CURRENT_VERSION, entry.producer_id, entry.first_offset, entry.last_offset,
                      entry.last_stable_offset)


def read_entries(path: Path) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file (tools and tests); a torn last entry is left out."""
    data = path.read_bytes()
    usable = len(data) - len(data) % ENTRY.size
    return [AbortedTxn(*ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, usable, ENTRY.size)]
