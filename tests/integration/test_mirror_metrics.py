"""A mirror process serves MirrorMaker 2's metrics (as the JMX exporter names them) on its
`metrics.listener`: records mirrored raise its record and byte counts by exactly what was
produced, the lag in records and in seconds comes back to 0, and (mm2 mode) a consumer group's
committed offsets get a checkpoint whose latency is reported; its log says when it first caught
up. Every scrape is parsed by prometheus_client's text parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from tests.integration.mirror_process import start_mirror
from tests.support.metrics import logged_metrics_url, scrape
from tests.support.polling import wait_until

RECORDS = 600


def _mirror(tmp_path: Path, east: BrokerProcess, west: BrokerProcess, mode: str) -> ChildProcess:
    config = tmp_path / "mirror.yaml"
    config.write_text(
        f"source: {{alias: east, bootstrap: '{east.bootstrap}'}}\n"
        f"target: {{alias: west, bootstrap: '{west.bootstrap}'}}\n"
        f"mode: {mode}\n"
        "topics: {include: [orders]}\n"
        "emit.checkpoints.interval.seconds: 1\n"
        "metrics.listener: 127.0.0.1:0\n")
    return start_mirror(config, tmp_path / "mirror.log", tmp_path / "status.json")


@pytest.fixture(params=["mm2", "link"])
def mirror(request: pytest.FixtureRequest, tmp_path: Path, east: BrokerProcess,
           west: BrokerProcess) -> Iterator[tuple[str, str, Path]]:
    proc = _mirror(tmp_path, east, west, request.param)
    try:
        yield request.param, east.bootstrap, tmp_path / "mirror.log"
    finally:
        proc.stop(10)


def _per_partition(values: dict[str, float], name: str) -> dict[str, float]:
    """`name`'s samples of the orders topic at the target, by partition label."""
    out = {}
    for key, value in values.items():
        match = re.fullmatch(rf'{name}\{{partition="(\d+)",target="west",topic="([^"]+)"\}}', key)
        if match and match.group(2).endswith("orders"):
            out[match.group(1)] = value
    return out


def test_mirrored_records_move_the_mirror_counters_and_lag_returns_to_zero(mirror: tuple[str, str, Path]) -> None:
    mode, source, log = mirror
    url = logged_metrics_url(log)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("orders", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0

    def counted() -> float:
        return sum(_per_partition(scrape(url), "kafka_connect_mirror_source_connector_record_count").values())

    wait_until(lambda: counted() == RECORDS, what=f"{RECORDS} records counted by the mirror", timeout_s=60,
               interval_s=0.5)
    values = scrape(url)

    def caught_up() -> bool:
        values.update(scrape(url))
        lag = _per_partition(values, "causeway_mirror_partition_lag_records")
        seconds = _per_partition(values, "causeway_mirror_partition_lag_seconds")
        return len(lag) == 3 and not any(lag.values()) and not any(seconds.values())

    wait_until(caught_up, what="the mirror's lag back to 0 records and 0 seconds", timeout_s=30, interval_s=0.5)
    # Its log says when the copy first caught up (before that, the records left, rate and ETA).
    said = re.compile(r"mirror \S+: caught up with the source, 3 partitions, "
                      r"\d+ records \([\d.]+ K?i?B\) copied in \d+ s")
    wait_until(lambda: said.search(log.read_text()) is not None, what="the mirror's log saying it caught up",
               timeout_s=30, interval_s=0.5)
    assert sum(_per_partition(values, "kafka_connect_mirror_source_connector_byte_count").values()) > RECORDS * 2
    assert len(_per_partition(values, "kafka_connect_mirror_source_connector_replication_latency_ms_max")) == 3
    assert len(_per_partition(values, "kafka_connect_mirror_source_connector_replication_latency_ms_avg")) == 3
    assert values['causeway_mirror_partitions{source="east",state="parked",target="west"}'] == 0
    assert values["process_open_fds"] > 0

    if mode != "mm2":
        return  # link mode commits group offsets unchanged: no checkpoints
    consumer = Consumer({"bootstrap.servers": source, "group.id": "billing", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, 10) for p in range(3)], asynchronous=False)
    finally:
        consumer.close()

    def checkpointed() -> bool:
        return any(key.startswith("kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms_max{")
                   and 'group="billing"' in key for key in scrape(url))

    wait_until(checkpointed, what="a checkpoint latency for the billing group", timeout_s=60, interval_s=0.5)
