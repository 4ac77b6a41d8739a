"""A fetch answer's file slices within the budget of pinned descriptors (handlers/fetch.py).

Real logs and partitions, a small descriptor cache in place of the process's: which partitions
an answer carries data for, what the others say, and what becomes of an OSError.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import FetchRequest, FetchResponse
from broker.protocol.records import Record, build_batch, split_batches
from broker.replication.partition import Partition
from broker.server.handlers import fetch
from broker.storage import Log, LogConfig, ReadResult
from broker.storage.file_slice import FileSlice
from broker.storage.handles import FileHandleCache

NOW = 1_700_000_000_000
TOPIC = "t"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> FileHandleCache:
    from broker.storage import handles, segment

    small = FileHandleCache(8)  # a budget of 4 pinned descriptors
    monkeypatch.setattr(handles, "HANDLES", small)
    monkeypatch.setattr(segment, "HANDLES", small)
    return small


@pytest.fixture
def hosted(tmp_path: Path, cache: FileHandleCache) -> Iterator[dict[int, Partition]]:
    partitions: dict[int, Partition] = {}
    for i in range(10):
        log = Log.open(tmp_path / f"{TOPIC}-{i}", LogConfig(), now_ms=NOW)
        for n in range(2):
            log.append_as_leader(build_batch([Record(None, b"%d-%d" % (i, n))]), leader_epoch=0, now_ms=NOW)
        partitions[i] = Partition(TOPIC, i, log, leader_epoch=0, is_leader=True)
    yield partitions
    for partition in partitions.values():
        partition.log.close()


def _lookup(hosted: dict[int, Partition]) -> fetch.Lookup:
    def lookup(topic: str, index: int) -> Partition:
        if topic != TOPIC or index not in hosted:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return hosted[index]

    return lookup


def _wanted(hosted: dict[int, Partition], offsets: dict[int, int] | None = None) -> list[fetch.Wanted]:
    offsets = offsets if offsets is not None else dict.fromkeys(hosted, 0)
    return [fetch.Wanted(TOPIC, uuid.UUID(int=1), FetchRequest.FetchPartition(
        partition=i, fetch_offset=offset, partition_max_bytes=1 << 20), hosted[i], ErrorCode.NONE)
        for i, offset in offsets.items()]


def _answer(hosted: dict[int, Partition], offsets: dict[int, int] | None = None) -> list[FetchResponse.PartitionData]:
    wanted = _wanted(hosted, offsets)
    reads, _, _ = fetch.read_all(wanted, 50 << 20, _lookup(hosted))
    return fetch.answers(wanted, reads, _lookup(hosted))


def _close(parts: list[FetchResponse.PartitionData]) -> None:
    for part in parts:
        if isinstance(part.records, FileSlice):
            part.records.close()


def _with_data(parts: list[FetchResponse.PartitionData]) -> list[int]:
    return [p.partition_index for p in parts if isinstance(p.records, FileSlice)]


def test_partitions_past_the_budget_are_answered_without_records_as_past_max_bytes(
        hosted: dict[int, Partition], cache: FileHandleCache) -> None:
    parts = _answer(hosted)
    assert len(_with_data(parts)) == cache.slice_budget == 4
    assert cache.sliced == 4
    for part in parts:
        assert part.error_code == ErrorCode.NONE
        assert part.high_watermark == 2 and part.log_start_offset == 0
        if not isinstance(part.records, FileSlice):
            assert part.records == b""
    _close(parts)
    assert cache.sliced == 0


def test_an_answer_carries_data_even_when_other_fetches_hold_the_whole_budget(
        hosted: dict[int, Partition], cache: FileHandleCache, tmp_path: Path) -> None:
    others = [tmp_path / f"held-{i}" for i in range(cache.slice_budget)]
    for path in others:
        path.write_bytes(b"x")
        assert cache.pin_slice(path, functools.partial(os.open, path, os.O_RDONLY)) is not None
    parts = _answer(hosted)
    assert len(_with_data(parts)) == 1  # one over the budget: no livelock
    assert cache.sliced == cache.slice_budget + 1
    _close(parts)
    for path in others:
        cache.unpin_slice(path)
    assert cache.sliced == 0


def test_every_partition_with_data_gets_its_turn_for_a_client_that_never_rotates(
        hosted: dict[int, Partition], monkeypatch: pytest.MonkeyPatch) -> None:
    # Every partition always has data (the client asks from offset 0 each time, in the same
    # order): had the pins followed request order, partitions 4 to 9 would never be answered.
    monkeypatch.setattr(fetch, "rotation", random.Random(7).randrange)
    served: dict[int, int] = dict.fromkeys(hosted, 0)
    for _ in range(40):
        parts = _answer(hosted)
        for index in _with_data(parts):
            served[index] += 1
        _close(parts)
    assert all(count > 0 for count in served.values()), served


def test_request_order_would_starve_the_tail(hosted: dict[int, Partition], monkeypatch: pytest.MonkeyPatch) -> None:
    # The counterpart of the test above: it checks something.
    monkeypatch.setattr(fetch, "rotation", lambda n: 0)
    parts = _answer(hosted)
    assert _with_data(parts) == [0, 1, 2, 3]
    _close(parts)


def test_a_client_fetching_again_reads_everything(hosted: dict[int, Partition], cache: FileHandleCache) -> None:
    positions = dict.fromkeys(hosted, 0)
    for _ in range(20):
        if all(position == 2 for position in positions.values()):
            break
        parts = _answer(hosted, positions)
        for part in parts:
            if isinstance(part.records, FileSlice):
                data = part.records.read(0, len(part.records))
                positions[part.partition_index] = split_batches(data)[-1][1].last_offset + 1
        _close(parts)
    assert all(position == 2 for position in positions.values()), positions
    assert cache.sliced == 0


def test_a_segment_deleted_between_read_and_slice_is_read_again(
        hosted: dict[int, Partition], cache: FileHandleCache) -> None:
    log = hosted[0].log
    log.roll()
    log.append_as_leader(build_batch([Record(None, b"later")]), leader_epoch=0, now_ms=NOW)
    hosted[0].log.high_watermark = log.log_end_offset
    lookup = _lookup(hosted)
    # Offset 0: the segment goes, and with it the offset (retention moved the log start).
    wanted = _wanted(hosted, {0: 0})
    reads, _, _ = fetch.read_all(wanted, 50 << 20, lookup)
    old = reads[0]
    assert old is not None and old.segment is log.segments[0]
    log.delete_records_before(2)
    [part] = fetch.answers(wanted, reads, lookup)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and part.records == b""
    # Offset 2 with a read that still names the deleted segment: the second read finds the data.
    wanted = _wanted(hosted, {0: 2})
    wanted[0].read_max_bytes, wanted[0].min_one_batch = 1 << 20, True  # as the first read left them
    [part] = fetch.answers(wanted, [ReadResult(old.segment, old.position, old.length)], lookup)
    assert part.error_code == ErrorCode.NONE and isinstance(part.records, FileSlice)
    [(_, header)] = split_batches(part.records.read(0, len(part.records)))
    assert header.base_offset == 2
    _close([part])
    assert cache.sliced == 0


def test_a_partition_deleted_meanwhile_is_unknown(hosted: dict[int, Partition], cache: FileHandleCache) -> None:
    wanted = _wanted(hosted, {3: 0})
    reads, _, _ = fetch.read_all(wanted, 50 << 20, _lookup(hosted))
    gone = hosted.pop(3)
    cache.close(gone.log.segments[0])
    gone.log.segments[0].path.unlink()
    [part] = fetch.answers(wanted, reads, _lookup(hosted))
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and part.records == b""
    hosted[3] = gone


def test_an_io_error_is_a_storage_error_of_that_partition_only(
        hosted: dict[int, Partition], cache: FileHandleCache, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(fetch, "rotation", lambda n: 0)
    wanted = _wanted(hosted, {0: 0, 1: 0, 2: 0})
    reads, _, _ = fetch.read_all(wanted, 50 << 20, _lookup(hosted))
    bad = hosted[1].log.segments[0]
    cache.shed_idle()

    def broken() -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(bad, "_open_file", broken)
    with caplog.at_level(logging.ERROR):
        parts = fetch.answers(wanted, reads, _lookup(hosted))
    assert [p.error_code for p in parts] == [ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE]
    assert _with_data(parts) == [0, 2]
    assert "t-1" in caplog.text and "KAFKA_STORAGE_ERROR" in caplog.text
    _close(parts)
    assert cache.sliced == 0


def test_out_of_descriptors_answers_instead_of_closing_the_connection(
        hosted: dict[int, Partition], cache: FileHandleCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "rotation", lambda n: 0)
    wanted = _wanted(hosted, {0: 0, 1: 0, 2: 0})
    reads, _, _ = fetch.read_all(wanted, 50 << 20, _lookup(hosted))
    cache.shed_idle()

    def emfile() -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    for partition in hosted.values():
        monkeypatch.setattr(partition.log.segments[0], "_open_file", emfile)
    parts = fetch.answers(wanted, reads, _lookup(hosted))
    # The first fails and says so; the rest are not tried (they would fail alike) and are
    # answered without records, to be fetched again.
    assert [p.error_code for p in parts] == [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE, ErrorCode.NONE]
    assert _with_data(parts) == []
    assert cache.sliced == 0


def test_a_read_that_fails_is_a_storage_error_not_an_exception(
        hosted: dict[int, Partition], cache: FileHandleCache, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> ReadResult:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(hosted[4], "read", broken)
    wanted = _wanted(hosted, {4: 0, 5: 0})
    reads, _, any_error = fetch.read_all(wanted, 50 << 20, _lookup(hosted))
    assert any_error and reads[0] is None
    parts = fetch.answers(wanted, reads, _lookup(hosted))
    assert [p.error_code for p in parts] == [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE]
    _close(parts)


def test_pins_are_given_back_when_building_the_answer_fails(
        hosted: dict[int, Partition], cache: FileHandleCache, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = itertools.count()
    real = fetch.answer

    def failing(w: fetch.Wanted, records: FileSlice | None) -> FetchResponse.PartitionData:
        if next(calls) == 5:
            raise RuntimeError("boom")
        return real(w, records)

    monkeypatch.setattr(fetch, "answer", failing)
    with pytest.raises(RuntimeError):
        _answer(hosted)
    assert cache.sliced == 0
