"""Transaction markers: the control batches that end a producer's transaction in a partition.

Kafka's format (ControlRecordType, EndTransactionMarker): a control batch (attributes
isControl and isTransactional) of the producer's id and epoch, no sequence (-1), one record whose
key is ``version int16 (0), type int16`` (0 ABORT, 1 COMMIT) and whose value is
``version int16 (0), coordinatorEpoch int32``. Consumers skip control batches; a read_committed
consumer learns from a marker that the producer's transaction ended.
"""

from __future__ import annotations

import enum
import struct

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader, Buffer, Record, TimestampType, build_batch, decode_batch

__all__ = ["ControlType", "end_txn_marker", "marker_of"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CURRENT_VERSION = 0


class ControlType(enum.IntEnum):
    """Kafka's ControlRecordType values of a transaction marker."""

    ABORT = 0
    COMMIT = 1


def end_txn_marker(control_type: ControlType, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                   base_offset: int = 0, partition_leader_epoch: int = -1, now_ms: int) -> bytes:
    """The control batch of one transaction marker, as Kafka's MemoryRecords.withEndTransactionMarker."""
    record = Record(_KEY.pack(CURRENT_VERSION, int(control_type)), _VALUE.pack(CURRENT_VERSION, coordinator_epoch),
                    timestamp=now_ms)
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True,
                       timestamp_type=TimestampType.CREATE_TIME)


def marker_of(buf: Buffer, pos: int, header: BatchHeader) -> tuple[ControlType, int] | None:
    """(type, coordinator epoch) of the transaction marker at ``pos``; None when the batch is not
    one (not a transactional control batch, or a control type that is not ABORT or COMMIT).
    Decodes the batch: call it for control batches only (one small record each).

    Raises KafkaError(CORRUPT_MESSAGE) when a transactional control batch does not parse, as
    Kafka's ControlRecordType.parse and EndTransactionMarker.deserialize refuse it."""
    if not header.is_control or not header.is_transactional:
        return None
    _, records = decode_batch(buf, pos)
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a control batch must hold one record with a control key")
    _version, kind = _KEY.unpack_from(records[0].key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    value = records[0].value
    if value is None or len(value) < _VALUE.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "an end transaction marker without its coordinator epoch")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlType(kind), coordinator_epoch
