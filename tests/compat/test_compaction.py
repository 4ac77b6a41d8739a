"""Log compaction seen through a real client: latest value per key, offsets kept, across restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from tests.support.consume import read_partition

pytestmark = pytest.mark.compat
KEYS = 10
ROUNDS = 30


@pytest.fixture
def cleaner_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", overrides=("log.cleaner.backoff.ms=100",)).start()
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log_tail()


def read_all(bootstrap: str) -> list[tuple[int, bytes, bytes | None]]:
    return [(msg.offset(), msg.key(), msg.value()) for msg in read_partition(bootstrap, "keyed")]


def test_a_keyed_topic_is_compacted_and_stays_so_after_restart(cleaner_broker: BrokerProcess) -> None:
    bootstrap = cleaner_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("keyed", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "100"})])["keyed"].result(30)
    # Small batches: a batch larger than segment.bytes is refused (RECORD_LIST_TOO_LARGE), as in Kafka.
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 1000,
                         "error_cb": errors.append})

    def produce(key: bytes, value: bytes | None) -> None:
        producer.produce("keyed", key=key, value=value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)

    latest: dict[bytes, bytes | None] = {}
    for round_ in range(ROUNDS):
        for k in range(KEYS):
            key, value = b"k%d" % k, b"v%d-%d" % (k, round_)
            produce(key, value)
            latest[key] = value
    for k in range(KEYS // 2):
        produce(b"k%d" % k, None)  # tombstones
        latest[b"k%d" % k] = None
    # A tail of filler keys rolls the segments that hold the tombstones out of the active one.
    for i in range(150):
        produce(b"filler%d" % i, b"x" * 50)
    assert producer.flush(30) == 0
    assert errors == []
    produced = ROUNDS * KEYS + KEYS // 2 + 150

    records: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = read_all(bootstrap)
        keys = [k for _, k, _ in records if not k.startswith(b"filler")]
        if len(keys) == len(set(keys)) and not any(k in (b"k0", b"k1") for k in keys):
            break  # every key once, tombstoned keys gone: the cleaner has been through
    assert len(records) < produced
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == produced - 1  # offsets kept
    survivors = {k: v for _, k, v in records if not k.startswith(b"filler")}
    assert survivors == {k: v for k, v in latest.items() if v is not None}

    cleaner_broker.restart()
    assert read_all(cleaner_broker.bootstrap) == records


@pytest.mark.parametrize("crash_at", ["cleaner-before-swap", "cleaner-mid-swap"])
def test_a_crash_during_cleaning_loses_nothing(tmp_path: Path, crash_at: str) -> None:
    """The broker kills itself (SIGKILL) at an exact point of a cleaning pass; after a restart
    every key still reads its latest value, and a later pass finishes the job."""
    broker = BrokerProcess(tmp_path / "broker", overrides=("log.cleaner.backoff.ms=100",),
                           env={"CAUSEWAY_CRASH_AT": crash_at}).start()
    port = broker.port
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("keyed", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096"})])["keyed"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 1000,
                         "acks": "all"})
    latest: dict[bytes, bytes] = {}
    for round_ in range(ROUNDS):
        for k in range(KEYS):
            latest[b"k%d" % k] = b"v%d-%d" % (k, round_)
            producer.produce("keyed", key=b"k%d" % k, value=latest[b"k%d" % k], partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert broker.proc is not None
    assert broker.proc.wait(timeout=60) == -9, "the broker did not reach the crash point"
    broker.proc = None

    broker.env = {}
    broker.start(port=port)
    records = read_all(broker.bootstrap)
    assert {k: v for _, k, v in records} == latest  # the last value of each key survived
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == ROUNDS * KEYS - 1
    deadline = time.monotonic() + 60
    while len(records) >= ROUNDS * KEYS and time.monotonic() < deadline:
        records = read_all(broker.bootstrap)  # a new pass, now uninterrupted, cleans the log
    assert len(records) < ROUNDS * KEYS
    assert {k: v for _, k, v in records} == latest
    assert broker.stop() == 0
