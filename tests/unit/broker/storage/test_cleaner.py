from __future__ import annotations

from pathlib import Path

from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from broker.storage import Log, LogConfig, cleaner

NOW = 1_700_000_000_000
DAY = 86_400_000


def keyed(log: Log, key: bytes, value: bytes | None, ts: int = NOW) -> int:
    result = log.append_as_leader(build_batch([Record(key, value, timestamp=ts)]), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    return result.first_offset


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        if not data:
            break
        for pos, header in split_batches(data, allow_partial_tail=True):
            out += [(r.offset, r.key, r.value) for r in decode_batch(data, pos)[1] if r.offset >= offset]
            offset = header.last_offset + 1
    return out


def compact(log: Log, now_ms: int = NOW) -> int:
    work = cleaner.plan(log, now_ms)
    if work is None:
        return 0
    return cleaner.swap(log, work, cleaner.build_cleaned(work, now_ms))


def fill(path: Path) -> Log:
    """Keys a, b, c written three times over several segments, b deleted, then an active tail."""
    log = Log.open(path, LogConfig(cleanup_policy="compact", segment_bytes=300), now_ms=NOW)
    for round_ in range(3):
        for key in (b"a", b"b", b"c"):
            keyed(log, key, b"%s%d" % (key, round_))
    keyed(log, b"b", None)  # tombstone
    keyed(log, b"a", b"a-final")
    log.roll()
    keyed(log, b"c", b"c-in-active")
    return log


def test_compaction_keeps_the_latest_value_per_key_and_every_offset(tmp_path: Path) -> None:
    log = fill(tmp_path / "k-0")
    before = contents(log)
    assert compact(log) > 0
    after = contents(log)
    # Latest per key among the cleaned segments; the active segment is left alone.
    assert after == [(8, b"c", b"c2"), (9, b"b", None), (10, b"a", b"a-final"), (11, b"c", b"c-in-active")]
    assert {o for o, _, _ in after} <= {o for o, _, _ in before}  # offsets kept, never renumbered
    assert log.log_end_offset == 12
    # A second pass finds nothing new to do, until the kept tombstone may go.
    assert cleaner.plan(log, NOW) is None
    assert cleaner.plan(log, NOW + 2 * DAY) is not None
    compact(log, NOW + 2 * DAY)
    assert [o for o, _, _ in contents(log)] == [8, 10, 11]


def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    log = fill(tmp_path / "k-0")
    compact(log, now_ms=NOW + 2 * DAY)  # delete.retention.ms is one day by default
    assert [(o, k) for o, k, _ in contents(log)] == [(8, b"c"), (10, b"a"), (11, b"c")]


def test_compacted_log_survives_reopen_with_indexes_rebuilt(tmp_path: Path) -> None:
    log = fill(tmp_path / "k-0")
    compact(log)
    expected = contents(log)
    log.close()
    reopened = Log.open(tmp_path / "k-0", LogConfig(cleanup_policy="compact", segment_bytes=300),
                        recovery_point=None, now_ms=NOW)
    assert contents(reopened) == expected
    assert reopened.read(3, 1 << 20).data  # a read inside a compacted-away range finds what follows


def test_a_crash_while_writing_the_cleaned_copy_loses_nothing(tmp_path: Path) -> None:
    log = fill(tmp_path / "k-0")
    expected = contents(log)
    work = cleaner.plan(log, NOW)
    assert work is not None
    cleaner.build_cleaned(work, NOW)  # written, but the broker dies before the swap
    leftovers = list((tmp_path / "k-0").glob("*.cleaned"))
    assert leftovers
    log.close()
    reopened = Log.open(tmp_path / "k-0", LogConfig(cleanup_policy="compact", segment_bytes=300),
                        recovery_point=None, now_ms=NOW)
    assert not list((tmp_path / "k-0").glob("*.cleaned"))
    assert contents(reopened) == expected


def test_a_crash_between_index_removal_and_rename_rebuilds_the_indexes(tmp_path: Path) -> None:
    log = fill(tmp_path / "k-0")
    expected = contents(log)
    first = log.segments[0]
    first.offset_index.delete()
    first.time_index.delete()  # what swap() does first; then the process dies
    log.close()
    reopened = Log.open(tmp_path / "k-0", LogConfig(cleanup_policy="compact", segment_bytes=300),
                        recovery_point=log.log_end_offset, now_ms=NOW)
    assert contents(reopened) == expected
    assert (tmp_path / "k-0" / "00000000000000000000.index").exists()


def test_delete_policy_logs_are_never_compacted(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "d-0", LogConfig(segment_bytes=200), now_ms=NOW)
    for _ in range(5):
        keyed(log, b"same", b"v")
    assert cleaner.plan(log, NOW) is None


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path: Path) -> None:
    import pytest

    from broker.protocol.errors import ErrorCode, KafkaError

    log = Log.open(tmp_path / "k-0", LogConfig(cleanup_policy="compact"), now_ms=NOW)
    with pytest.raises(KafkaError) as exc:
        log.append_as_leader(build_batch([Record(b"k", b"v"), Record(None, b"v")]), leader_epoch=0, now_ms=NOW)
    assert exc.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0
