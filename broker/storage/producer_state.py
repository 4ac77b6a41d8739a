"""Idempotent-producer state of one partition: per producer id, its epoch and recent batches.

Kafka keeps the last five batches of each producer so that a retried batch (same producer id,
epoch and sequence range) is recognised and answered with the offsets it got the first time,
without writing it again. Sequence numbers wrap from 2**31 - 1 to 0.

Transactions (KIP-98), as Kafka's ProducerStateManager: a producer's first transactional batch
opens its ongoing transaction at that batch's offset; a marker (COMMIT or ABORT, written through
WriteTxnMarkers) completes it. A completed transaction stays *unstable* until the high
watermark passes its marker (every replica of the ISR has the outcome), so the last stable
offset, the first offset of the earliest unstable transaction, never runs ahead of what a
read_committed consumer may be told is decided.

Verification (KIP-890, as Kafka's VerificationStateEntry): before a producer's first
transactional batch of a transaction is appended here, the broker asks the transaction
coordinator whether this partition was added to the transaction. :meth:`start_verification`
hands out a guard for the producer before the question goes out; the append passes it back and
:meth:`check_verified` refuses a batch that would open a transaction when the guard is no longer
the producer's: a marker came meanwhile (the transaction the coordinator vouched for ended, so
the answer is stale and the batch would open a transaction nobody will ever end). The guard is
dropped when the transaction opens or a marker ends it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader
from broker.storage.producer_snapshot import SnapshotEntry

__all__ = ["BatchMetadata", "CompletedTxn", "ProducerStateManager", "VerificationGuard"]

RECENT_BATCHES = 5
SEQUENCE_MODULUS = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: its producer, its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    coordinator_epoch: int = -1  # of the latest marker: an older coordinator's marker is fenced
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class VerificationGuard:
    """One verification of a producer's transaction (compared by identity)."""

    __slots__ = ()


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # Transactions (see the module): producer id -> first offset of its ongoing transaction,
        # and the completed ones whose marker the high watermark has not passed, in marker order.
        self.ongoing: dict[int, int] = {}
        self.unreplicated: deque[CompletedTxn] = deque()
        self.verifying: dict[int, VerificationGuard] = {}  # producer id -> its guard (see the module)

    def check(self, header: BatchHeader, pending: dict[int, tuple[int, int]] | None = None,
              ) -> BatchMetadata | None:
        """Validate an incoming batch against the producer's state.

        `pending` maps a producer id to the (epoch, last sequence) of a batch earlier in the same
        request, not yet appended; this batch must follow it, and the entry is updated.

        Returns the metadata of the original batch when this one is a retried duplicate, None
        when it is new and in order. Raises KafkaError with INVALID_PRODUCER_EPOCH (a fenced,
        older epoch) or OUT_OF_ORDER_SEQUENCE_NUMBER (a gap or a rewind).
        """
        if not header.has_producer_id or header.base_sequence < 0:
            return None
        if pending is not None and header.producer_id in pending:
            epoch, last_seq = pending[header.producer_id]
            if header.producer_epoch < epoch:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                 f"epoch {header.producer_epoch} is older than {epoch}")
            expected = 0 if header.producer_epoch > epoch else (last_seq + 1) % SEQUENCE_MODULUS
            if header.base_sequence != expected:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"expected sequence {expected} from producer {header.producer_id}, "
                                 f"got {header.base_sequence}")
            pending[header.producer_id] = (header.producer_epoch, header.last_sequence)
            return None
        original = self._check_against_state(header)
        if original is None and pending is not None:
            pending[header.producer_id] = (header.producer_epoch, header.last_sequence)
        return original

    def _check_against_state(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer: state lost to retention or a fresh producer; accept, as Kafka does.
            return None
        if header.producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"epoch {header.producer_epoch} is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"new epoch {header.producer_epoch} must start at sequence 0, "
                                 f"got {header.base_sequence}")
            return None
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return batch
        expected = (entry.last_seq + 1) % SEQUENCE_MODULUS
        if entry.batches and header.base_sequence != expected:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"expected sequence {expected} from producer {header.producer_id}, "
                             f"got {header.base_sequence}")
        return None

    def update(self, header: BatchHeader, first_offset: int, timestamp: int) -> None:
        """Record a batch that was appended (offsets assigned) or found on disk at load."""
        if not header.has_producer_id:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            # A new epoch starts its sequences over; the coordinator epoch stays (Kafka's
            # maybeUpdateProducerEpoch).
            entry = ProducerEntry(header.producer_epoch, entry.coordinator_epoch if entry is not None else -1)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch < entry.epoch:
            return
        if header.base_sequence < 0:
            return
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, first_offset,
                                           first_offset + header.last_offset_delta, timestamp))

    def clear(self) -> None:
        """Forget every producer's sequences (what came before a link-mode promotion marker:
        broker/storage/link_copy.py). Transactions stay: their markers may still come."""
        self.producers.clear()

    def reset(self) -> None:
        """Forget everything (the log was emptied)."""
        self.producers.clear()
        self.forget_transactions()

    def forget_transactions(self) -> None:
        """Forget every transaction (before they are rebuilt from the log)."""
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verifying.clear()

    # -- snapshots (broker/storage/producer_snapshot.py) -----------------------------------

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """Every producer as a snapshot holds it: its epoch, its last batch, its ongoing
        transaction (a producer known only by an open transaction counts too)."""
        entries = []
        for pid in sorted(self.producers.keys() | self.ongoing.keys()):
            entry = self.producers.get(pid)
            last = entry.batches[-1] if entry is not None and entry.batches else None
            entries.append(SnapshotEntry(
                producer_id=pid, epoch=entry.epoch if entry is not None else -1,  # -1: a copy's, no sequences
                last_sequence=last.last_seq if last is not None else -1,
                last_offset=last.last_offset if last is not None else -1,
                offset_delta=last.last_offset - last.first_offset if last is not None else 0,
                timestamp=last.timestamp if last is not None else -1,
                coordinator_epoch=entry.coordinator_epoch if entry is not None else -1,
                current_txn_first_offset=self.ongoing.get(pid, -1)))
        return entries

    def load_snapshot(self, entries: list[SnapshotEntry]) -> None:
        """Start from a snapshot's producers (what the log before its offset said)."""
        self.reset()
        for e in entries:
            if e.current_txn_first_offset >= 0:
                self.ongoing[e.producer_id] = e.current_txn_first_offset
            if e.epoch < 0:
                continue  # tracked for its transaction only (a link-mode copy's producer)
            entry = self.producers[e.producer_id] = ProducerEntry(e.epoch, e.coordinator_epoch)
            if e.last_sequence >= 0 and e.last_offset >= 0 and e.offset_delta >= 0:
                entry.batches.append(BatchMetadata((e.last_sequence - e.offset_delta) % SEQUENCE_MODULUS,
                                                   e.last_sequence, e.last_offset - e.offset_delta, e.last_offset,
                                                   e.timestamp))

    # -- transactions --------------------------------------------------------------------

    def check_transactional(self, header: BatchHeader) -> None:
        """A leader's check of a produced batch against the producer's transaction: a
        non-transactional batch from a producer whose transaction is open is INVALID_TXN_STATE,
        as Kafka's ProducerAppendInfo refuses it."""
        if header.has_producer_id and not header.is_transactional and header.producer_id in self.ongoing:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"Expected transactional write from producer {header.producer_id} at offset "
                             f"{header.base_offset}: it has an ongoing transaction")

    def begin(self, producer_id: int, offset: int) -> None:
        """A transactional batch at ``offset``: opens the producer's transaction unless it is open."""
        self.ongoing.setdefault(producer_id, offset)
        self.verifying.pop(producer_id, None)

    def start_verification(self, producer_id: int) -> VerificationGuard | None:
        """The guard of a verification of the producer's transaction (an existing one is shared
        by requests verifying at once); None when its transaction is open here already, and so
        needs no verification."""
        if producer_id in self.ongoing:
            return None
        guard = self.verifying.get(producer_id)
        if guard is None:
            guard = self.verifying[producer_id] = VerificationGuard()
        return guard

    def drop_verification(self, producer_id: int, guard: VerificationGuard) -> None:
        """The verification failed (or its produce went nowhere): its guard goes, unless a newer
        one replaced it."""
        if self.verifying.get(producer_id) is guard:
            del self.verifying[producer_id]

    def check_verified(self, header: BatchHeader, guard: VerificationGuard | None) -> None:
        """A leader's check of a verified produce's batch: one that would open a transaction
        needs the producer's current guard, else INVALID_TXN_STATE (Kafka's "Record was not part
        of an ongoing transaction"). No guard: the produce was not verified (verification off)."""
        if guard is None or header.is_control or not header.is_transactional \
                or header.producer_id in self.ongoing:
            return
        if self.verifying.get(header.producer_id) is not guard:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"Record was not part of an ongoing transaction: producer {header.producer_id}'s "
                             "transaction ended while the partition was verified")

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A leader's check of a marker before it is written, as Kafka's appendEndTxnMarker:
        INVALID_PRODUCER_EPOCH for an epoch older than the producer's, TRANSACTION_COORDINATOR_FENCED
        for a coordinator epoch older than the latest marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"marker epoch {producer_epoch} of producer {producer_id} is older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, older "
                             f"than {entry.coordinator_epoch}")

    def complete(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, offset: int, *, aborted: bool,
                 high_watermark: int, local: bool = True) -> CompletedTxn:
        """A marker at ``offset`` ends the producer's transaction (one with no ongoing transaction
        ends an empty one at the marker, as Kafka's does); ``local``: the producer's epoch and
        coordinator epoch are recorded (not for a link-mode copy's, broker/storage/link_copy.py).
        Never raises: a follower and a log being opened take what the leader wrote."""
        first = self.ongoing.pop(producer_id, offset)
        self.verifying.pop(producer_id, None)  # a verification under way vouched for the ended one
        if local:
            entry = self.producers.get(producer_id)
            if entry is None or producer_epoch > entry.epoch:
                entry = self.producers[producer_id] = ProducerEntry(
                    producer_epoch, entry.coordinator_epoch if entry is not None else -1)
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        completed = CompletedTxn(producer_id, first, offset, aborted)
        self.unreplicated.append(completed)
        self._prune(high_watermark)
        return completed

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction; None when there is none."""
        return min(self.ongoing.values()) if self.ongoing else None

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction ongoing, or completed by a marker the
        high watermark has not passed; None when there is none."""
        self._prune(high_watermark)
        candidates = [first for first in self.ongoing.values()]
        candidates += [txn.first_offset for txn in self.unreplicated]
        return min(candidates) if candidates else None

    def _prune(self, high_watermark: int) -> None:
        while self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated.popleft()

    def truncate_after(self, offset: int) -> None:
        """Forget batches at or past `offset` (the log was truncated there): a transaction that
        began there goes, one whose marker went is ongoing again."""
        self.ongoing = {pid: first for pid, first in self.ongoing.items() if first < offset}
        for txn in [t for t in self.unreplicated if t.last_offset >= offset]:
            self.unreplicated.remove(txn)
            if txn.first_offset < offset:
                self.ongoing[txn.producer_id] = txn.first_offset
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches.clear()
            entry.batches.extend(kept)
