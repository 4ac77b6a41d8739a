"""A broker killed (SIGKILL) while its rolls' fsyncs and flush.messages flushes run in worker
threads (issue 11) loses nothing it acknowledged and restarts on a consistent log."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from broker.storage.checkpoints import read_offsets
from deploy.broker_process import BrokerProcess
from tests.support.consume import read_partition

RECORDS = 600
TIMEOUT_S = 30.0


def produce(bootstrap: str) -> list[int]:
    acked: list[int] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        acked.append(msg.offset())  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2, "batch.size": 1500})
    for i in range(RECORDS):
        producer.produce("t", key=b"%d" % i, value=b"%05d" % i + b"." * 100, partition=0, on_delivery=on_delivery)
        if i % 100 == 99:
            producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return acked


def read_all(bootstrap: str) -> list[bytes]:
    return [msg.value()[:5] for msg in read_partition(bootstrap, "t", timeout_s=TIMEOUT_S)]


@pytest.mark.parametrize("flush_messages", ["1", "9223372036854775807"])
def test_sigkill_during_rolls_loses_nothing_acknowledged(tmp_path: Path, flush_messages: str) -> None:
    broker = BrokerProcess(tmp_path / "data", topics=("t",), overrides=(
        "log.segment.bytes=4096", f"log.flush.interval.messages={flush_messages}",
        "log.flush.offset.checkpoint.interval.ms=100")).start()
    try:
        acked = produce(broker.bootstrap)
        assert acked == list(range(RECORDS))
        broker.kill()  # right after the last rolls: their fsyncs may still be in flight
        segments = sorted((tmp_path / "data" / "t-0").glob("*.log"))
        assert len(segments) > 10
        # The checkpointed recovery point never claims more than the log holds.
        recovery = read_offsets(tmp_path / "data" / "recovery-point-offset-checkpoint").get(("t", 0), 0)
        assert recovery <= RECORDS
        broker.start(port=broker.port)
        assert read_all(broker.bootstrap) == [b"%05d" % i for i in range(RECORDS)]
    finally:
        if broker.proc is not None:
            assert broker.stop() == 0, broker.log_tail()
