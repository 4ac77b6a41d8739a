"""Recovery checks the offsets batches claim, against real broker processes (issue 19, items 3
and 8): produce with librdkafka, SIGKILL, damage bytes on disk, restart, read back.

- A batch's base offset lies outside its CRC. One raised or lowered in an older segment is
  mid-log corruption: the log is cut at that batch, what follows is quarantined and counted,
  offsets never go back and no offset is served with another record's value. Segments below
  the recovery point (not scanned at start, as in Kafka) are caught by the checks that cost a
  header or two per segment: their first batch, their last batch, the next segment's base.
- A segment file missing from the middle of a log is reported, with the offsets and a count; the
  gaps compaction leaves are neither cut nor reported.
- A damaged link-copy-checkpoint is named in a warning and rebuilt; the broker starts.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.records import split_batches
from broker.storage.checkpoints import read_offsets
from deploy.broker_process import BrokerProcess
from tests.integration.test_hardening_storage import end_offset, log_text, produce, scrape_metrics
from tests.support.consume import read_partition
from tests.support.polling import wait_until

RECORDS = 4000
VALUES = [b"event-%06d-" % i + b"x" * 80 for i in range(RECORDS)]
LABELS = '{partition="0",topic="events"}'


def _start(data: Path, *, checkpoint_ms: int) -> BrokerProcess:
    return BrokerProcess(data, topics=("events:1",), overrides=(
        "log.segment.bytes=16384",
        f"log.flush.offset.checkpoint.interval.ms={checkpoint_ms}",
        "causeway.metrics.listener=127.0.0.1:0",
    )).start()


def _fill(broker: BrokerProcess) -> dict[int, bytes]:
    """4,000 acknowledged records in about 100 batches and 25 segments: offset -> value."""
    acked = produce(broker.bootstrap, "events", VALUES, **{"batch.num.messages": 40})
    assert len(acked) == RECORDS
    return {offset: value for _, offset, value in acked}


@dataclass(frozen=True)
class Damage:
    cut: int  # the true base offset of the damaged batch: where the log must now end
    claimed: int  # the base offset it claims
    later: list[Path]  # the segments after the damaged one
    records: int  # records from the damaged batch to the end of the log


def _set_base_offset(segments: list[Path], damaged: Path, index: int, shift: int) -> Damage:
    """Move the base offset of the segment's batch number `index` by `shift` (its CRC still
    matches: the base offset lies outside it)."""
    raw = bytearray(damaged.read_bytes())
    pos, header = split_batches(bytes(raw))[index]
    struct.pack_into(">q", raw, pos, header.base_offset + shift)
    damaged.write_bytes(raw)
    later = segments[segments.index(damaged) + 1:]
    records = sum(h.records_count for p, h in split_batches(bytes(raw)) if p >= pos)
    records += sum(h.records_count for path in later for _, h in split_batches(path.read_bytes()))
    return Damage(header.base_offset, header.base_offset + shift, later, records)


def _metrics(broker: BrokerProcess) -> dict[str, float]:
    urls = re.findall(r"metrics served on (http://\S+)", log_text(broker))
    return scrape_metrics(urls[-1])  # this start's endpoint


def _assert_served_as_acknowledged(broker: BrokerProcess, acked: dict[int, bytes], *,
                                   missing: range = range(0)) -> None:
    """Every offset the broker serves holds the value acknowledged for it, offsets only go up, and
    only `missing` offsets are absent."""
    messages = read_partition(broker.bootstrap, "events")
    offsets = [m.offset() for m in messages]
    assert offsets == sorted(set(offsets)), "offsets went back or repeated"
    wrong = [(m.offset(), m.value()) for m in messages if acked.get(m.offset()) != m.value()]
    assert wrong == [], f"{len(wrong)} offsets served with another record's value, e.g. {wrong[:2]}"
    assert set(offsets) == set(acked) - set(missing)


def _assert_cut_as_mid_log_corruption(broker: BrokerProcess, acked: dict[int, bytes], damage: Damage,
                                      reason: str) -> None:
    """The restarted broker cut the log at the damaged batch, as mid-log corruption (an error),
    quarantined and counted the rest, and serves the records before it as they were."""
    log = log_text(broker)
    assert f"mid-log corruption: events-0: recovery cut the log at offset {damage.cut}" in log, log
    assert "ERROR" in log.split("mid-log corruption")[0].splitlines()[-1]
    assert "torn tail" not in log
    assert f"claims offsets {damage.claimed}..{damage.claimed + 39}{reason}" in log
    assert end_offset(broker.bootstrap, "events", 0) == damage.cut
    _assert_served_as_acknowledged(broker, acked, missing=range(damage.cut, RECORDS))
    quarantine = list((broker.data_dir / "events-0.quarantine").iterdir())
    assert len(quarantine) == 1
    assert all((quarantine[0] / p.name).exists() and not p.exists() for p in damage.later)
    metrics = _metrics(broker)
    assert metrics[f"causeway_log_recovery_quarantined_records_total{LABELS}"] == damage.records
    assert metrics[f"causeway_log_recovery_quarantined_segments_total{LABELS}"] == 1 + len(damage.later)
    assert metrics['causeway_log_recovery_cuts_total{kind="mid_log",partition="0",topic="events"}'] == 1


@pytest.mark.parametrize("damage", ["raised", "lowered"])
def test_a_corrupted_base_offset_in_an_older_segment_is_quarantined_and_offsets_never_go_back(
        tmp_path: Path, damage: str) -> None:
    data = tmp_path / "data"
    # No recovery checkpoint before the crash: every segment is scanned at restart (the report's case).
    broker = _start(data, checkpoint_ms=3_600_000)
    acked = _fill(broker)
    broker.kill()

    segments = sorted((data / "events-0").glob("*.log"))
    assert len(segments) >= 6, "the test needs several segments"
    damaged = segments[len(segments) // 3]
    # Raised as in the report (4150 to 9000: past the end of the next segments), or lowered into
    # the batch before it.
    done = _set_base_offset(segments, damaged, len(split_batches(damaged.read_bytes())) // 2,
                            4850 if damage == "raised" else -3)

    broker.start()
    try:
        _assert_cut_as_mid_log_corruption(broker, acked, done, f", but the log continues at offset {done.cut}"
                                          if damage == "raised" else ": the log continues")
        # The log goes on from the cut: new records take the offsets after it, none goes back.
        more = produce(broker.bootstrap, "events", [b"after-%d" % i for i in range(200)])
        assert sorted(o for _, o, _ in more) == list(range(done.cut, done.cut + 200))
        kept = {o: v for o, v in acked.items() if o < done.cut} | {o: v for _, o, v in more}
        _assert_served_as_acknowledged(broker, kept)
    finally:
        broker.stop()


@pytest.mark.parametrize("which", ["first", "last"])
def test_a_raised_base_offset_below_the_recovery_point_is_caught_without_a_scan(tmp_path: Path, which: str) -> None:
    data = tmp_path / "data"
    broker = _start(data, checkpoint_ms=100)
    acked = _fill(broker)
    segments = sorted((data / "events-0").glob("*.log"))
    damaged = segments[len(segments) // 3]
    after = segments[segments.index(damaged) + 2]
    # The damaged segment and the next one lie below the recovery point: not scanned at restart.
    wait_until(lambda: read_offsets(data / "recovery-point-offset-checkpoint").get(("events", 0), 0)
               >= int(after.stem), what="a recovery point past the damaged segment")
    broker.kill()

    index = 0 if which == "first" else len(split_batches(damaged.read_bytes())) - 1
    done = _set_base_offset(segments, damaged, index, 4850)

    broker.start()
    try:
        _assert_cut_as_mid_log_corruption(broker, acked, done, f", but the log continues at offset {done.cut}")
    finally:
        broker.stop()


@pytest.mark.parametrize("removed", [(".log",), (".log", ".index", ".timeindex")])
def test_a_segment_missing_from_the_middle_is_reported_with_its_offsets(tmp_path: Path,
                                                                        removed: tuple[str, ...]) -> None:
    data = tmp_path / "data"
    broker = _start(data, checkpoint_ms=3_600_000)
    acked = _fill(broker)
    broker.kill()
    segments = sorted((data / "events-0").glob("*.log"))
    gone = segments[len(segments) // 2]
    missing = range(int(gone.stem), int(segments[len(segments) // 2 + 1].stem))
    for suffix in removed:
        gone.with_suffix(suffix).unlink()

    broker.start()
    try:
        log = log_text(broker)
        line = next((x for x in log.splitlines() if "missing from" in x), "")
        assert "ERROR" in line and f"{missing[0]}..{missing[-1]}" in line, log
        if removed == (".log",):
            assert f"segment file {gone.name} is missing from the middle of the log" in line
            assert gone.with_suffix(".index").exists(), "the indexes that tell which file is missing stay"
        else:  # known once the topic's config says it is neither compacted nor a copy
            assert f"{len(missing)} offsets in 1 range(s) ({missing[0]}..{missing[-1]}) are missing" in line
        assert _metrics(broker)[f"causeway_log_recovery_missing_offsets_total{LABELS}"] == len(missing)
        assert end_offset(broker.bootstrap, "events", 0) == RECORDS  # nothing after the gap is cut
        _assert_served_as_acknowledged(broker, acked, missing=missing)
    finally:
        broker.stop()


def test_the_gaps_of_a_compacted_log_are_neither_cut_nor_reported_after_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, overrides=("log.cleaner.backoff.ms=100",
                                            "log.flush.offset.checkpoint.interval.ms=3600000")).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("events", 1, 1, config={"cleanup.policy": "compact",
                                                               "segment.bytes": "4096"})])["events"].result(30)
        # 20 keys written 50 times over, in small batches: compaction leaves gaps between and
        # inside segments.
        keyed = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 1000})
        for i in range(1000):
            keyed.produce("events", key=b"k%d" % (i % 20), value=b"v%d" % i, partition=0)
            keyed.poll(0)
        assert keyed.flush(30) == 0
        del keyed

        def compacted() -> bool:
            return len(read_partition(broker.bootstrap, "events")) < 1000  # offsets now have gaps
        wait_until(compacted, what="a compaction pass")
        before = [(m.offset(), m.key(), m.value()) for m in read_partition(broker.bootstrap, "events")]
        broker.kill()  # no recovery checkpoint: every segment, with its gaps, is scanned at restart

        mark = broker.log_path.stat().st_size
        broker.start()
        log = broker.log_path.read_text()[mark:]
        assert not any(word in log for word in ("corruption", "torn tail", "missing from", "Traceback")), log
        assert [(m.offset(), m.key(), m.value()) for m in read_partition(broker.bootstrap, "events")] == before
    finally:
        broker.stop()


@pytest.mark.parametrize("garbage", [bytes(range(256)) * 3, b"marker 12x\n"])
def test_a_damaged_link_copy_checkpoint_is_named_and_rebuilt_not_a_crash_loop(tmp_path: Path,
                                                                             garbage: bytes) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, topics=("events:1",)).start()
    acked = _fill(broker)
    assert broker.stop() == 0
    checkpoint = data / "events-0" / "link-copy-checkpoint"
    checkpoint.write_bytes(garbage)

    mark = broker.log_path.stat().st_size
    broker.start()
    try:
        log = broker.log_path.read_text()[mark:]
        assert f"ignoring damaged link-copy checkpoint {checkpoint}" in log, log
        assert "Traceback" not in log
        _assert_served_as_acknowledged(broker, acked)
        more = produce(broker.bootstrap, "events", [b"after-%d" % i for i in range(10)])
        messages = read_partition(broker.bootstrap, "events")
        assert [m.value() for m in messages] == VALUES + [v for _, _, v in sorted(more)]
    finally:
        assert broker.stop() == 0
    assert checkpoint.read_bytes() != garbage  # rebuilt: the next start has nothing to warn about
    mark = broker.log_path.stat().st_size
    broker.start()
    try:
        assert "ignoring damaged" not in broker.log_path.read_text()[mark:]
    finally:
        assert broker.stop() == 0
