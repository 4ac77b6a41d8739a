"""The chaos checker against hand-made source and target partitions: every category caught, and
nothing reported for a faithful copy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.protocol.records import DecodedRecord
from deploy.chaos.checker import CATEGORIES, check, check_partition
from deploy.chaos.payload import make_record, read_payload

RUN = "r1"


def records(partition: int, seqs: range | list[int], *, run: str = RUN, start_offset: int = 0) -> list[DecodedRecord]:
    out = []
    for i, seq in enumerate(seqs):
        r = make_record(run, partition, seq, timestamp_ms=1_700_000_000_000 + seq)
        assert r.timestamp is not None
        out.append(DecodedRecord(start_offset + i, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


def at_target(recs: list[DecodedRecord]) -> list[DecodedRecord]:
    """The same records renumbered from offset 0, as a remote topic holds them."""
    return [replace(r, offset=i) for i, r in enumerate(recs)]


def counts(report: object) -> dict[str, int]:
    return {c: report.count(c) for c in CATEGORIES}  # type: ignore[attr-defined]


def only(**expected: int) -> dict[str, int]:
    return {c: expected.get(c, 0) for c in CATEGORIES}


def test_payload_round_trip_and_digest() -> None:
    r = make_record(RUN, 2, 41, timestamp_ms=1041)
    assert r.key == b"key-9" and r.timestamp == 1041
    payload = read_payload(r.key, r.value, r.headers, 1041)
    assert payload is not None and (payload.run, payload.partition, payload.seq, payload.intact) == (RUN, 2, 41, True)
    moved = read_payload(r.key, r.value, r.headers, 1042)
    assert moved is not None and not moved.intact  # the timestamp is covered
    assert read_payload(r.key, b"someone else's value", (), 0) is None
    with pytest.raises(ValueError):
        make_record("a|b", 0, 0, timestamp_ms=0)


def test_a_faithful_copy_is_clean() -> None:
    source = records(0, range(100))
    report = check_partition(0, source, at_target(source), acked=range(100), run=RUN)
    assert counts(report) == only()
    assert report.ok and report.duplicate_runs == 0


def test_lost_in_the_middle_and_missing_tail() -> None:
    source = records(0, range(10))
    target = at_target(source[:3] + source[4:8])  # seq 3 skipped; 8 and 9 not there yet
    report = check_partition(0, source, target, run=RUN)
    assert counts(report) == only(lost=1, tail=2)
    assert [e.seq for e in report.examples["lost"]] == [3]
    assert [e.seq for e in report.examples["tail"]] == [8, 9]
    assert not report.ok


def test_acknowledged_but_missing_at_the_source_is_lost() -> None:
    source = records(0, range(5))
    report = check_partition(0, source, at_target(source), acked=range(6), run=RUN)
    assert counts(report) == only(lost=1)
    assert report.examples["lost"][0].seq == 5
    assert "absent at the source" in report.examples["lost"][0].detail


def test_duplicate_after_a_gap() -> None:
    source = records(0, range(6))
    a, b, c, d, e, f = source
    report = check_partition(0, source, at_target([a, b, c, b, d, e, f]), run=RUN)
    assert counts(report) == only(duplicated=1)  # not also reordered: only first arrivals count for order
    assert report.duplicate_runs == 1
    dup = report.examples["duplicated"][0]
    assert (dup.seq, dup.target_offset) == (1, 3)


def test_a_replay_from_a_checkpoint_is_explained_only_where_a_checkpoint_was() -> None:
    source = records(0, range(20))
    replayed = at_target(source[:15] + source[10:])  # a crashed mirror resumed at offset 10
    explained = check_partition(0, source, replayed, run=RUN, replay_starts={10})
    assert counts(explained) == only(duplicated=5)
    assert explained.duplicate_runs == 1 and explained.ok
    unexplained = check_partition(0, source, replayed, run=RUN, replay_starts={12})
    assert counts(unexplained) == only(duplicated=5, unexplained_duplicates=5)
    assert not unexplained.ok
    # Two crashes in a row, the second during the first replay: two runs, both from offset 10.
    twice = at_target(source[:15] + source[10:12] + source[10:])
    report = check_partition(0, source, twice, run=RUN, replay_starts={10})
    assert counts(report) == only(duplicated=7) and report.duplicate_runs == 2


def test_reordering_across_keys_within_a_partition() -> None:
    source = records(0, range(8))  # keys key-0 .. key-7: every record has its own key
    target = at_target([source[0], source[2], source[1], *source[3:]])
    report = check_partition(0, source, target, run=RUN)
    assert counts(report) == only(reordered=1)
    assert report.examples["reordered"][0].seq in (1, 2)
    # A block of three moved ahead of two records counts the two that must move.
    block = at_target(source[:1] + source[3:6] + source[1:3] + source[6:])
    assert counts(check_partition(0, source, block, run=RUN)) == only(reordered=2)


def test_a_flipped_byte_is_corrupted_and_not_also_lost() -> None:
    source = records(0, range(5))
    target = at_target(source)
    value = bytearray(target[2].value or b"")
    value[20] ^= 0x01  # inside the filler
    target[2] = replace(target[2], value=bytes(value))
    report = check_partition(0, source, target, run=RUN)
    assert counts(report) == only(corrupted=1)
    assert report.examples["corrupted"][0].seq == 2


def test_changed_key_header_or_timestamp_is_corrupted() -> None:
    source = records(0, range(4))
    target = at_target(source)
    target[0] = replace(target[0], key=b"key-other")
    target[1] = replace(target[1], headers=target[1].headers[:1])
    target[2] = replace(target[2], timestamp=target[2].timestamp + 1)
    target[3] = replace(target[3], value=b"garbage")
    report = check_partition(0, source, target, run=RUN)
    # The unreadable one (seq 3) cannot be matched, so its record is also missing at the end.
    assert counts(report) == only(corrupted=4, tail=1)


def test_unexpected_records_from_another_run_or_partition() -> None:
    source = records(0, range(3))
    stranger = records(0, [1], run="other")[0]
    misplaced = records(1, [2])[0]
    target = at_target([source[0], stranger, source[1], misplaced, source[2]])
    report = check_partition(0, source, target, run=RUN)
    assert counts(report) == only(unexpected=2)


def test_source_anomalies_are_reported_apart() -> None:
    source = records(0, [0, 1, 1, 3, 2])
    report = check_partition(0, source, at_target(source), run=RUN)
    assert report.source_anomalies == 2  # seq 1 repeated, seq 2 after seq 3
    assert report.duplicated == 1  # the target copied the repeat faithfully


def test_check_over_partitions_with_one_missing_at_the_target() -> None:
    source = {0: records(0, range(4)), 1: records(1, range(3))}
    target = {0: at_target(source[0])}
    report = check(source, target, acked={0: range(4), 1: range(3)}, run=RUN, replay_starts={})
    assert report.total("tail") == 3 and report.total("lost") == 0
    assert report.source_records == 7 and report.target_records == 4
    assert not report.ok
    assert "tail 3" in report.summary()
