"""SIGKILL the broker while an idempotent acks=all producer is writing; restart it on the same
data dir; every acknowledged record must be there exactly once and in order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.broker_process import BrokerProcess

TOTAL = 20_000
KILL_AFTER_ACKS = 5_000


def test_sigkill_during_idempotent_production_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", topics=("crash:1",)).start()
    port = broker.port
    acked: list[int] = []
    errors: list[str] = []
    enough = threading.Event()

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
            return
        acked.append(int(msg.value()))  # type: ignore[attr-defined]
        if len(acked) >= KILL_AFTER_ACKS:
            enough.set()

    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 120_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    })
    try:
        for i in range(TOTAL):
            while True:
                try:
                    producer.produce("crash", value=str(i).encode(), partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            if i == TOTAL // 2:
                # Wait (bounded) until enough is acknowledged, then crash the broker mid-stream.
                deadline = time.monotonic() + 60
                while not enough.is_set() and time.monotonic() < deadline:
                    producer.poll(0.05)
                assert enough.is_set(), "the producer never got going"
                broker.kill()
                broker.start(port=port)
        assert producer.flush(120) == 0
    finally:
        if broker.proc is None:
            broker.start(port=port)
    assert errors == []
    assert len(acked) == TOTAL

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("crash", 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < TOTAL and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=5000, timeout=1.0):
            assert msg.error() is None, msg.error()
            seen.append(int(msg.value()))
    consumer.close()
    broker.stop()
    assert seen == list(range(TOTAL)), "records lost, duplicated or reordered"
