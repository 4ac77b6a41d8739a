"""Idempotent-producer state of one partition: per producer id, its epoch and recent batches.

Kafka keeps the last five batches of each producer so that a retried batch (same producer id,
epoch and sequence range) is recognised and answered with the offsets it got the first time,
without writing it again. Sequence numbers wrap from 2**31 - 1 to 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader

__all__ = ["BatchMetadata", "ProducerStateManager"]

RECENT_BATCHES = 5
SEQUENCE_MODULUS = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

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
            entry = ProducerEntry(header.producer_epoch)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch < entry.epoch:
            return
        if header.base_sequence < 0:
            return
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, first_offset,
                                           first_offset + header.last_offset_delta, timestamp))

    def clear(self) -> None:
        """Forget every producer (what came before a link-mode promotion marker: broker/storage/link_copy.py)."""
        self.producers.clear()

    def truncate_after(self, offset: int) -> None:
        """Forget batches at or past `offset` (the log was truncated there)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            entry.batches.clear()
            entry.batches.extend(kept)
