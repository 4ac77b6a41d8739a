"""Which part of a partition's log is a link-mode copy, so that copied batches never feed the
idempotent-producer state (broker/storage/producer_state.py).

A mirror topic's batches keep the source cluster's producer ids and sequences (LinkAppend). Both
clusters hand out producer ids from 0, so after promotion a local idempotent producer may get an
id the copy already holds, and its first batch would be refused (OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH) or, worse, answered as a duplicate of a copied batch and dropped. The
source's producers never write here, so the copy must constrain nobody: copied batches stay out
of the producer state on every replica, live, after a restart and after a leader change.

How a replica tells copied batches from local ones, in the log itself:
- while the topic is a mirror topic, the partition's copy is *open*: every batch in the log is
  copied (produce is refused) and none enters the producer state;
- the first local append after promotion is preceded by a **promotion marker**, a control batch
  (no producer id, key version 0, type :data:`PROMOTION_MARKER_TYPE`) written by the leader. It
  replicates in log order as any batch does, so a follower that lags at promotion still tells the
  copied batches it fetches late (before the marker) from local ones (after it); a log rebuilt at
  open forgets the producers it has seen at each marker. Consumers skip control batches (Kafka's
  clients and librdkafka ignore a control type they do not know); the marker takes one offset,
  as a transaction marker does.
- Each replica keeps where it stands in ``link-copy-checkpoint`` in the partition directory:
  ``open``, ``open <offset>`` or ``marker <offset>``. It is what tells, at open, a promoted
  partition whose marker is not written yet (still open: its leader writes the marker before its
  first local append) from a topic that was never a mirror topic (no file).
- A promoted log made a mirror topic again (failback: reverse-and-start or truncate-and-restore,
  mirror/failback.py) opens a new copy at its log end, ``open <offset>``: what it holds is
  history (its copy, its marker, its local writes), the batches copied from there on are copies,
  and a promotion marker below that offset is the earlier promotion's and closes nothing (the
  log is read again at open). The next promotion writes its own marker, and so on. Each replica
  opens it at its own log end when it learns the topic is a mirror topic; LinkTruncate first
  waits until every replica holds the earlier marker (broker/server/handlers/link_truncate.py),
  so no replica meets it after opening the new copy.

(Another way, Redpanda's, moves the target's producer-id allocator past every copied id; it needs
the allocator to be fenced on every broker before the first copied batch lands or before promotion
completes. Bumping the leader epoch at promotion needs the controller and still a per-replica
record of the promotion epoch. The marker needs neither.)
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from broker.protocol.records import BatchHeader, Record, TimestampType, build_batch, decode_batch

log = logging.getLogger(__name__)

__all__ = ["CHECKPOINT_FILE", "PROMOTION_MARKER_TYPE", "LinkCopy", "is_promotion_marker", "promotion_marker"]

CHECKPOINT_FILE = "link-copy-checkpoint"
# A control record type of Causeway's own, far from Kafka's (0 abort, 1 commit, 2-6 KRaft's).
PROMOTION_MARKER_TYPE = 0x4357
_MARKER_KEY = struct.pack(">hh", 0, PROMOTION_MARKER_TYPE)
_MAX_BYTES = 32  # "marker <19 digits>" and a newline fit


def promotion_marker(offset: int, *, leader_epoch: int, now_ms: int) -> bytes:
    """The control batch a promoted partition's leader writes before its first local append."""
    return build_batch([Record(_MARKER_KEY, None, timestamp=now_ms)], base_offset=offset,
                       partition_leader_epoch=leader_epoch, is_control=True,
                       timestamp_type=TimestampType.CREATE_TIME)


def is_promotion_marker(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """Whether the batch at `pos` is a promotion marker (decodes control batches without a
    producer id only: rare, small)."""
    if not header.is_control or header.has_producer_id or header.records_count != 1:
        return False
    try:
        _, records = decode_batch(buf, pos)
    except Exception:  # a corrupt control batch is not ours; the append path checks CRCs itself
        return False
    return bool(records) and records[0].key == _MARKER_KEY


@dataclass(slots=True)
class LinkCopy:
    """A partition's copy state (see the module's doc); saved on every change."""

    path: Path
    open: bool = False
    marker: int = -1  # the offset of the promotion marker; -1: none written
    # An open copy's first offset when the log was promoted before (see the module); -1: the
    # copy is the whole log. Promotion markers below it close nothing.
    since: int = -1

    @classmethod
    def load(cls, directory: Path) -> LinkCopy:
        """The partition's copy state. A damaged file (binary, unreadable, too long, not a state
        this writes) never stops the broker: a warning names it and the state is rebuilt."""
        path = directory / CHECKPOINT_FILE
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_BYTES + 1)  # a few bytes when sound: never read a huge file whole
            text = raw.decode("ascii").split() if len(raw) <= _MAX_BYTES else []
            why = f"{len(raw)} bytes or more" if len(raw) > _MAX_BYTES else f"content {raw[:40]!r}"
        except FileNotFoundError:
            return cls(path)
        except (OSError, UnicodeDecodeError) as exc:
            text, why = [], f"unreadable: {exc}"
        if text == ["open"]:
            return cls(path, open=True)
        if len(text) == 2 and text[0] == "open" and text[1].isascii() and text[1].isdigit():
            return cls(path, open=True, since=int(text[1]))
        if len(text) == 2 and text[0] == "marker" and text[1].isascii() and text[1].isdigit():
            return cls(path, marker=int(text[1]))
        # Rebuilt as the worst case for the producer state (everything copied): the log's own
        # promotion marker closes it again at open (Log._rebuild_producer_state), or the next
        # local append writes a marker. Saved now, so the warning is not repeated at every start.
        log.warning("ignoring damaged link-copy checkpoint %s (%s): its log counts as a link-mode copy until "
                    "a promotion marker", path, why)
        copy = cls(path, open=True)
        try:
            copy._save()
        except OSError as exc:
            log.warning("cannot rewrite %s: %s", path, exc.strerror or exc)
        return copy

    def counts(self, offset: int) -> bool:
        """Whether a (non-marker) batch at `offset` is a local write that enters producer state."""
        return not self.open and offset > self.marker

    def start(self, log_end_offset: int) -> bool:
        """The topic is a mirror topic: its log is a copy (a promoted one from `log_end_offset`
        on: see the module). False when it was already."""
        if self.open:
            return False
        if self.marker >= 0:
            self.since = log_end_offset
        self.open, self.marker = True, -1
        self._save()
        return True

    def closes(self, offset: int) -> bool:
        """Whether a promotion marker at `offset` ends this copy (one below where it began is an
        earlier promotion's)."""
        return offset >= self.since

    def close_at(self, offset: int) -> None:
        """A promotion marker at `offset`: what follows is local."""
        self.open, self.marker, self.since = False, offset, -1
        self._save()

    def reopen_if_cut(self, log_end_offset: int) -> bool:
        """The log was truncated (or torn) at or below its marker: the copy is open again until
        the marker comes back (fetched from the leader, or written by this replica as leader).
        An open copy cut below where it began begins at the cut (False: it was open already)."""
        if self.open and self.since > log_end_offset:
            self.since = log_end_offset
            self._save()
            return False
        if self.marker < 0 or log_end_offset > self.marker:
            return False
        self.open, self.marker = True, -1
        self._save()
        return True

    def _save(self) -> None:
        # A few bytes, once per mirror topic partition and once at promotion: written inline,
        # replaced atomically, not fsynced. A lost update is safe: a lost `open` is written again
        # at the next open of a mirror topic; a lost `marker` leaves `open`, and the next open finds
        # the marker in the log (or writes another); a marker lost with a torn tail reopens the copy.
        tmp = self.path.with_name(self.path.name + ".tmp")
        state = ("open" if self.since < 0 else f"open {self.since}") if self.open else f"marker {self.marker}"
        tmp.write_text(state + "\n")
        os.replace(tmp, self.path)
