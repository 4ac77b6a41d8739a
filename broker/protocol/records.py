"""RecordBatch v2 (magic 2), the unit in which Kafka stores and ships records.

Batch header, 61 bytes, big-endian:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordsCount int32

batchLength counts from partitionLeaderEpoch to the end; the CRC (CRC-32C) covers attributes to
the end, so the broker may rewrite baseOffset and partitionLeaderEpoch without recomputing it.

The broker's hot path uses only the header functions here (read, check CRC, patch); building and
decoding records (varints, compression) is for tools, tests and the cold paths.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import cramjam
import crc32c

from broker.protocol.errors import ErrorCode, KafkaError, ProtocolError
from broker.protocol.primitives import Reader, Writer

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "DecodedRecord",
    "Record",
    "TimestampType",
    "XERIAL_MAGIC",
    "batch_crc_ok",
    "build_batch",
    "decode_batch",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "read_batch_header",
    "set_log_append_time",
    "set_max_timestamp",
    "split_batches",
    "stamp_producer",
    "xerial_blocks",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21  # offset of attributes: the CRC covers from here to the batch end
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35
_PRODUCER_ID_POS = 43  # int64 producerId, int16 producerEpoch at 51, int32 baseSequence at 53

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

Buffer = bytes | bytearray | memoryview


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; sequences wrap at 2**31 - 1 as Kafka's do."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at `pos`.

    Raises KafkaError(CORRUPT_MESSAGE) when fewer than 61 bytes remain, the magic is not 2, or
    the length field is smaller than a header.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{len(buf) - pos} bytes cannot hold a batch header")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT if header.magic in (0, 1) else ErrorCode.CORRUPT_MESSAGE,
            f"record batch magic {header.magic}; only magic 2 is supported",
        )
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"batch length {header.batch_length} is below a header")
    return header


def batch_crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """Whether the stored CRC-32C matches the bytes from attributes to the batch end."""
    view = memoryview(buf)[pos + _CRC_START : pos + header.size]
    return bool(crc32c.crc32c(view) == header.crc)


def split_batches(buf: Buffer, *, allow_partial_tail: bool = False) -> list[tuple[int, BatchHeader]]:
    """Position and header of every whole batch in `buf`, in order.

    A trailing fragment is an error (CORRUPT_MESSAGE) unless `allow_partial_tail`, for fetch
    responses, which may end inside a batch when the size limit cuts it.
    """
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            if allow_partial_tail:
                break
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{end - pos} trailing bytes are not a batch")
        header = read_batch_header(buf, pos)
        if pos + header.size > end:
            if allow_partial_tail:
                break
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "batch runs past the end of the record set")
        out.append((pos, header))
        pos += header.size
    return out


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    struct.pack_into(">q", buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    struct.pack_into(">i", buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with `timestamp_ms` as its max timestamp; fixes the CRC."""
    set_max_timestamp(buf, pos, timestamp_ms, log_append_time=True)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_ms: int, *,
                      log_append_time: bool = False) -> None:
    """Write `timestamp_ms` as the batch's MaxTimestamp (and mark it LogAppendTime when asked),
    then recompute the CRC, which covers both (Kafka's DefaultRecordBatch.setMaxTimestamp)."""
    header = read_batch_header(buf, pos)
    if log_append_time:
        struct.pack_into(">h", buf, pos + _ATTRIBUTES_POS, header.attributes | _TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", buf, pos + _MAX_TIMESTAMP_POS, timestamp_ms)
    view = memoryview(buf)[pos + _CRC_START : pos + header.size]
    struct.pack_into(">I", buf, pos + _CRC_POS, crc32c.crc32c(view))


def stamp_producer(
    buf: bytearray | memoryview, pos: int, producer_id: int, producer_epoch: int, base_sequence: int,
    *, clear_transactional: bool = False, set_transactional: bool = False,
) -> None:
    """Give the batch at `pos` a producer id, epoch and base sequence (how an idempotent
    producer re-sends a batch it did not build, e.g. a mirror's); fixes the CRC. The base offset
    becomes 0, as in every batch a producer sends: a batch copied out of a log keeps the offset
    it had there, and Kafka refuses a produced batch whose base offset is not 0.

    `clear_transactional` drops the transactional bit: a batch copied out of a transaction is
    written as an ordinary one, since the transaction's markers stay behind. `set_transactional`
    sets it: the batch is written in the re-sender's own transaction (the mirror's exactly-once
    mode).
    """
    header = read_batch_header(buf, pos)
    struct.pack_into(">q", buf, pos, 0)  # outside the CRC
    struct.pack_into(">qhi", buf, pos + _PRODUCER_ID_POS, producer_id, producer_epoch, base_sequence)
    if clear_transactional and header.attributes & _TRANSACTIONAL_BIT:
        struct.pack_into(">h", buf, pos + _ATTRIBUTES_POS, header.attributes & ~_TRANSACTIONAL_BIT)
    elif set_transactional and not header.attributes & _TRANSACTIONAL_BIT:
        struct.pack_into(">h", buf, pos + _ATTRIBUTES_POS, header.attributes | _TRANSACTIONAL_BIT)
    view = memoryview(buf)[pos + _CRC_START : pos + header.size]
    struct.pack_into(">I", buf, pos + _CRC_POS, crc32c.crc32c(view))


# -- records: for tools, tests and cold paths ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """A record to put in a batch; timestamp None means the batch's base timestamp."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def compress(codec: int, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        # Raw snappy: what librdkafka sends and every client reads.
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        # Independent blocks and no whole-content checksum, as Kafka's Java producer frames it:
        # three times quicker for every reader to decompress than cramjam's default frame.
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")


# The Java clients' snappy framing starts with this magic (then two version ints: 16 bytes).
XERIAL_MAGIC = b"\x82SNAPPY\x00"


def xerial_blocks(data: memoryview, code: ErrorCode) -> Iterator[tuple[int, int]]:
    """The (position, size) of each raw snappy block of the Java clients' xerial framing: a
    16-byte header, then (int32 size, block) pairs. Decoding and validation both walk it.

    Error handling: a size cut short, or a block that runs past the end of `data`, raises
    KafkaError(`code`).
    """
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise KafkaError(code, "truncated xerial snappy block size")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise KafkaError(code, "xerial snappy block runs past the end of the batch")
        yield pos, size
        pos += size


def _xerial_snappy(data: memoryview) -> bytes:
    out = bytearray()
    for pos, size in xerial_blocks(data, ErrorCode.CORRUPT_MESSAGE):
        out += cramjam.snappy.decompress_raw(bytes(data[pos : pos + size]))
    return bytes(out)


def decompress(codec: int, data: Buffer) -> bytes:
    view = memoryview(data)
    try:
        if codec == Compression.NONE:
            return bytes(view)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(bytes(view)))
        if codec == Compression.SNAPPY:
            if view[:8] == XERIAL_MAGIC:
                return _xerial_snappy(view)
            return bytes(cramjam.snappy.decompress_raw(bytes(view)))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(bytes(view)))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(view)))
    except cramjam.DecompressionError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress batch: {exc}") from None
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")


def _write_optional(w: Writer, data: bytes | None) -> None:
    """A varint length (-1 for null) and the bytes: how records carry keys, values, headers."""
    if data is None:
        w.varint(-1)
    else:
        w.varint(len(data))
        w.raw(data)


def _encode_record(w: Writer, offset_delta: int, timestamp_delta: int, record: Record) -> None:
    body = Writer()
    body.int8(0)  # record attributes: unused
    body.varlong(timestamp_delta)
    body.varint(offset_delta)
    _write_optional(body, record.key)
    _write_optional(body, record.value)
    body.varint(len(record.headers))
    for name, value in record.headers:
        _write_optional(body, name.encode())
        _write_optional(body, value)
    w.varint(len(body.buf))
    w.raw(body.buf)


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    base_timestamp: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """One RecordBatch v2 holding `records` (at least one), with its CRC.

    `offset_deltas` (ascending, from 0) keeps gaps between records, as a compacted batch has.
    """
    items = list(records)
    if not items:
        raise ValueError("a batch holds at least one record")
    deltas = list(offset_deltas) if offset_deltas is not None else list(range(len(items)))
    if len(deltas) != len(items):
        raise ValueError("one offset delta per record")
    stamps = [r.timestamp for r in items if r.timestamp is not None]
    if base_timestamp is None:
        base_timestamp = min(stamps) if stamps else 0
    body = Writer()
    max_timestamp = base_timestamp
    for delta, record in zip(deltas, items, strict=True):
        ts = record.timestamp if record.timestamp is not None else base_timestamp
        max_timestamp = max(max_timestamp, ts)
        _encode_record(body, delta, ts - base_timestamp, record)
    payload = compress(compression, bytes(body.buf))
    attributes = int(compression) | (int(timestamp_type) << 3)
    attributes |= _TRANSACTIONAL_BIT if is_transactional else 0
    attributes |= _CONTROL_BIT if is_control else 0
    batch = bytearray(
        _HEADER.pack(
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            2,
            0,
            attributes,
            deltas[-1],
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(items),
        )
    )
    batch += payload
    struct.pack_into(">I", batch, _CRC_POS, crc32c.crc32c(memoryview(batch)[_CRC_START:]))
    return bytes(batch)


def _read_optional(r: Reader) -> bytes | None:
    n = r.varint()
    if n < -1:
        raise ProtocolError(f"record field length {n}")
    return None if n == -1 else bytes(r.raw(n))


def decode_batch(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, list[DecodedRecord]]:
    """The header and every record of the batch at `pos` (decompressed).

    Raises KafkaError(CORRUPT_MESSAGE) when the CRC is wrong or the records do not parse.
    """
    header = read_batch_header(buf, pos)
    if len(buf) - pos < header.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "batch runs past the end of the buffer")
    if not batch_crc_ok(buf, pos, header):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "batch CRC mismatch")
    payload = decompress(header.compression, memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size])
    r = Reader(payload)
    out: list[DecodedRecord] = []
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    try:
        for _ in range(header.records_count):
            length = r.varint()
            end = r.pos + length
            if length < 0 or end > r.end:
                raise ProtocolError(f"record length {length}")
            r.int8()
            timestamp_delta = r.varlong()
            offset_delta = r.varint()
            key = _read_optional(r)
            value = _read_optional(r)
            count = r.varint()
            if count < 0 or count > r.remaining:
                raise ProtocolError(f"header count {count}")
            headers = []
            for _ in range(count):
                name_len = r.varint()
                if name_len < 0:
                    raise ProtocolError("null header name")
                name = str(r.raw(name_len), "utf-8")
                headers.append((name, _read_optional(r)))
            r.pos = end
            out.append(
                DecodedRecord(
                    offset=header.base_offset + offset_delta,
                    timestamp=header.max_timestamp if log_append else header.base_timestamp + timestamp_delta,
                    key=key,
                    value=value,
                    headers=tuple(headers),
                )
            )
    except (ProtocolError, UnicodeDecodeError) as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"malformed record: {exc}") from None
    return header, out
