"""check_batch and friends over every kind of poison batch (issue 10, item 9).

Batches are built with the project's encoder, then damaged, with the CRC fixed after the damage
(a batch with a wrong CRC never gets this far), so each test shows the validator, not the CRC,
refusing it.
"""

from __future__ import annotations

import struct
import time

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import validation
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    read_batch_header,
    stamp_producer,
)
from broker.protocol.validation import (
    check_batch,
    check_timestamps,
    check_transactional,
    effective_timestamp_bounds,
)

LONG_MAX = 2**63 - 1
_HEADER = struct.Struct(">qiibIhiqqqhii")
_FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
           "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
           "base_sequence", "records_count")
CODECS = list(Compression)


def records(n: int, size: int = 20) -> list[Record]:
    return [Record(b"k%d" % i, b"v" * size) for i in range(n)]


def restamp(batch: bytes | bytearray, payload: bytes | None = None, **changes: int) -> bytearray:
    """The batch with header fields changed and/or its records replaced; length and CRC fixed."""
    values = dict(zip(_FIELDS, _HEADER.unpack_from(batch, 0), strict=True))
    body = bytes(batch[BATCH_HEADER_SIZE:]) if payload is None else payload
    values.update(changes)
    values["batch_length"] = BATCH_HEADER_SIZE - 12 + len(body)
    out = bytearray(_HEADER.pack(*(values[f] for f in _FIELDS))) + body
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return out


def check(batch: bytes | bytearray | memoryview, pos: int = 0) -> None:
    check_batch(batch, pos, read_batch_header(batch, pos))


def refused(batch: bytes | bytearray, code: ErrorCode) -> str:
    with pytest.raises(KafkaError) as info:
        check(batch)
    assert info.value.code == code, info.value
    assert info.value.message
    return info.value.message


# -- sound batches pass ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_passes(codec: Compression) -> None:
    check(build_batch(records(300), compression=codec))


@pytest.mark.parametrize("size", [0, 1, 50, 63, 64, 8000, 8200, 70_000])
def test_record_sizes_across_varint_widths_pass(size: int) -> None:
    check(build_batch(records(12, size)))
    check(build_batch([Record(None, b"x" * (size + i)) for i in range(12)]))


def test_uniform_runs_and_mixed_sizes_pass() -> None:
    now = int(time.time() * 1000)
    check(build_batch(records(1000, 100)))
    check(build_batch([Record(None, b"v" * (i % 7 * 30), timestamp=now + i // 10) for i in range(1000)]))
    check(build_batch([Record(None, b"v" * 100, [("h", b"x" * (i % 2))]) for i in range(500)]))


def test_batch_inside_a_bigger_buffer_and_memoryviews_pass() -> None:
    first = build_batch(records(3))
    second = build_batch(records(70), compression=Compression.LZ4)
    buf = bytearray(first + second)
    check(buf, len(first))
    check(memoryview(buf), len(first))
    check(memoryview(buf)[len(first):])


def test_java_clients_xerial_snappy_passes() -> None:
    plain = build_batch(records(40, 90))
    body = plain[BATCH_HEADER_SIZE:]
    framed = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for chunk in (body[:1000], body[1000:]):
        block = bytes(cramjam.snappy.compress_raw(chunk))
        framed += struct.pack(">i", len(block)) + block
    check(restamp(plain, bytes(framed), attributes=int(Compression.SNAPPY)))


def test_idempotent_and_transactional_headers_pass_when_allowed() -> None:
    batch = build_batch(records(5), producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    check(batch)
    check_transactional(read_batch_header(batch), transactional=True)


# -- poison ------------------------------------------------------------------------------------


@pytest.mark.parametrize("claimed", [4, 6, 1000])
def test_a_record_count_that_lies_is_refused(claimed: int) -> None:
    batch = build_batch(records(5))
    message = refused(restamp(batch, records_count=claimed, last_offset_delta=claimed - 1), ErrorCode.INVALID_RECORD)
    assert str(claimed) in message


@pytest.mark.parametrize("codec", CODECS)
def test_a_count_that_lies_is_refused_in_compressed_batches(codec: Compression) -> None:
    batch = build_batch(records(50), compression=codec)
    refused(restamp(batch, records_count=51, last_offset_delta=50), ErrorCode.INVALID_RECORD)
    refused(restamp(batch, records_count=49, last_offset_delta=48), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize(("count", "delta"), [(0, -1), (-3, -4), (5, 3), (5, 7), (5, -1)])
def test_count_and_offset_range_must_agree(count: int, delta: int) -> None:
    refused(restamp(build_batch(records(5)), records_count=count, last_offset_delta=delta), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_refused(codec: int) -> None:
    message = refused(restamp(build_batch(records(3)), attributes=codec), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    assert f"codec {codec}" in message


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_a_codec_flag_on_plain_bytes_is_refused(codec: Compression) -> None:
    message = refused(restamp(build_batch(records(5)), attributes=int(codec)), ErrorCode.INVALID_RECORD)
    assert codec.name.lower() in message


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_truncated_compressed_payloads_are_refused(codec: Compression) -> None:
    batch = build_batch(records(200, 50), compression=codec)
    payload = bytes(batch[BATCH_HEADER_SIZE:])
    with pytest.raises(KafkaError) as info:
        check(restamp(batch, payload[: len(payload) // 2]))
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_plain_codec_over_compressed_bytes_is_refused() -> None:
    batch = build_batch(records(20), compression=Compression.GZIP)
    refused(restamp(batch, attributes=0), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("seed", range(20))
def test_garbage_records_are_refused(seed: int) -> None:
    garbage = bytes(cramjam.zstd.compress(b"%d" % seed * 300))[: 200 + seed * 13]  # arbitrary bytes
    refused(restamp(build_batch(records(5)), garbage), ErrorCode.INVALID_RECORD)


def test_records_that_overrun_or_leave_bytes_are_refused() -> None:
    batch = build_batch(records(5))
    payload = bytes(batch[BATCH_HEADER_SIZE:])
    assert "EOF" in refused(restamp(batch, payload[:-1]), ErrorCode.INVALID_RECORD)
    refused(restamp(batch, payload + b"\x00" * 7), ErrorCode.INVALID_RECORD)
    # A first record whose length says -1, and one that says 2 (below the smallest record).
    refused(restamp(batch, b"\x01" + payload[1:]), ErrorCode.INVALID_RECORD)
    refused(restamp(batch, b"\x04" + payload[1:]), ErrorCode.INVALID_RECORD)
    # A length varint that never ends.
    refused(restamp(batch, b"\xff" * len(payload)), ErrorCode.INVALID_RECORD)


def test_a_batch_running_past_the_buffer_is_corrupt() -> None:
    batch = build_batch(records(5))
    header = read_batch_header(batch)
    with pytest.raises(KafkaError) as info:
        check_batch(batch[:-3], 0, header)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_the_control_bit_from_a_client_is_refused() -> None:
    batch = build_batch(records(1), is_control=True)
    assert "control" in refused(batch, ErrorCode.INVALID_RECORD)


def test_a_producer_id_without_a_sequence_is_refused() -> None:
    batch = build_batch(records(2), producer_id=5, producer_epoch=0, base_sequence=-1)
    assert "sequence" in refused(batch, ErrorCode.INVALID_RECORD)


def test_the_transactional_bit_needs_a_transactional_produce() -> None:
    header = read_batch_header(build_batch(records(2), producer_id=5, producer_epoch=0, base_sequence=0,
                                           is_transactional=True))
    with pytest.raises(KafkaError) as info:
        check_transactional(header, transactional=False)
    assert info.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    check_transactional(read_batch_header(build_batch(records(2))), transactional=False)


def test_a_decompression_bomb_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    for codec in (Compression.GZIP, Compression.ZSTD, Compression.LZ4, Compression.SNAPPY):
        bomb = build_batch([Record(None, b"\x00" * (300 << 10)) for _ in range(5)], compression=codec)
        with pytest.raises(KafkaError) as info:
            check(bomb)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE, codec


def test_a_snappy_size_claim_no_payload_can_back_is_refused() -> None:
    batch = build_batch(records(5), compression=Compression.SNAPPY)
    lie = b"\xff\xff\xff\x7f" + bytes(batch[BATCH_HEADER_SIZE + 1 :])  # claims 256 MiB
    refused(restamp(batch, lie), ErrorCode.INVALID_RECORD)


# -- timestamps ------------------------------------------------------------------------------


NOW = 1_800_000_000_000
HOUR = 3_600_000


def ts_check(batch: bytes | bytearray, before: int = LONG_MAX, after: int = LONG_MAX) -> None:
    check_batch(batch, 0, read_batch_header(batch))
    check_timestamps(batch, 0, read_batch_header(batch), now_ms=NOW, before_max_ms=before, after_max_ms=after)


@pytest.mark.parametrize("codec", CODECS)
def test_timestamps_outside_the_window_are_refused(codec: Compression) -> None:
    old = build_batch([Record(None, b"v", timestamp=NOW - 2 * HOUR)], compression=codec)
    new = build_batch([Record(None, b"v", timestamp=NOW + 2 * HOUR)], compression=codec)
    ts_check(old)
    ts_check(new)  # Kafka's default: no bound
    for batch, before, after in ((old, HOUR, LONG_MAX), (new, LONG_MAX, HOUR)):
        with pytest.raises(KafkaError) as info:
            ts_check(batch, before, after)
        assert info.value.code == ErrorCode.INVALID_TIMESTAMP
        assert "out of range" in info.value.message
    ts_check(old, before=3 * HOUR, after=0)


def test_one_record_far_off_inside_a_plausible_header_is_refused() -> None:
    # The base and max timestamps look fine; a middle record's delta points years back.
    recs = [Record(None, b"v", timestamp=NOW), Record(None, b"v", timestamp=NOW - 365 * 24 * HOUR),
            Record(None, b"v", timestamp=NOW)]
    batch = build_batch(recs, base_timestamp=NOW)
    with pytest.raises(KafkaError) as info:
        ts_check(batch, before=HOUR)
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP


def test_no_timestamp_and_log_append_time_batches() -> None:
    ts_check(build_batch([Record(None, b"v")], base_timestamp=-1), before=1, after=1)
    stamped = build_batch([Record(None, b"v")], base_timestamp=NOW, timestamp_type=TimestampType.LOG_APPEND_TIME)
    ts_check(stamped, before=1, after=1)


def test_kip_937_resolution() -> None:
    hour = validation.DEFAULT_AFTER_MAX_MS
    assert effective_timestamp_bounds(LONG_MAX, hour, LONG_MAX) == (LONG_MAX, hour)  # Kafka 4's defaults
    assert effective_timestamp_bounds(LONG_MAX, hour, 5) == (5, 5)  # the old key, where the new are default
    assert effective_timestamp_bounds(7, hour, 5) == (7, 5)
    assert effective_timestamp_bounds(LONG_MAX, 9, 5) == (5, 9)
    assert effective_timestamp_bounds(LONG_MAX, LONG_MAX, LONG_MAX) == (LONG_MAX, LONG_MAX)


# -- properties ------------------------------------------------------------------------------


record_strategy = st.builds(
    Record,
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=120), st.sampled_from(CODECS))
def test_every_well_formed_batch_passes(recs: list[Record], codec: Compression) -> None:
    check(build_batch(recs, compression=codec))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=200), min_size=1, max_size=60), st.data())
def test_damaged_records_are_refused_or_still_decode(values: list[bytes], data: st.DataObject) -> None:
    """Flip bytes in the records (CRC fixed): the validator either refuses the batch with
    INVALID_RECORD, or the records still tile the payload exactly as declared, so a consumer
    lands on every record boundary and sees each offset once. (A flip inside a record's own
    fields, within its bounds, is not looked for: see validation.py's cost note.) The fast
    walk never accepts what the precise walk refuses."""
    batch = build_batch([Record(None, v) for v in values])
    body = bytearray(batch[BATCH_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    damaged = restamp(batch, bytes(body))
    fast = validation.framing_ok(damaged, BATCH_HEADER_SIZE, len(damaged), len(values))
    try:
        check(damaged)
    except KafkaError as exc:
        assert exc.code == ErrorCode.INVALID_RECORD
        assert not fast
        return
    validation.walk_precisely(damaged, BATCH_HEADER_SIZE, len(damaged), len(values))
    try:
        decode_batch(damaged)
    except KafkaError:
        pass  # a record's own fields damaged within its bounds


def _tiny_records_batch(count: int, *, compression: Compression, pattern: bytes) -> bytes:
    """`count` smallest records (lengths 6 and 7 in `pattern` order, 'a' for 6, 'b' for 7),
    compressed: what an attacker sends to make a few bytes cost millions of records."""
    six, seven = bytes([12, 0, 0, 0, 1, 1, 0]), bytes([14, 0, 0, 0, 1, 1, 0, 0])
    def records_of(kinds: bytes) -> bytes:
        return b"".join(six if c == ord("a") else seven for c in kinds)

    body = records_of(pattern) * (count // len(pattern)) + records_of(pattern[: count % len(pattern)])
    batch = build_batch([Record(None, None)], compression=compression)
    payload = bytes(cramjam.zstd.compress(body) if compression == Compression.ZSTD
                    else cramjam.gzip.compress(body))
    return bytes(restamp(batch, payload, records_count=count, last_offset_delta=count - 1))


def test_a_few_compressed_bytes_cannot_claim_millions_of_records() -> None:
    bomb = _tiny_records_batch(17_000_000, compression=Compression.ZSTD, pattern=b"ab")
    assert len(bomb) < 64 << 10
    assert "decompress to more than" in refused(bytearray(bomb), ErrorCode.MESSAGE_TOO_LARGE)


@pytest.mark.parametrize("pattern", [b"ab", b"aab", b"abbbbbbbbbbbbbbbbbbba", b"a"])
def test_periodic_records_within_the_bound_pass_and_a_lie_among_them_is_found(pattern: bytes) -> None:
    count = 600_000
    good = _tiny_records_batch(count, compression=Compression.ZSTD, pattern=pattern)
    check(good)
    refused(restamp(good, records_count=count + 1, last_offset_delta=count), ErrorCode.INVALID_RECORD)
    refused(restamp(good, records_count=count - 1, last_offset_delta=count - 2), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("spread", [1, 5_000, 30 * 60_000])  # one-, two- and three-byte deltas
def test_timestamp_deltas_of_every_width(spread: int) -> None:
    recs = [Record(None, b"v", timestamp=NOW + d) for d in (0, -spread, spread, spread // 2)]
    batch = build_batch(recs, base_timestamp=NOW)
    ts_check(batch, before=spread, after=spread)
    for before, after in ((spread - 1, spread), (spread, spread - 1)):
        with pytest.raises(KafkaError) as info:
            ts_check(batch, before, after)
        assert info.value.code == ErrorCode.INVALID_TIMESTAMP


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-3 * HOUR, 3 * HOUR), min_size=1, max_size=150),
    st.sampled_from([None, 0, 100, 7000]),  # None: sizes vary; else every value this long
    st.sampled_from(CODECS),
    st.sampled_from([(HOUR, HOUR), (LONG_MAX, HOUR), (HOUR, LONG_MAX), (10, 10), (LONG_MAX, 4000)]),
    st.sampled_from([None, 50, 5000]),
)
def test_check_produced_agrees_with_reading_every_record(offsets: list[int], size: int | None, codec: Compression,
                                                          bounds: tuple[int, int], spread: int | None) -> None:
    """Whatever the mix of delta widths, runs and codecs, check_produced refuses exactly the
    batches with a record timestamp outside the window, as reading every record says."""
    if spread is not None:  # deltas of a few ms or s, not negative: one- and two-byte columns
        offsets = [o % spread for o in offsets]
    recs = [Record(None, b"v" * (size if size is not None else (i * 37) % 300), timestamp=NOW + o)
            for i, o in enumerate(offsets)]
    batch = build_batch(recs, compression=codec, base_timestamp=NOW + offsets[0])
    before, after = bounds
    _, decoded = decode_batch(batch)
    inside = all((before == LONG_MAX or r.timestamp >= NOW - before)
                 and (after == LONG_MAX or r.timestamp <= NOW + after) for r in decoded)
    header = read_batch_header(batch)
    try:
        validation.check_produced(batch, 0, header, transactional=False, now_ms=NOW, before_max_ms=before,
                                  after_max_ms=after)
    except KafkaError as exc:
        assert exc.code == ErrorCode.INVALID_TIMESTAMP
        assert not inside
        return
    assert inside


def test_a_produced_batch_must_start_at_base_offset_zero() -> None:
    """Kafka's LogValidator refuses a client's batch whose base offset is not 0 (the broker
    assigns offsets); a batch copied out of a log and re-sent must be reset first."""
    batch = bytearray(build_batch(records(3), base_offset=40))
    header = read_batch_header(batch)
    with pytest.raises(KafkaError) as refused:
        validation.check_produced(batch, 0, header, transactional=False, now_ms=NOW, before_max_ms=LONG_MAX,
                                  after_max_ms=LONG_MAX)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert "should be 0, but it is 40" in str(refused.value)


def test_stamping_a_producer_resets_the_base_offset_and_keeps_the_crc_valid() -> None:
    batch = bytearray(build_batch(records(3), base_offset=40))
    stamp_producer(batch, 0, 7, 1, 0)
    header = read_batch_header(batch)
    assert (header.base_offset, header.producer_id, header.producer_epoch) == (0, 7, 1)
    check_batch(batch, 0, header)  # the CRC does not cover the base offset: still valid
    validation.check_produced(batch, 0, header, transactional=False, now_ms=NOW, before_max_ms=LONG_MAX,
                              after_max_ms=LONG_MAX)
