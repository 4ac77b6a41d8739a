"""What a broker checks in a produced RecordBatch before it stores it (Kafka's LogValidator).

Sans-IO: bytes in, KafkaError out. Three functions, because the checks depend on different
things:

- `check_batch`: what any Kafka broker refuses from a producer whatever the topic's config: an
  unknown codec, a count that disagrees with the offset range or with the records actually
  there, a payload that does not decompress, records whose framing does not add up, the control
  bit, a producer id without a sequence.
- `check_transactional`: the transactional bit, given whether the produce is transactional.
- `check_timestamps`: CreateTime timestamps against the clock and the topic's
  `message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`.

Cost. Kafka parses every record (in Java). Here the batch header is checked as unpacked ints,
and the records are checked by one walk over their length varints: a record is a zigzag varint
length then that many bytes, so the walk proves the records tile the payload exactly and that
there are exactly `recordsCount` of them, without building anything per record. A compressed
payload is decompressed (cramjam, native) into a reused per-thread buffer first: decompressing
is the only way to know it decompresses, and consumers will have to. The decompressed size is
bounded (`MAX_DECOMPRESSED_BYTES`, `MAX_RATIO`): a few KB of zstd can claim gigabytes.
"""

from __future__ import annotations

import array
import struct
import sys
import threading
from collections.abc import Iterator
from typing import cast

import cramjam
from isal import isal_zlib

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    BATCH_HEADER_SIZE,
    XERIAL_MAGIC,
    BatchHeader,
    Compression,
    TimestampType,
    xerial_blocks,
)

__all__ = [
    "DEFAULT_AFTER_MAX_MS",
    "LONG_MAX",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_RATIO",
    "RATIO_FLOOR_BYTES",
    "check_batch",
    "check_copied",
    "check_produced",
    "check_timestamps",
    "check_transactional",
    "effective_timestamp_bounds",
    "max_timestamp_trusted",
]

Buffer = bytes | bytearray | memoryview

LONG_MAX = 2**63 - 1
# Kafka 4.0's default for message.timestamp.after.max.ms (KIP-1030; Long.MAX_VALUE before).
DEFAULT_AFTER_MAX_MS = 3_600_000
NO_TIMESTAMP = -1

# A batch whose records decompress to more than this is refused (MESSAGE_TOO_LARGE). Kafka has
# no such bound because it streams; we decompress whole, so we bound what a peer can make us
# allocate, and the CPU a few compressed bytes can make us spend walking records: at most
# MAX_RATIO times the compressed size (but always up to RATIO_FLOOR_BYTES), and never more than
# MAX_DECOMPRESSED_BYTES. Real data compresses 2 to 20 times; an 11 KB zstd payload of repeated
# tiny records decompresses to 128 MiB (17 million records).
MAX_DECOMPRESSED_BYTES = 128 << 20
MAX_RATIO = 64
RATIO_FLOOR_BYTES = 8 << 20
# The per-thread decompression buffer is kept between batches up to this size; a larger one
# is allocated for that batch only, so one big batch does not pin memory for the process's life.
_KEPT_BUFFER_BYTES = 8 << 20
_FIRST_BUFFER_BYTES = 256 << 10

# The smallest record: a 1-byte length, then attributes, timestamp delta, offset delta, key
# length, value length and header count of one byte each.
_MIN_RECORD_BODY = 6
_MIN_RECORD = 1 + _MIN_RECORD_BODY

# The most each format can expand (deflate 1032:1, snappy about 32:1, lz4 about 255:1; zstd has
# no useful bound): a size claimed beyond it is a lie and is not allocated up front.
_CODEC_MAX_EXPANSION: dict[int, int] = {Compression.GZIP: 1032, Compression.SNAPPY: 32, Compression.LZ4: 256,
              Compression.ZSTD: MAX_DECOMPRESSED_BYTES}
_CODEC_NAMES = "none(0), gzip(1), snappy(2), lz4(3), zstd(4)"
_GZIP_ERROR = cast(type[Exception], isal_zlib.error)  # the stub types it as an instance
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def check_batch(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, *,
                coordinator: bool = False) -> None:
    """Raise KafkaError(code, message) if Kafka would refuse the batch at `pos` from a producer
    regardless of topic config; return None if it is sound.

    `header` is `read_batch_header(buf, pos)` (which already refused a magic other than 2 and a
    length below a header). The CRC is the caller's check (it is CORRUPT_MESSAGE, retriable:
    damage in transit); everything here is the producer's fault and not retriable.
    """
    _check_header(buf, pos, header, coordinator=coordinator)
    _check_records(buf, pos, header, deltas=False)


def check_copied(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Raise KafkaError if a batch copied byte for byte from another cluster's log (a link-mode
    mirror's LinkAppend) is not one a Kafka log can hold; return None if it is.

    The checks of `check_batch` as a log holds batches, not as a producer sends them: the base
    offset, producer fields and timestamps are the source's; a control batch (a transaction
    marker) is kept; compaction may have removed records, so a batch may hold fewer records than
    its offset range (none at all: Kafka keeps an emptied batch for its producer's state). The
    records must still tile the payload exactly and decompress within the bound. The CRC is the
    caller's check.
    """
    end = pos + header.size
    if end > len(buf):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                         f"batch of {header.size} bytes runs past the end of the record set ({len(buf) - pos} bytes)")
    codec = header.attributes & 0x07
    if codec > Compression.ZSTD:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         f"compression codec {codec} in the batch attributes is not one of {_CODEC_NAMES}")
    if header.last_offset_delta < 0 or not 0 <= header.records_count <= header.last_offset_delta + 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"batch at offset {header.base_offset}: {header.records_count} records cannot fill the "
                         f"offset range [0, {header.last_offset_delta}] (relative)")
    _check_records(buf, pos, header, deltas=False)


def _check_header(buf: Buffer, pos: int, header: BatchHeader, *, coordinator: bool = False) -> None:
    end = pos + header.size
    if end > len(buf):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                         f"batch of {header.size} bytes runs past the end of the record set "
                         f"({len(buf) - pos} bytes)")
    codec = header.attributes & 0x07
    if codec > Compression.ZSTD:
        # Kafka's CompressionType.forId throws here; we name the problem instead.
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         f"compression codec {codec} in the batch attributes is not one of {_CODEC_NAMES}")
    count = header.records_count
    if count <= 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Invalid reported count for record batch: {count}")
    if header.last_offset_delta != count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Inconsistent batch offset range [0, {header.last_offset_delta}] (relative) "
                         f"and count of records {count}")
    if header.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records")
    # The group coordinator's TxnOffsetCommit batches carry no sequence (Kafka checks clients only).
    if header.producer_id >= 0 and header.base_sequence < 0 and not coordinator:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Invalid sequence number {header.base_sequence} in record batch with "
                         f"producerId {header.producer_id}")


def check_produced(buf: Buffer, pos: int, header: BatchHeader, *, transactional: bool, now_ms: int,
                   before_max_ms: int, after_max_ms: int, log_append_time: bool = False,
                   coordinator: bool = False) -> int | None:
    """Everything a broker checks in a produced batch: `check_batch`, `check_transactional`
    and `check_timestamps` (bounds as LogConfig resolves them; LONG_MAX for none), with one walk
    over the records for all of them. With `log_append_time` (the topic's timestamp type) the
    broker sets the time: no bound applies.

    Returns None when the batch may be stored as it came, or the MaxTimestamp to store instead:
    Kafka's LogValidator gives a CreateTime batch its records' largest timestamp (-1 when none
    has one), and where the header cannot vouch for it (`max_timestamp_trusted`) the same walk
    reads every record's timestamp. The caller writes it (`set_max_timestamp`, which fixes the CRC).
    """
    if header.base_offset != 0:
        # Kafka's LogValidator: a client's batch starts at 0; the broker assigns the offsets.
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"The baseOffset of the record batch should be 0, but it is {header.base_offset}")
    check_transactional(header, transactional=transactional)
    if log_append_time:
        check_batch(buf, pos, header, coordinator=coordinator)
        return None
    if header.timestamp_type == TimestampType.CREATE_TIME and not max_timestamp_trusted(header):
        _check_header(buf, pos, header, coordinator=coordinator)
        largest = _check_untrusted(buf, pos, header, *_window(now_ms, before_max_ms, after_max_ms))
        return largest if largest != header.max_timestamp else None
    if not _timestamps_bounded(header, before_max_ms, after_max_ms):
        check_batch(buf, pos, header, coordinator=coordinator)
        return None
    _check_header(buf, pos, header, coordinator=coordinator)
    found = _check_records(buf, pos, header, deltas=True)
    _check_deltas(buf, pos, header, found, now_ms, before_max_ms, after_max_ms)
    return None


def check_transactional(header: BatchHeader, *, transactional: bool) -> None:
    """Refuse a transactional batch in a produce that carries no transactional id.

    Kafka answers the whole request TRANSACTIONAL_ID_AUTHORIZATION_FAILED in that case.
    """
    if header.is_transactional and not transactional:
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         "a transactional record batch in a produce request without a transactional id")


def effective_timestamp_bounds(before_max_ms: int, after_max_ms: int, difference_max_ms: int) -> tuple[int, int]:
    """(before, after) as Kafka resolves them (KIP-937): the deprecated
    `message.timestamp.difference.max.ms` (removed in Kafka 4.0, still honoured here), when
    set, applies to a side whose own key is left at its default (before: Long.MAX_VALUE;
    after: one hour since Kafka 4.0)."""
    if difference_max_ms == LONG_MAX:
        return before_max_ms, after_max_ms
    before = before_max_ms if before_max_ms != LONG_MAX else difference_max_ms
    after = after_max_ms if after_max_ms != DEFAULT_AFTER_MAX_MS else difference_max_ms
    return before, after


def check_timestamps(buf: Buffer, pos: int, header: BatchHeader, *, now_ms: int, before_max_ms: int,
                     after_max_ms: int) -> None:
    """Refuse (INVALID_TIMESTAMP) a CreateTime batch with a record timestamp earlier than
    `now_ms - before_max_ms` or later than `now_ms + after_max_ms`, as Kafka's LogValidator.

    Only for topics with message.timestamp.type=CreateTime (with LogAppendTime the broker sets
    the time). Free when both bounds are Long.MAX_VALUE; otherwise every record's timestamp
    delta is read (runs of equal-length records with one-byte deltas at C speed, other records
    one by one). `check_batch` must have passed; `check_produced` does both in one walk.
    """
    if not _timestamps_bounded(header, before_max_ms, after_max_ms):
        return
    found = _check_records(buf, pos, header, deltas=True)
    _check_deltas(buf, pos, header, found, now_ms, before_max_ms, after_max_ms)


def max_timestamp_trusted(header: BatchHeader) -> bool:
    """Whether a CreateTime batch's MaxTimestamp may stand for its records' largest timestamp
    without reading them: it is positive and not below FirstTimestamp, itself a timestamp.

    Kafka's LogValidator recomputes it from every record. Producers compute it the same way (the
    Java client from -1, librdkafka from 0), so a header that passes this test holds that value,
    and reading the records would only cost time on the produce path. One that fails it is
    recomputed (`check_produced`): above all librdkafka's batch of records without a
    timestamp (-1), whose header says FirstTimestamp -1 and MaxTimestamp 0, as its running
    maximum starts at 0; kept as it is, it made the segment look as if written in 1970, and the
    next retention check deleted it. (A producer that lies in a plausible header can only age
    its own records: a segment's largest timestamp is the largest of all its batches'.)
    """
    return 0 <= header.base_timestamp <= header.max_timestamp and header.max_timestamp > 0


def _check_untrusted(buf: Buffer, pos: int, header: BatchHeader, low: int | None, high: int | None) -> int:
    """Framing and timestamp bounds of a CreateTime batch whose header cannot vouch for its
    max timestamp, and that max timestamp as Kafka stores it, in one walk: the fast walk reads
    runs of equal-length records exactly (a batch of same-sized records without a timestamp is
    one run, read at C speed); anything else is read record by record."""
    data, start, stop = _records(buf, pos, header, header.attributes & 0x07)
    found = _fast_walk(data, start, stop, header.records_count, True)
    if found is None:
        walk_precisely(data, start, stop, header.records_count)  # raises, naming the first bad record
    if found is not None and found[0] == found[1]:
        # Equal bounds come only from runs, which the fast walk reads exactly: one timestamp.
        lowest = highest = (header.base_timestamp + found[0], 0)
    else:
        lowest, highest = _timestamp_extremes(data, start, stop, header.base_timestamp)
    _check_one_timestamp(*lowest, low, high)
    _check_one_timestamp(*highest, low, high)
    return max(NO_TIMESTAMP, highest[0])


def _window(now_ms: int, before_max_ms: int, after_max_ms: int) -> tuple[int | None, int | None]:
    """The (lowest, highest) timestamp a record may carry; None for no bound."""
    return (now_ms - before_max_ms if before_max_ms < LONG_MAX else None,
            now_ms + after_max_ms if after_max_ms < LONG_MAX else None)


def _timestamps_bounded(header: BatchHeader, before_max_ms: int, after_max_ms: int) -> bool:
    return before_max_ms < LONG_MAX or after_max_ms < LONG_MAX


def _check_records(buf: Buffer, pos: int, header: BatchHeader, *, deltas: bool) -> tuple[int, int] | None:
    """Prove the records frame as declared (raising INVALID_RECORD otherwise); with `deltas`,
    return their (lowest, highest) timestamp delta when the fast walk could read them."""
    data, start, stop = _records(buf, pos, header, header.attributes & 0x07)
    found = _fast_walk(data, start, stop, header.records_count, deltas)
    if found is None:
        walk_precisely(data, start, stop, header.records_count)  # raises, naming the first bad record
    return found


def _check_deltas(buf: Buffer, pos: int, header: BatchHeader, found: tuple[int, int] | None, now_ms: int,
                  before_max_ms: int, after_max_ms: int) -> None:
    low, high = _window(now_ms, before_max_ms, after_max_ms)
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        # Every record's timestamp is the batch's max timestamp.
        _check_one_timestamp(header.max_timestamp, 0, low, high)
        return
    if not max_timestamp_trusted(header):
        # The header says nothing sure (records without a timestamp, librdkafka's MaxTimestamp
        # 0): the records' own extremes are checked, skipping those without a timestamp, as Kafka.
        data, start, stop = _records(buf, pos, header, header.attributes & 0x07)
        for timestamp, index in _timestamp_extremes(data, start, stop, header.base_timestamp):
            _check_one_timestamp(timestamp, index, low, high)
        return
    _check_one_timestamp(header.base_timestamp, 0, low, high)
    _check_one_timestamp(header.max_timestamp, header.last_offset_delta, low, high)
    base = header.base_timestamp
    if found is not None and (low is None or base + found[0] >= low) and (high is None or base + found[1] <= high):
        return
    # Out of range, or deltas the fast walk does not read: find which record, and say so.
    data, start, stop = _records(buf, pos, header, header.attributes & 0x07)
    lowest, highest = _timestamp_delta_range(data, start, stop)
    _check_one_timestamp(base + lowest[0], lowest[1], low, high)
    _check_one_timestamp(base + highest[0], highest[1], low, high)


def _check_one_timestamp(timestamp: int, offset: int, low: int | None, high: int | None) -> None:
    if timestamp == NO_TIMESTAMP:
        return
    if (low is not None and timestamp < low) or (high is not None and timestamp > high):
        window = f"[{low if low is not None else '-inf'}, {high if high is not None else '+inf'}]"
        raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                         f"Timestamp {timestamp} of message with offset delta {offset} is out of range. "
                         f"The timestamp should be within {window}")


# -- record framing ------------------------------------------------------------------------
#
# A record is a zigzag varint length then that many bytes. Walking the lengths proves the records
# tile the payload and counts them. The fast walk reads one- and two-byte lengths (records up to
# 8 KiB) through lookup tables, and jumps over runs of equal-length records with C-speed strided
# slices: when the records at p, p+s, p+2s ... all start with the same length bytes, each is s
# bytes long, so comparing every s-th byte proves a whole run at once (batches of same-sized
# records are mostly such runs). Anything unusual (a longer length, a bad one, a short end)
# makes the fast walk give up, and the precise walk decides and names the problem.

Records = bytes | bytearray

# Lookup tables: the whole record's size (length varint included) for a one-byte and a two-byte
# length varint, indexed by the varint's 7 or 14 payload bits.
_SIZE1 = tuple(((v >> 1) ^ -(v & 1)) + 1 for v in range(1 << 7))
_SIZE2 = tuple(((v >> 1) ^ -(v & 1)) + 2 for v in range(1 << 14))
# The same for a timestamp delta's value.
_ZIGZAG1 = tuple((v >> 1) ^ -(v & 1) for v in range(1 << 7))
_ZIGZAG2 = tuple((v >> 1) ^ -(v & 1) for v in range(1 << 14))
_MIN_RUN = 8  # a run shorter than this is walked record by record
_PLAIN_FIRST = 32  # records walked one by one before looking for a run again (doubles to 1024)


def _records(buf: Buffer, pos: int, header: BatchHeader, codec: int) -> tuple[Records, int, int]:
    """The batch's records as (buffer, start, end): in place when uncompressed, else in the
    thread's decompression buffer. A memoryview is copied once (strided slices of a memoryview
    compare element by element; of bytes, with memcmp)."""
    start, end = pos + BATCH_HEADER_SIZE, pos + header.size
    if codec != Compression.NONE:
        # No cache across calls: a buffer at a reused address with a forged equal CRC would
        # be taken for the last one. check_produced walks once; check_timestamps decompresses again.
        return _decompress(codec, memoryview(buf)[start:end], header.records_count)
    if isinstance(buf, memoryview):
        return bytes(buf[start:end]), 0, end - start
    return buf, start, end


def _run_length(data: Records, p: int, size: int, two: bool, most: int) -> int:
    """How many records from `p` (at most `most`) start with the same length bytes as the one
    at `p`, so are `size` bytes each; 0 when fewer than _MIN_RUN do."""

    def same(j: int) -> bool:
        last = p + (j - 1) * size
        if data[p : last + 1 : size] != data[p : p + 1] * j:
            return False
        return not two or data[p + 1 : last + 2 : size] == data[p + 1 : p + 2] * j

    if most < _MIN_RUN or not same(_MIN_RUN):
        return 0
    lo, j = _MIN_RUN, _MIN_RUN * 4
    while True:  # gallop: runs are usually long, often the whole rest of the batch
        if j >= most:
            if same(most):
                return most
            hi = most
            break
        if not same(j):
            hi = j
            break
        lo, j = j, j * 4
    while hi - lo > 1:  # same(lo) holds, same(hi) does not
        mid = (lo + hi) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _period_repeats(data: Records, start: int, period: int, most: int) -> int:
    """How many times (at most `most`) the `period` bytes from `start` repeat right after.

    Records that tile data[start:start + period] and then bytes that repeat with that period are
    the same records again: one memcmp proves them all. Real batches never repeat whole records
    (offset deltas differ), so the probe fails on its first bytes; it is there for payloads made
    to be compressible, where it keeps the walk from costing a Python step per repeated record.
    """
    probe = min(period, 64)
    if most < 1 or data[start + period : start + period + probe] != data[start : start + probe]:
        return 0
    pattern = bytes(data[start : start + period])

    def repeats(j: int) -> bool:
        # j + 1 non-overlapping copies of the pattern in (j + 1) periods of bytes must tile
        # them exactly: one C-speed search, no copy of the range.
        return data.count(pattern, start, start + (j + 1) * period) == j + 1

    # Gallop only (no bisection over large slices): the caller's next stretch takes the rest.
    done, j = 0, 1
    while j <= most and repeats(j):
        done, j = j, j * 4
    if done < most and j > most and repeats(most):
        done = most
    return done


def framing_ok(data: Records, start: int, end: int, count: int) -> bool:
    """Whether data[start:end] is exactly `count` records with one- or two-byte lengths of at
    least the smallest record body. False means "not proven", not "invalid"."""
    return _fast_walk(data, start, end, count, False) is not None


def _fast_walk(data: Records, start: int, end: int, count: int, deltas: bool) -> tuple[int, int] | None:
    """The fast walk: None unless data[start:end] is proven to be exactly `count` records (with
    one- or two-byte lengths of at least the smallest record body). With `deltas`, it also
    returns bounds (lowest, highest) of the records' timestamp deltas: exact for runs of
    equal-length records, +-8192 for the others, or None when a delta does not fit in two
    bytes; without, it returns (0, 0)."""
    if count * _MIN_RECORD > end - start:
        return None
    size1, size2 = _SIZE1, _SIZE2
    lowest, highest = (1 << 63), -(1 << 63)
    p, n = start, 0
    plain = _PLAIN_FIRST
    try:
        while n < count:
            b = data[p]
            if b < 0x80:
                size, two = size1[b], False
            else:
                size, two = size2[(b & 0x7F) | (data[p + 1] << 7)], True  # IndexError: 3+ bytes
            if size < _MIN_RECORD + two:
                return None
            run = _run_length(data, p, size, two, min(count - n, (end - p) // size))
            if run:
                if deltas:
                    found = _run_deltas(data, p + 2 + two, size, run)
                    if found is None:
                        return None
                    lowest, highest = min(lowest, found[0]), max(highest, found[1])
                n += run
                p += run * size
                plain = _PLAIN_FIRST
                continue
            stretch = min(plain, count - n)
            plain = min(plain * 2, 1024)  # runs are not coming: look for them less often
            first = p
            if deltas:
                # Only each delta's width is looked at here: one or two bytes means within
                # +-8191 ms of the base, which clears any window wider than that (a window
                # narrower than 8 s makes the caller read the exact deltas).
                for _ in range(stretch):
                    b = data[p]
                    if b < 0x80:
                        size, q = size1[b], p + 2  # past the length and the attributes byte
                        if size < _MIN_RECORD:
                            return None
                    else:
                        size, q = size2[(b & 0x7F) | (data[p + 1] << 7)], p + 3
                        if size < _MIN_RECORD + 1:
                            return None
                    if data[q] >= 0x80 and data[q + 1] >= 0x80:
                        return None  # a delta of three bytes or more
                    p += size
                lowest, highest = min(lowest, -_TWO_BYTE_DELTA), max(highest, _TWO_BYTE_DELTA)
            else:
                for _ in range(stretch):
                    b = data[p]
                    if b < 0x80:
                        size = size1[b]
                        if size < _MIN_RECORD:
                            return None
                    else:
                        size = size2[(b & 0x7F) | (data[p + 1] << 7)]
                        if size < _MIN_RECORD + 1:
                            return None
                    p += size
            n += stretch
            if n < count and p - first <= end - p:
                # The same records again (their deltas too): nothing new for the bounds.
                repeats = _period_repeats(data, first, p - first, min((count - n) // stretch, (end - p) // (p - first)))
                n += repeats * stretch
                p += repeats * (p - first)
    except IndexError:
        return None
    if p != end:
        return None
    return (lowest, highest) if deltas else (0, 0)


# Each one-byte zigzag varint mapped to its value + 64 (0..127), order kept: min() and max() of
# the translated bytes give a run's extreme deltas at C speed.
_ORDERED1 = bytes(((v >> 1) ^ -(v & 1)) + 64 for v in range(128)) + bytes(128)
_EVEN = bytes(range(0, 256, 2))  # deleting these leaves the odd bytes (negative deltas)
_TWO_BYTE_DELTA = 8192  # a two-byte zigzag varint holds -8192 .. 8191


def _run_deltas(data: Records, first_delta: int, size: int, run: int) -> tuple[int, int] | None:
    """(lowest, highest) timestamp delta of `run` records of `size` bytes whose first delta
    byte is at `first_delta`: one strided slice when every delta is one byte."""
    last = first_delta + (run - 1) * size
    column = data[first_delta : last + 1 : size]
    if max(column) < 0x80:
        ordered = column.translate(_ORDERED1)
        return min(ordered) - 64, max(ordered) - 64
    if min(column) >= 0x80 and not column.translate(None, _EVEN):
        # Every delta two bytes long and not negative (even zigzag values), as a producer's
        # batch spanning 32 ms to 8 s has: the pairs (second byte, first byte) as big-endian
        # 16-bit numbers sort as the deltas do; the array's min() and max() run in C.
        second = data[first_delta + 1 : last + 2 : size]
        if max(second) < 0x80:
            pairs = bytearray(2 * run)
            pairs[0::2] = second
            pairs[1::2] = column
            keys = array.array("H", pairs)
            if sys.byteorder == "little":
                keys.byteswap()
            lo, hi = min(keys), max(keys)
            return (((lo >> 8) << 7) | (lo & 0x7F)) >> 1, (((hi >> 8) << 7) | (hi & 0x7F)) >> 1
    lowest, highest = (1 << 63), -(1 << 63)
    zig1, zig2 = _ZIGZAG1, _ZIGZAG2
    for i in range(run):  # rare: deltas of mixed widths or signs
        q = first_delta + i * size
        t = data[q]
        if t < 0x80:
            delta = zig1[t]
        else:
            u = data[q + 1]
            if u >= 0x80:
                return None
            delta = zig2[(t & 0x7F) | (u << 7)]
        lowest, highest = min(lowest, delta), max(highest, delta)
    return lowest, highest


def walk_precisely(data: Records, start: int, end: int, count: int) -> None:
    """Walk every record length, any varint width; raise INVALID_RECORD naming the first
    problem. Each step advances at least a smallest record, so the walk is bounded."""
    if count * _MIN_RECORD > end - start:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"batch claims {count} records but its {end - start} bytes of records cannot hold them")
    p, n = start, 0
    while p < end:
        raw, p = _varint(data, p, end, n)
        length = (raw >> 1) ^ -(raw & 1)
        if length < _MIN_RECORD_BODY:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"Invalid record size {length} for record {n}")
        p += length
        n += 1
    if p != end:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"Incorrect declared batch size, premature EOF reached in record {n - 1}")
    if n != count:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"batch declares {count} records but holds {n}" if n < count else
                         f"Incorrect declared batch size, records still remaining: {n} records where "
                         f"{count} were declared")


def _varint(data: Records, p: int, end: int, index: int) -> tuple[int, int]:
    """A varint of up to 5 bytes (an int32) at `p`: (raw value, position after it)."""
    value = shift = 0
    for _ in range(5):
        if p >= end:
            break
        b = data[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p
        shift += 7
    raise KafkaError(ErrorCode.INVALID_RECORD, f"malformed length varint of record {index}")


def _timestamp_delta_range(data: Records, start: int, end: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((lowest, its index), (highest, its index)) of the records' timestamp deltas in
    data[start:end] (framing already checked)."""
    lowest = highest = (0, 0)
    for index, delta in enumerate(_timestamp_deltas(data, start, end)):
        if index == 0:
            lowest = highest = (delta, 0)
        elif delta < lowest[0]:
            lowest = (delta, index)
        elif delta > highest[0]:
            highest = (delta, index)
    return lowest, highest


def _timestamp_extremes(data: Records, start: int, end: int, base: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((lowest timestamp other than -1, its index), (highest timestamp, its index)) of the
    records in data[start:end] (framing already checked), each `base` + its delta; -1 stands for
    a side no record has (Kafka checks no bound on a record without a timestamp)."""
    lowest = highest = (NO_TIMESTAMP, 0)
    for index, delta in enumerate(_timestamp_deltas(data, start, end)):
        timestamp = base + delta
        if index == 0 or timestamp > highest[0]:
            highest = (timestamp, index)
        if timestamp != NO_TIMESTAMP and (lowest[0] == NO_TIMESTAMP or timestamp < lowest[0]):
            lowest = (timestamp, index)
    return lowest, highest


def _timestamp_deltas(data: Records, start: int, end: int) -> Iterator[int]:
    """Each record's timestamp delta, in order, from data[start:end] (framing already checked):
    a walk record by record, for the cold paths only."""
    p = start
    index = 0
    while p < end:
        raw, p = _varint(data, p, end, index)
        body_end = p + ((raw >> 1) ^ -(raw & 1))
        value = shift = 0
        q = p + 1  # past the record's attributes byte
        while True:  # the timestamp delta: a varlong, up to 10 bytes
            if q >= body_end or shift > 63:
                raise KafkaError(ErrorCode.INVALID_RECORD, f"malformed timestamp delta in record {index}")
            b = data[q]
            q += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        yield (value >> 1) ^ -(value & 1)
        p = body_end
        index += 1


# -- decompression --------------------------------------------------------------------------


class _Scratch(threading.local):
    buffer: bytearray | None = None


_scratch = _Scratch()


def _decompress(codec: int, payload: memoryview, count: int) -> tuple[Records, int, int]:
    """The decompressed records of a compressed batch as (buffer, 0, length), in a reused
    buffer (valid until the next call on this thread) except for gzip. Raises INVALID_RECORD
    when the payload does not decompress, MESSAGE_TOO_LARGE when it would exceed the bound (see
    MAX_DECOMPRESSED_BYTES)."""
    limit = _decompressed_limit(len(payload))
    if codec == Compression.GZIP:
        return _gunzip(payload, limit)
    if codec == Compression.SNAPPY and payload[:8] == XERIAL_MAGIC:
        return _xerial(payload, limit)
    hint = _size_hint(codec, payload)
    if hint is not None and hint > _CODEC_MAX_EXPANSION[codec] * len(payload) + _FIRST_BUFFER_BYTES:
        if codec == Compression.SNAPPY:  # the only format that states its size before the data
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"a snappy payload of {len(payload)} bytes claims {hint} bytes of records")
        hint = None  # a claim no data of this size can back: grow as the data really comes
    size = hint if hint is not None else max(_FIRST_BUFFER_BYTES, 4 * len(payload), count * _MIN_RECORD)
    size = min(max(size, 1), limit)
    while True:
        out = _buffer(size)
        try:
            written = _decompress_into(codec, payload, out)
        except cramjam.DecompressionError as exc:
            too_small = _means_too_small(str(exc))
            if too_small and size < limit:
                size = min(size * 4, limit)
                continue
            if too_small:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(codec, len(payload), limit)) from None
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"the records do not decompress as {_codec_name(codec)}: {exc}") from None
        return out, 0, written


def _gunzip(payload: memoryview, limit: int) -> tuple[bytes, int, int]:
    """gzip through ISA-L (2 to 3 times zlib's speed, and it lets go of the GIL), member after
    member as Java's GZIPInputStream reads them, never past `limit` bytes of output."""
    parts: list[bytes] = []
    total = 0
    rest: bytes | memoryview = payload
    try:
        while True:
            member = isal_zlib.decompressobj(31)
            part = member.decompress(rest, limit - total + 1)
            total += len(part)
            parts.append(part)
            if total > limit:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(Compression.GZIP, len(payload), limit))
            if not member.eof:
                raise KafkaError(ErrorCode.INVALID_RECORD,
                                 "the records do not decompress as gzip: the stream is cut short")
            rest = member.unused_data
            if not rest:
                break
    except _GZIP_ERROR as exc:
        raise KafkaError(ErrorCode.INVALID_RECORD, f"the records do not decompress as gzip: {exc}") from None
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return data, 0, total


def _decompress_into(codec: int, payload: memoryview, out: bytearray) -> int:
    if codec == Compression.SNAPPY:
        return int(cramjam.snappy.decompress_raw_into(payload, out))
    if codec == Compression.LZ4:
        return int(cramjam.lz4.decompress_into(payload, out))
    return int(cramjam.zstd.decompress_into(payload, out))


def _means_too_small(message: str) -> bool:
    return "whole buffer" in message or "smaller than required" in message


def _buffer(size: int) -> bytearray:
    """A scratch buffer of at least `size` bytes: the thread's kept one when it is big enough."""
    if size > _KEPT_BUFFER_BYTES:
        return bytearray(size)
    kept = _scratch.buffer
    if kept is None or len(kept) < size:
        kept = bytearray(max(size, _FIRST_BUFFER_BYTES))
        _scratch.buffer = kept
    return kept


def _size_hint(codec: int, payload: memoryview) -> int | None:
    """The decompressed size a payload declares, where its format carries one (an upper bound
    is fine: the buffer is only an allocation; a lie just costs a retry or an error)."""
    try:
        if codec == Compression.SNAPPY:
            return int(cramjam.snappy.decompress_raw_len(payload))
        if codec == Compression.GZIP and len(payload) >= 18:
            return int(struct.unpack_from("<I", payload, len(payload) - 4)[0]) or None  # ISIZE
        if codec == Compression.LZ4 and len(payload) >= 15 and payload[:4] == _LZ4_MAGIC and payload[4] & 0x08:
            return int(struct.unpack_from("<Q", payload, 6)[0]) or None
        if codec == Compression.ZSTD and len(payload) >= 6 and payload[:4] == _ZSTD_MAGIC:
            return _zstd_content_size(payload)
    except (cramjam.DecompressionError, struct.error):
        return None
    return None


def _zstd_content_size(payload: memoryview) -> int | None:
    descriptor = payload[4]
    fcs_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or at + width > len(payload):
        return None
    value = int.from_bytes(payload[at : at + width], "little")
    return value + 256 if width == 2 else value


def _decompressed_limit(compressed: int) -> int:
    return min(MAX_DECOMPRESSED_BYTES, max(RATIO_FLOOR_BYTES, MAX_RATIO * compressed))


def _too_large(codec: int, compressed: int, limit: int) -> str:
    return (f"the records of a {_codec_name(codec)} batch of {compressed} bytes decompress to more than "
            f"{limit} bytes (Causeway's bound: {MAX_RATIO} times the compressed size, at least "
            f"{RATIO_FLOOR_BYTES}, at most {MAX_DECOMPRESSED_BYTES})")


def _xerial(payload: memoryview, limit: int) -> tuple[bytearray, int, int]:
    """The Java clients' snappy framing: a 16-byte header, then (int32 size, raw block) pairs."""
    blocks: list[tuple[int, int, int]] = []
    total = 0
    for at, size in xerial_blocks(payload, ErrorCode.INVALID_RECORD):
        try:
            raw = int(cramjam.snappy.decompress_raw_len(payload[at : at + size]))
        except cramjam.DecompressionError as exc:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"the records do not decompress as snappy: {exc}") from None
        blocks.append((at, size, total))
        total += raw
        if total > limit:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(Compression.SNAPPY, len(payload), limit))
    out = _buffer(total)
    view = memoryview(out)
    for at, size, start in blocks:
        try:
            cramjam.snappy.decompress_raw_into(payload[at : at + size], view[start:total])
        except cramjam.DecompressionError as exc:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"the records do not decompress as snappy: {exc}") from None
    return out, 0, total


def _codec_name(codec: int) -> str:
    return Compression(codec).name.lower()
