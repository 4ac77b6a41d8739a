"""Batches whose header cannot vouch for their max timestamp (issue 19, item 1): what the produce
path recomputes, what it leaves byte for byte alone, and how retention ages such segments."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import crc32c
import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    Compression,
    Record,
    batch_crc_ok,
    build_batch,
    decode_batch,
    read_batch_header,
    split_batches,
)
from broker.protocol.validation import LONG_MAX, check_produced, max_timestamp_trusted
from broker.storage import Log, LogConfig, cleaner

NOW = 1_700_000_000_000
DAY = 86_400_000


def librdkafka_batch(timestamps: list[int], *, compression: int = Compression.NONE) -> bytes:
    """A batch as librdkafka writes it: FirstTimestamp the first record's, MaxTimestamp the
    largest of 0 and the records' (its running maximum starts at 0), CRC over both."""
    batch = bytearray(build_batch([Record(b"k", b"v%d" % i, timestamp=t) for i, t in enumerate(timestamps)],
                                  base_timestamp=timestamps[0], compression=compression))
    struct.pack_into(">q", batch, 35, max(0, *timestamps))
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)


@pytest.mark.parametrize(("timestamps", "trusted", "largest"), [
    ([-1, -1, -1], False, -1),  # librdkafka, no timestamps: the header says 0
    ([-1, NOW, NOW + 5], False, NOW + 5),  # the first without, the rest with: the header is right
    ([-7, -3], False, -1),  # Kafka's max starts at -1 (NO_TIMESTAMP)
    ([NOW, NOW + 9, NOW + 2], True, NOW + 9),  # the common case: never read
    ([0, 0], False, 0),  # records really at 0 ms: read, and kept as 0
    ([-1] * 50, False, -1),  # runs of equal-sized records: read by the fast walk
    ([-1] * 50 + [NOW], False, NOW),  # a delta of six bytes: read record by record
])
def test_which_headers_are_trusted_and_what_the_records_say(timestamps: list[int], trusted: bool,
                                                             largest: int) -> None:
    for codec in (Compression.NONE, Compression.ZSTD):
        batch = librdkafka_batch(timestamps, compression=codec)
        header = read_batch_header(batch)
        assert max_timestamp_trusted(header) is trusted
        stored = check_produced(batch, 0, header, transactional=False, now_ms=NOW, before_max_ms=LONG_MAX,
                                after_max_ms=LONG_MAX)
        assert (header.max_timestamp if stored is None else stored) == largest
        assert stored is None or stored != header.max_timestamp  # None: the header's stands


def test_a_header_max_below_its_first_timestamp_is_not_trusted() -> None:
    batch = bytearray(build_batch([Record(b"k", b"v", timestamp=NOW)]))
    struct.pack_into(">q", batch, 35, NOW - 1)
    assert not max_timestamp_trusted(read_batch_header(batch))


def open_log(path: Path, **config: object) -> Log:
    return Log.open(path, LogConfig(**config))  # type: ignore[arg-type]


def stored(log: Log) -> list[tuple[bytes, int]]:
    data = b"".join(s.path.read_bytes() for s in log.segments)
    return [(data, pos) for pos, _ in split_batches(data)]


def test_the_leader_stores_kafkas_max_timestamp_and_a_valid_crc(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(librdkafka_batch([-1, -1]), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(librdkafka_batch([-1, NOW - 3, NOW]), leader_epoch=0, now_ms=NOW)
    (first, a), (second, b) = stored(log)
    ha, hb = read_batch_header(first, a), read_batch_header(second, b)
    assert (ha.base_timestamp, ha.max_timestamp) == (-1, -1)
    assert (hb.base_timestamp, hb.max_timestamp) == (-1, NOW)
    assert batch_crc_ok(first, a, ha) and batch_crc_ok(second, b, hb)
    assert [r.timestamp for r in decode_batch(first, a)[1]] == [-1, -1]
    assert log.active.max_timestamp == NOW


def test_a_trusted_header_is_stored_byte_for_byte(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    sent = librdkafka_batch([NOW, NOW + 4])
    log.append_as_leader(sent, leader_epoch=-1, now_ms=NOW)
    (data, pos), = stored(log)
    assert data[pos + 21:] == sent[21:]  # from the attributes on: the CRC is the producer's


def test_bounds_skip_records_without_timestamp_and_check_the_others(tmp_path: Path) -> None:
    bounds = {"now_ms": NOW, "before_max_ms": DAY, "after_max_ms": 3_600_000, "transactional": False}
    for timestamps in ([-1, -1], [-1, NOW - 10]):
        batch = librdkafka_batch(timestamps)
        check_produced(batch, 0, read_batch_header(batch), **bounds)  # type: ignore[arg-type]
    for timestamps, bad in (([-1, NOW - 2 * DAY], 1), ([-5, -1], 0)):
        batch = librdkafka_batch(timestamps)
        with pytest.raises(KafkaError) as refused:
            check_produced(batch, 0, read_batch_header(batch), **bounds)  # type: ignore[arg-type]
        assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
        assert f"Timestamp {timestamps[bad]} of message with offset delta {bad} is out of range" in str(refused.value)
    unbounded = {**bounds, "before_max_ms": LONG_MAX, "after_max_ms": LONG_MAX}
    batch = librdkafka_batch([-5, -1])
    check_produced(batch, 0, read_batch_header(batch), **unbounded)  # type: ignore[arg-type]


def test_retention_ages_a_segment_without_timestamps_by_its_last_write(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", retention_ms=DAY, segment_bytes=200)
    for _ in range(3):
        log.append_as_leader(librdkafka_batch([-1, -1]), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    segments = len(log.segments)
    assert segments >= 2
    assert all(s.max_timestamp == -1 for s in log.segments)
    assert log.apply_retention(NOW + DAY) == 0  # a day after the last write: not yet past
    assert log.apply_retention(NOW + DAY + 1) == segments  # the active one rolled, then all went
    assert log.log_start_offset == log.log_end_offset == 6


def test_a_segment_of_header_max_zero_is_aged_by_its_file(tmp_path: Path) -> None:
    # Written before the fix (or copied from such a log): the header's 0 is no timestamp.
    log = open_log(tmp_path / "t-0", retention_ms=DAY)
    log.append_as_follower(librdkafka_batch([-1, -1]), now_ms=NOW)
    assert log.active.max_timestamp == 0
    log.close()
    os.utime(log.active.path, ns=(NOW * 10**6, NOW * 10**6))
    reopened = open_log(tmp_path / "t-0", retention_ms=DAY)  # its high watermark: the log end
    assert reopened.active.largest_timestamp() == NOW
    assert reopened.apply_retention(NOW + DAY) == 0
    assert reopened.apply_retention(NOW + DAY + 1) == 1
    assert reopened.log_start_offset == 2



def test_compaction_keeps_the_age_of_a_segment_without_timestamps(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    config = LogConfig(cleanup_policy="compact,delete", segment_bytes=300, retention_ms=2 * DAY)
    log = Log.open(tmp_path / "k-0", config, now_ms=now)
    for round_ in range(3):
        for key in (b"a", b"b", b"c"):
            log.append_as_leader(build_batch([Record(key, b"%s%d" % (key, round_), timestamp=-1)]),
                                 leader_epoch=0, now_ms=now)
    log.close()
    three_days_ago = now - 3 * DAY
    for segment in log.segments:
        os.utime(segment.path, ns=(three_days_ago * 10**6, three_days_ago * 10**6))
    log = Log.open(tmp_path / "k-0", config, now_ms=now)
    log.high_watermark = log.log_end_offset
    work = cleaner.plan(log, now)
    assert work is not None
    assert cleaner.swap(log, work, cleaner.build_cleaned(work, now)) >= 1
    cleaned = [s for s in log.segments if s.base_offset in {base for base, _ in work.segments}]
    assert cleaned and all(s.largest_timestamp() == three_days_ago for s in cleaned)
    assert log.apply_retention(now) >= len(cleaned)  # as old as before: past retention.ms
