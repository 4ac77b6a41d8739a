"""Storage integrity against real broker processes (issue 10, items 1, 2, 3 and 7):

- a second broker on a live broker's data dir is refused (the `.lock`), nothing is lost;
- recovery after mid-log corruption quarantines what it cuts, logs it and counts it;
- thousands of partitions under a low open-file limit: the broker starts, descriptors stay bounded;
- damaged checkpoint files mean recovery from scratch with a warning, never a crash loop.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.protocol.records import read_batch_header, split_batches
from deploy.broker_process import BrokerProcess, broker_command
from deploy.child_process import fd_count

REPO = Path(__file__).resolve().parents[2]


def produce(bootstrap: str, topic: str, values: list[bytes], *, partitions: int = 1,
            **extra: object) -> list[tuple[int, int, bytes]]:
    """Produce with acks=all; (partition, offset, value) of every acknowledged record."""
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60_000, **extra})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return acked


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, *,
                chunk: int | None = None) -> list[tuple[int, int, bytes]]:
    """Every record of the partitions from the beginning: (partition, offset, value). With
    `chunk`, that many partitions are assigned at a time, each holding expected/len records."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    seen: list[tuple[int, int, bytes]] = []
    step = chunk or len(partitions)
    for first in range(0, len(partitions), step):
        group = partitions[first:first + step]
        want = len(seen) + expected * len(group) // len(partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in group])
        deadline = time.monotonic() + 60
        while len(seen) < want and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=min(10_000, want - len(seen)), timeout=0.5):
                assert msg.error() is None, msg.error()
                seen.append((msg.partition(), msg.offset(), msg.value()))
        consumer.unassign()
    consumer.close()
    return seen


def end_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1])
    finally:
        consumer.close()


def log_text(broker: BrokerProcess) -> str:
    return broker.log_path.read_text()


# -- item 1: one broker per data dir ------------------------------------------------------


def test_a_second_broker_on_a_live_data_dir_is_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    first = BrokerProcess(tmp_path / "data", topics=("orders:2",)).start()
    try:
        acked = produce(first.bootstrap, "orders", [b"r%05d" % i for i in range(2000)], partitions=2)
        assert len(acked) == 2000
        data = tmp_path / "data"
        before = {p.relative_to(data): p.stat().st_size for p in data.rglob("*") if p.is_file()}
        assert first.proc is not None
        holder = first.proc.pid

        second = subprocess.run(
            broker_command(data, listen="127.0.0.1:0"), cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert second.returncode != 0
        assert second.stdout == "", "the second broker must never say it is ready"
        assert f"log dir {data} is in use by pid {holder}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        # Nothing written by the refused broker: same files, same sizes, the lock still names the holder.
        after = {p.relative_to(data): p.stat().st_size for p in data.rglob("*") if p.is_file()}
        assert after == before
        assert (data / ".lock").read_text().strip() == str(holder)

        # The first broker keeps serving.
        acked += produce(first.bootstrap, "orders", [b"s%05d" % i for i in range(500)], partitions=2)
        assert first.proc is not None and first.proc.poll() is None
    finally:
        assert first.stop() == 0
    first.start()
    try:
        seen = consume_all(first.bootstrap, "orders", [0, 1], len(acked))
    finally:
        first.stop()
    assert sorted(seen) == sorted(acked), "acknowledged records lost or changed"


def test_a_stale_lock_file_of_a_dead_broker_does_not_block_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", topics=("orders:1",)).start()
    acked = produce(broker.bootstrap, "orders", [b"x%d" % i for i in range(100)])
    broker.kill()  # the .lock file stays; the kernel dropped the flock with the process
    assert (tmp_path / "data" / ".lock").exists()
    broker.start()
    try:
        assert len(consume_all(broker.bootstrap, "orders", [0], len(acked))) == len(acked)
    finally:
        broker.stop()


# -- item 2: recovery quarantines what it cuts ----------------------------------------------


def _batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, records) of each batch."""
    return [(pos, h.size, h.base_offset, h.records_count) for pos, h in split_batches(data)]


def scrape_metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback test server
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("causeway_log_recovery") and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_mid_log_corruption_is_quarantined_logged_and_counted_never_deleted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, topics=("events:1",), overrides=(
        "log.segment.bytes=16384",
        # No recovery checkpoint before the crash: every segment is checked by CRC at restart.
        "log.flush.offset.checkpoint.interval.ms=3600000",
        "causeway.metrics.listener=127.0.0.1:0",
    )).start()
    acked = produce(broker.bootstrap, "events", [b"event-%06d-" % i + b"x" * 80 for i in range(4000)],
                    **{"batch.num.messages": 40})
    assert len(acked) == 4000
    broker.kill()

    part = data / "events-0"
    segments = sorted(part.glob("*.log"))
    assert len(segments) >= 6, "the test needs several segments"
    damaged = segments[len(segments) // 3]
    raw = bytearray(damaged.read_bytes())
    batches = _batches(bytes(raw))
    pos, size, cut_offset, _ = batches[len(batches) // 2]
    flip = pos + 61 + (size - 61) // 2  # inside the records: the header stays readable, the CRC fails
    raw[flip:flip + 8] = bytes(b ^ 0xFF for b in raw[flip:flip + 8])
    damaged.write_bytes(raw)
    later = segments[segments.index(damaged) + 1:]
    later_bytes = {p.name: p.read_bytes() for p in later}
    expected_records = sum(r for p, _, _, r in batches if p >= pos)
    expected_records += sum(read_batch_header(b, q).records_count for b in later_bytes.values()
                            for q, _ in split_batches(b))
    expected_bytes = len(raw) - pos + sum(len(b) for b in later_bytes.values())
    total_before = sum(p.stat().st_size for p in part.glob("*.log"))

    broker.start()
    try:
        log = log_text(broker)
        assert f"mid-log corruption: events-0: recovery cut the log at offset {cut_offset}" in log, log
        assert f"{expected_records - batches[len(batches) // 2][3]} records in" in log
        assert "ERROR" in log.split("mid-log corruption")[0].splitlines()[-1]
        # The broker serves what is before the cut.
        assert end_offset(broker.bootstrap, "events", 0) == cut_offset
        seen = consume_all(broker.bootstrap, "events", [0], cut_offset)
        assert [v for _, _, v in seen] == [v for _, _, v in sorted(acked)][:cut_offset]

        # The quarantine holds the cut bytes, identical to what was on disk.
        quarantined = list((tmp_path / "data" / "events-0.quarantine").iterdir())
        assert len(quarantined) == 1
        where = quarantined[0]
        assert str(where) in log
        assert (where / f"{cut_offset:020d}.log").read_bytes() == bytes(raw[pos:])
        for name, content in later_bytes.items():
            assert (where / name).read_bytes() == content
            assert not (part / name).exists()
        assert "mid-log corruption" in (where / "quarantine.txt").read_text()
        total_after = sum(p.stat().st_size for p in part.glob("*.log"))
        total_after += sum(p.stat().st_size for p in where.glob("*.log"))
        assert total_after >= total_before, "recovery deleted data"

        # ... and the metrics count it.
        urls = re.findall(r"metrics served on (http://\S+)", log)
        assert len(urls) == 2, log
        metrics = scrape_metrics(urls[-1])  # this start's endpoint
        labels = '{partition="0",topic="events"}'
        assert metrics[f"causeway_log_recovery_quarantined_records_total{labels}"] == expected_records
        assert metrics[f"causeway_log_recovery_quarantined_bytes_total{labels}"] == expected_bytes
        assert metrics[f"causeway_log_recovery_quarantined_segments_total{labels}"] == 1 + len(later)
        assert metrics['causeway_log_recovery_cuts_total{kind="mid_log",partition="0",topic="events"}'] == 1
    finally:
        broker.stop()


# -- item 3: file descriptors --------------------------------------------------------------


@pytest.mark.slow
def test_thousands_of_partitions_start_under_a_low_open_file_limit(tmp_path: Path) -> None:
    partitions = 1000
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("wide", partitions, 1)], request_timeout=60).values():
            future.result(timeout=120)
        del admin
    finally:
        broker.stop()
    # Before the fix a broker held one descriptor per segment: 1,050 partitions (the topic and
    # __consumer_offsets) need more than 256, and every start died on EMFILE.
    broker.nofile = 256
    broker.start()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        # Write to every partition (each segment file is opened again), then read a sample back
        # in slices of partitions: a fetch holds a descriptor per partition it answers until it
        # is sent (the read path's own bound), which is not what this test measures.
        acked = produce(broker.bootstrap, "wide", [b"q%d" % i for i in range(partitions)], partitions=partitions)
        sample = list(range(0, partitions, 10))
        seen = consume_all(broker.bootstrap, "wide", sample, len(sample), chunk=50)
        assert sorted(seen) == sorted(r for r in acked if r[0] in sample)
        assert broker.proc.poll() is None
        fds = fd_count(pid)
        assert fds <= 256 // 2 + 64, f"{fds} descriptors open for {partitions} partitions"
        assert "Traceback" not in log_text(broker)
    finally:
        assert broker.stop() == 0


# -- item 7: damaged checkpoints -----------------------------------------------------------


def test_damaged_checkpoints_mean_recovery_from_scratch_not_a_crash_loop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, topics=("ledger:2",)).start()
    acked = produce(broker.bootstrap, "ledger", [b"l%04d" % i for i in range(1000)], partitions=2)
    assert broker.stop() == 0
    damages = {
        data / "recovery-point-offset-checkpoint": b"\x00\xff\xfe binary \x81\x00",
        data / "log-start-offset-checkpoint": b"0\n1\nledger 0 not-a-number\n",
        data / "replication-offset-checkpoint": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
        data / "ledger-0" / "leader-epoch-checkpoint": bytes(range(256)) * 4,
    }
    for path, garbage in damages.items():
        assert path.exists(), path
        path.write_bytes(garbage)
        mark = broker.log_path.stat().st_size
        broker.start()
        try:
            log = broker.log_path.read_text()[mark:]
            assert "ignoring damaged" in log and str(path) in log, log
            assert "Traceback" not in log
            seen = consume_all(broker.bootstrap, "ledger", [0, 1], len(acked))
            assert sorted(seen) == sorted(acked), f"records lost after damaging {path.name}"
        finally:
            assert broker.stop() == 0
        # The clean stop wrote a good file again.
        assert path.read_bytes() != garbage
    epochs = (data / "ledger-0" / "leader-epoch-checkpoint").read_text().splitlines()
    assert epochs[:2] == ["0", "1"] and epochs[2].split()[1] == "0", epochs
