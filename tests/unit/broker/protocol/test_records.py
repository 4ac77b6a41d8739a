from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import default_records

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    Record,
    TimestampType,
    batch_crc_ok,
    build_batch,
    decode_batch,
    decompress,
    patch_base_offset,
    patch_partition_leader_epoch,
    read_batch_header,
    set_log_append_time,
    split_batches,
    xerial_blocks,
)

records_strategy = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
        timestamp=st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=50, deadline=None)
@given(records_strategy, st.sampled_from(list(Compression)), st.integers(0, 2**40))
def test_build_then_decode_round_trips_with_every_codec(records: list[Record], codec: Compression, base: int) -> None:
    data = build_batch(records, base_offset=base, compression=codec, producer_id=3, producer_epoch=1, base_sequence=9)
    header, decoded = decode_batch(data)
    assert header.compression == codec and header.records_count == len(records)
    assert header.last_sequence == 9 + len(records) - 1
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded] == [
        (r.key, r.value, list(r.headers), r.timestamp) for r in records
    ]
    assert [r.offset for r in decoded] == list(range(base, base + len(records)))


def test_patching_offset_and_epoch_keeps_the_crc_valid() -> None:
    data = bytearray(build_batch([Record(b"k", b"v")]))
    patch_base_offset(data, 0, 1234)
    patch_partition_leader_epoch(data, 0, 7)
    header = read_batch_header(data)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert batch_crc_ok(data, 0, header)


def test_log_append_time_recomputes_the_crc() -> None:
    data = bytearray(build_batch([Record(b"k", b"v", timestamp=5)]))
    set_log_append_time(data, 0, 99)
    header, records = decode_batch(data)
    assert header.max_timestamp == 99 and records[0].timestamp == 99


def test_split_batches_and_partial_tails() -> None:
    one = build_batch([Record(None, b"a")])
    two = build_batch([Record(None, b"b"), Record(None, b"c")], base_offset=1)
    joined = one + two
    assert [h.base_offset for _, h in split_batches(joined)] == [0, 1]
    with pytest.raises(KafkaError) as exc:
        split_batches(joined[:-5])
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE
    assert len(split_batches(joined[:-5], allow_partial_tail=True)) == 1


def test_old_message_formats_are_refused_by_name() -> None:
    data = bytearray(build_batch([Record(None, b"a")]))
    data[16] = 1  # magic v1
    with pytest.raises(KafkaError) as exc:
        read_batch_header(data)
    assert exc.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_xerial_framed_snappy_from_java_clients_decodes() -> None:
    payload = b"hello kafka " * 100
    block = bytes(cramjam.snappy.compress_raw(payload))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, framed) == payload


def test_corrupt_compressed_payload_is_a_corrupt_message() -> None:
    with pytest.raises(KafkaError) as exc:
        decompress(Compression.ZSTD, b"not zstd at all")
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


# -- header fields and layout ----------------------------------------------------------------


def test_header_fields_sit_where_kafka_puts_them() -> None:
    data = build_batch(
        [Record(b"k", b"v", timestamp=1000), Record(None, b"w", timestamp=1500)],
        base_offset=42,
        compression=Compression.LZ4,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=5,
        is_transactional=True,
    )
    base_offset, batch_length, leader_epoch, magic, crc = struct.unpack_from(">qiibI", data, 0)
    assert (base_offset, batch_length, leader_epoch, magic) == (42, len(data) - 12, 5, 2)
    assert crc == crc32c.crc32c(data[21:])
    header = read_batch_header(data)
    assert header.size == len(data) == BATCH_HEADER_SIZE + len(data) - 61
    assert header.compression == Compression.LZ4
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control
    assert (header.base_timestamp, header.max_timestamp) == (1000, 1500)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 10)
    assert (header.last_offset_delta, header.last_offset, header.records_count) == (1, 43, 2)
    assert header.has_producer_id and header.last_sequence == 11


def test_sequences_wrap_at_int32_max() -> None:
    header = read_batch_header(build_batch([Record(None, b"a")] * 3, producer_id=1, producer_epoch=0,
                                           base_sequence=2**31 - 2))
    assert header.last_sequence == 0
    assert read_batch_header(build_batch([Record(None, b"a")])).last_sequence == -1


@pytest.mark.parametrize("codec", list(Compression))
def test_each_codec_round_trips_keys_values_and_headers(codec: Compression) -> None:
    records = [
        Record(b"key", b"value" * 50, headers=[("trace", b"abc"), ("empty", None)], timestamp=10),
        Record(None, None, timestamp=12),
        Record(b"", b"", headers=[("\u00e9t\u00e9", b"")], timestamp=11),
    ]
    data = build_batch(records, base_offset=100, compression=codec)
    header, decoded = decode_batch(data)
    assert header.compression == codec
    assert header.max_timestamp == 12
    assert [(d.offset, d.timestamp, d.key, d.value, d.headers) for d in decoded] == [
        (100, 10, b"key", b"value" * 50, (("trace", b"abc"), ("empty", None))),
        (101, 12, None, None, ()),
        (102, 11, b"", b"", (("\u00e9t\u00e9", b""),)),
    ]


def test_decode_batch_at_a_position_inside_a_buffer() -> None:
    first = build_batch([Record(None, b"a")])
    second = build_batch([Record(None, b"b")], base_offset=1, compression=Compression.GZIP)
    joined = first + second
    positions = [pos for pos, _ in split_batches(joined)]
    assert positions == [0, len(first)]
    _, records = decode_batch(joined, positions[1])
    assert [(r.offset, r.value) for r in records] == [(1, b"b")]


def test_crc_mismatch_and_short_input_are_corrupt_messages() -> None:
    data = bytearray(build_batch([Record(b"k", b"v")]))
    data[-1] ^= 0x01
    assert not batch_crc_ok(data, 0, read_batch_header(data))
    for bad in (bytes(data), bytes(data[:40]), bytes(data[:-2])):
        with pytest.raises(KafkaError) as exc:
            decode_batch(bad)
        assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


def test_a_length_below_the_header_size_is_corrupt() -> None:
    data = bytearray(build_batch([Record(None, b"a")]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(KafkaError) as exc:
        split_batches(data)
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


def test_patches_work_on_a_memoryview_and_at_an_offset() -> None:
    first = build_batch([Record(None, b"a")])
    buf = bytearray(first + build_batch([Record(None, b"b")]))
    view = memoryview(buf)
    patch_base_offset(view, len(first), 9)
    patch_partition_leader_epoch(view, len(first), 4)
    set_log_append_time(view, len(first), 777)
    header = read_batch_header(buf, len(first))
    assert (header.base_offset, header.partition_leader_epoch, header.max_timestamp) == (9, 4, 777)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch_crc_ok(buf, len(first), header)
    assert read_batch_header(buf).base_offset == 0  # the first batch is untouched


# -- snappy as Java clients frame it ---------------------------------------------------------


def _xerial(payload: bytes, block_size: int) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(payload), block_size):
        block = bytes(cramjam.snappy.compress_raw(payload[start : start + block_size]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def test_xerial_blocks_are_the_size_prefixed_runs_after_the_header() -> None:
    framed = _xerial(b"x" * 250, 100)
    blocks = list(xerial_blocks(memoryview(framed), ErrorCode.INVALID_RECORD))
    assert len(blocks) == 3 and blocks[0][0] == 16 + 4
    for pos, size in blocks:
        assert struct.unpack_from(">i", framed, pos - 4) == (size,)
    assert blocks[-1][0] + blocks[-1][1] == len(framed)
    with pytest.raises(KafkaError) as exc:
        list(xerial_blocks(memoryview(framed[:-3]), ErrorCode.INVALID_RECORD))
    assert exc.value.code == ErrorCode.INVALID_RECORD


def test_xerial_framing_with_several_blocks_decodes() -> None:
    payload = bytes(range(256)) * 300
    assert decompress(Compression.SNAPPY, _xerial(payload, 32 * 1024)) == payload


def test_a_batch_whose_payload_is_xerial_framed_decodes() -> None:
    records = [Record(b"k%d" % i, b"v" * i, timestamp=i) for i in range(50)]
    plain = build_batch(records, compression=Compression.NONE)
    framed = _xerial(plain[BATCH_HEADER_SIZE:], 1000)
    batch = bytearray(plain[:BATCH_HEADER_SIZE] + framed)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    attributes = struct.unpack_from(">h", batch, 21)[0]
    struct.pack_into(">h", batch, 21, attributes | Compression.SNAPPY)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    header, decoded = decode_batch(batch)
    assert header.compression == Compression.SNAPPY
    assert [(r.key, r.value) for r in decoded] == [(r.key, r.value) for r in records]


def test_truncated_xerial_framing_is_a_corrupt_message() -> None:
    framed = _xerial(b"x" * 1000, 100)
    with pytest.raises(KafkaError) as exc:
        decompress(Compression.SNAPPY, framed[:-3])
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(KafkaError) as exc:
        decompress(7, b"")
    assert exc.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# -- hypothesis: splitting and bad bytes -----------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(records_strategy, st.sampled_from(list(Compression))), min_size=1, max_size=5))
def test_split_batches_finds_every_batch_of_a_concatenation(
    batches: list[tuple[list[Record], Compression]],
) -> None:
    built = [build_batch(records, compression=codec) for records, codec in batches]
    joined = b"".join(built)
    found = split_batches(joined)
    assert [pos for pos, _ in found] == [sum(len(b) for b in built[:i]) for i in range(len(built))]
    assert all(batch_crc_ok(joined, pos, header) for pos, header in found)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**16))
def test_damaged_batches_fail_only_with_kafka_errors(noise: bytes, where: int) -> None:
    data = bytearray(build_batch([Record(b"k", b"value", headers=[("h", b"x")])], compression=Compression.GZIP))
    at = where % len(data)
    data[at : at + len(noise)] = noise
    try:
        split_batches(data, allow_partial_tail=True)
        decode_batch(data)
    except KafkaError:
        pass


# -- interop with another implementation -----------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_batches_built_by_kafka_python_decode(codec: Compression) -> None:
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=5, producer_epoch=1,
        base_sequence=0, batch_size=1 << 20,
    )
    for i in range(10):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"%d" % i)])
    data = bytes(builder.build())
    header, decoded = decode_batch(data)
    assert (header.producer_id, header.records_count, header.compression) == (5, 10, codec)
    assert [(r.offset, r.timestamp, r.key, r.headers) for r in decoded] == [
        (i, 1000 + i, b"k%d" % i, (("h", b"%d" % i),)) for i in range(10)
    ]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_batches_we_build_are_read_by_kafka_python(codec: Compression) -> None:
    records = [Record(b"k%d" % i, b"v" * i, headers=[("h", b"x")], timestamp=50 + i) for i in range(10)]
    batch = default_records.DefaultRecordBatch(build_batch(records, base_offset=7, compression=codec))
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch] == [
        (7 + i, 50 + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(10)
    ]
