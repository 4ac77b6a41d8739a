"""Record batches (Kafka's RecordBatch v2 bytes) decoded straight into Arrow columns.

The schema is Spark's Kafka source's: key, value (binary), topic (string), partition (int),
offset (long), timestamp (timestamp), timestampType (int), and headers (array of struct<key
string, value binary>) when `includeHeaders` is true.

Decoding records is per record by nature (varints), so the loop below does only what it must:
one pass over each batch's payload, appending to plain lists (no object per record beyond the
key and value bytes Arrow copies from), with the one-byte varint case inline. Everything that is
per batch or per column (CRC, decompression, topic, partition, timestamp type, the ms-to-us
timestamp conversion) is done in bulk by crc32c, cramjam and Arrow.
"""

from __future__ import annotations

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from broker.protocol.errors import KafkaError
from broker.protocol.records import BATCH_HEADER_SIZE, decompress, split_batches

__all__ = ["HEADERS_TYPE", "ColumnBuilder", "CorruptBatch", "kafka_schema"]

_TIMESTAMP_TYPE_BIT = 0x08
_CONTROL_BIT = 0x20
_CRC_START = 21

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))


def kafka_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka source schema, as Spark converts it (timestamps in
    microseconds, UTC; every field nullable)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


class CorruptBatch(Exception):
    """A batch that does not check (CRC) or parse; `offset` is its base offset."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def _varint_slow(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of two bytes or more (the one-byte case is inlined by the caller)."""
    shift = 0
    raw = 0
    while True:
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


class ColumnBuilder:
    """Accumulates the records of one partition in [start, end) and hands them out as an Arrow
    RecordBatch in the Spark Kafka schema."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = kafka_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.header_ends: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []
        self.headerless: list[bool] = []  # Spark's headers column is null, not [], without headers

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, records: bytes | bytearray | memoryview, start: int, end: int) -> None:
        """Decode the whole batches of `records` (a fetch answer), keeping offsets in [start,
        end); control batches are skipped. Raises CorruptBatch naming the batch's offset."""
        try:
            spans = split_batches(records, allow_partial_tail=True)
        except KafkaError as exc:
            raise CorruptBatch(start, exc.message or str(exc)) from None
        for pos, header in spans:
            if header.last_offset < start or header.base_offset >= end:
                continue
            if crc32c.crc32c(memoryview(records)[pos + _CRC_START: pos + header.size]) != header.crc:
                raise CorruptBatch(header.base_offset, "batch CRC mismatch")
            if header.attributes & _CONTROL_BIT:
                continue
            try:
                body = memoryview(records)[pos + BATCH_HEADER_SIZE: pos + header.size]
                payload = decompress(header.compression, body)
            except KafkaError as exc:
                raise CorruptBatch(header.base_offset, exc.message or str(exc)) from None
            log_append = bool(header.attributes & _TIMESTAMP_TYPE_BIT)
            try:
                added = self._records(payload, header.records_count, header.base_offset,
                                      header.max_timestamp if log_append else header.base_timestamp,
                                      log_append, start, end)
            except (IndexError, ValueError, UnicodeDecodeError) as exc:
                raise CorruptBatch(header.base_offset, f"malformed record: {exc}") from None
            self.timestamp_types.extend([1 if log_append else 0] * added)

    def _records(self, data: bytes, count: int, base_offset: int, base_ts: int, log_append: bool,
                 start: int, end: int) -> int:
        """One batch's records; returns how many were kept. The hot loop: locals only."""
        keys = self.keys
        values = self.values
        offsets = self.offsets
        timestamps = self.timestamps
        with_headers = self.include_headers
        header_ends = self.header_ends
        header_keys = self.header_keys
        header_values = self.header_values
        headerless = self.headerless
        slow = _varint_slow
        size = len(data)
        pos = 0
        kept = 0
        for _ in range(count):
            # record length
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: magnitudes 64 to 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = slow(data, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise ValueError(f"record length {length}")
            pos += 1  # attributes
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: magnitudes 64 to 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = slow(data, pos)
            b = data[pos]
            if b < 0x80:
                offset = base_offset + ((b >> 1) ^ -(b & 1))
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: magnitudes 64 to 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                offset = base_offset + ((b >> 1) ^ -(b & 1))
                pos += 2
            else:
                delta, pos = slow(data, pos)
                offset = base_offset + delta
            if offset < start or offset >= end:
                pos = record_end
                continue
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: magnitudes 64 to 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos)
            if n < 0:
                keys.append(None)
            else:
                keys.append(data[pos: pos + n])
                pos += n
            b = data[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: magnitudes 64 to 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = slow(data, pos)
            if n < 0:
                values.append(None)
            else:
                values.append(data[pos: pos + n])
                pos += n
            if pos > record_end:
                raise ValueError(f"record at offset {offset} runs past its length")
            if with_headers:
                headers, pos = slow(data, pos)
                if headers < 0 or headers > record_end - pos:
                    raise ValueError(f"header count {headers}")
                for _ in range(headers):
                    n, pos = slow(data, pos)
                    if n < 0:
                        raise ValueError("null header key")
                    header_keys.append(str(data[pos: pos + n], "utf-8"))
                    pos += n
                    n, pos = slow(data, pos)
                    if n < 0:
                        header_values.append(None)
                    else:
                        header_values.append(data[pos: pos + n])
                        pos += n
                if pos > record_end:
                    raise ValueError(f"record at offset {offset} runs past its length")
                header_ends.append(len(header_keys))
                headerless.append(headers == 0)
            offsets.append(offset)
            timestamps.append(base_ts if log_append else base_ts + ts_delta)
            pos = record_end
            kept += 1
        return kept

    def take(self) -> pa.RecordBatch:
        """The records added since the last take, as one RecordBatch in `schema`."""
        n = len(self.offsets)
        millis = pa.array(self.timestamps, pa.int64())
        columns: list[pa.Array] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            entries = pa.StructArray.from_arrays(
                [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
                fields=list(HEADERS_TYPE.value_type),
            )
            columns.append(pa.ListArray.from_arrays(pa.array(self.header_ends, pa.int32()), entries, type=HEADERS_TYPE,
                                                    mask=pa.array(self.headerless, pa.bool_())))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

