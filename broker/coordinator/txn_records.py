"""The records of Kafka's internal `__transaction_state` topic, in Kafka's own format
(TransactionLogKey / TransactionLogValue), so Kafka's tools and a Kafka broker read ours.

Key: int16 version 0, then the transactional id (STRING). Value: int16 version, then producer
id (int64), producer epoch (int16), transaction timeout (int32), status (int8, TxnState.id),
the partitions of the transaction (nullable array of topic STRING and int32 partition ids),
last update and start timestamps (int64). Version 1 (KIP-890) is the same fields in the flexible
encoding (compact strings and arrays, tagged fields), with three tagged fields of its own:
PreviousProducerId (tag 0), NextProducerId (tag 1) and ClientTransactionVersion (tag 2, int16).
This broker writes version 1 for an id whose last EndTxn bumped the epoch (EndTxn v5, Kafka's
transaction version 2, which those fields serve: a retried EndTxn is recognised after its bump,
and after its producer id rolled over) and version 0 otherwise; it reads both. A null value
(tombstone) removes an expired transactional id.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError
from broker.protocol.primitives import Buffer, Reader, Writer

__all__ = ["TV2", "TXN_STATE_TOPIC", "TxnLogKey", "TxnLogValue", "decode_key", "decode_value"]

TXN_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
# The client transaction version from which every EndTxn bumps the epoch (KIP-890 part 2).
TV2 = 2
_PREVIOUS_PRODUCER_ID_TAG, _NEXT_PRODUCER_ID_TAG, _CLIENT_TRANSACTION_VERSION_TAG = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TxnLogKey:
    transactional_id: str

    def encode(self) -> bytes:
        w = Writer()
        w.int16(KEY_VERSION)
        w.string(self.transactional_id)
        return bytes(w.buf)


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int  # TxnState.id
    partitions: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partition ids), topics sorted
    last_update_ms: int
    txn_start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    def encode(self) -> bytes:
        flexible = self.client_transaction_version >= TV2
        w = Writer()
        w.int16(1 if flexible else 0)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        w.int32(self.timeout_ms)
        w.int8(self.state_id)
        w.array_length(len(self.partitions), compact=flexible)
        for topic, ids in self.partitions:
            if flexible:
                w.compact_string(topic)
            else:
                w.string(topic)
            w.array_length(len(ids), compact=flexible)
            for index in ids:
                w.int32(index)
            if flexible:
                w.tagged_fields([])
        w.int64(self.last_update_ms)
        w.int64(self.txn_start_ms)
        if flexible:
            tags: list[tuple[int, Buffer]] = []
            if self.previous_producer_id != -1:
                tags.append((_PREVIOUS_PRODUCER_ID_TAG, self.previous_producer_id.to_bytes(8, "big", signed=True)))
            if self.next_producer_id != -1:
                tags.append((_NEXT_PRODUCER_ID_TAG, self.next_producer_id.to_bytes(8, "big", signed=True)))
            tags.append((_CLIENT_TRANSACTION_VERSION_TAG,
                         self.client_transaction_version.to_bytes(2, "big", signed=True)))
            w.tagged_fields(tags)
        return bytes(w.buf)

    @staticmethod
    def group(partitions: set[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(topic, partition) pairs as the value lists them: by topic, partitions sorted."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        return tuple((topic, tuple(sorted(ids))) for topic, ids in sorted(by_topic.items()))


def decode_key(data: bytes) -> TxnLogKey | None:
    """A `__transaction_state` key; None for a key version this broker does not know (skipped
    as Kafka skips it). Raises KafkaError(CORRUPT_MESSAGE) for a truncated key."""
    try:
        r = Reader(data)
        version = r.int16()
        if version != KEY_VERSION:
            return None
        return TxnLogKey(r.string())
    except ProtocolError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{TXN_STATE_TOPIC} key: {exc}") from exc


def decode_value(data: bytes) -> TxnLogValue:
    """A `__transaction_state` value of version 0 or 1. Raises KafkaError(CORRUPT_MESSAGE) for
    another version or a value that does not parse."""
    try:
        r = Reader(data)
        version = r.int16()
        if version not in (0, 1):
            raise ProtocolError(f"value version {version}")
        flexible = version >= 1
        producer_id = r.int64()
        producer_epoch = r.int16()
        timeout_ms = r.int32()
        state_id = r.int8()
        partitions: list[tuple[str, tuple[int, ...]]] = []
        count = r.array_length(compact=flexible)
        for _ in range(max(count, 0)):  # -1: a null array, no partitions
            topic = r.compact_string() if flexible else r.string()
            ids = tuple(r.int32() for _ in range(max(r.array_length(compact=flexible), 0)))
            if flexible:
                r.skip_tagged_fields()
            partitions.append((topic, ids))
        last_update_ms = r.int64()
        txn_start_ms = r.int64()
        tags = dict(r.tagged_fields()) if flexible else {}
        previous = _tagged_int(tags, _PREVIOUS_PRODUCER_ID_TAG, 8, -1)
        following = _tagged_int(tags, _NEXT_PRODUCER_ID_TAG, 8, -1)
        client_version = _tagged_int(tags, _CLIENT_TRANSACTION_VERSION_TAG, 2, 0)
    except ProtocolError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{TXN_STATE_TOPIC} value: {exc}") from exc
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, state_id, tuple(partitions), last_update_ms,
                       txn_start_ms, previous, following, client_version)


def _tagged_int(tags: dict[int, memoryview], tag: int, size: int, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != size:
        raise ProtocolError(f"tagged field {tag} of {len(data)} bytes, not {size}")
    return int.from_bytes(data, "big", signed=True)
