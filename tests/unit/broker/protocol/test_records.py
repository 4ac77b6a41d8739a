from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    Compression,
    Record,
    batch_crc_ok,
    build_batch,
    decode_batch,
    decompress,
    patch_base_offset,
    patch_partition_leader_epoch,
    read_batch_header,
    set_log_append_time,
    split_batches,
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
