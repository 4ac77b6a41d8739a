"""`spark.read.format("causeway")` against a real broker, judged by librdkafka (confluent-kafka):
every column of every record, the offset options, minPartitions, and bad input."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from deploy.broker_process import BrokerProcess
from deploy.cli import main
from pipeline.fetching import read_range
from pipeline.options import PipelineError, parse_read_options
from pipeline.planning import OffsetRange
from tests.pipeline.brokers import delete_before
from tests.pipeline.clients import Rec, consume_all, create_topic, produce, spark_records
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat


def read(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    return spark.read.format("causeway").option("kafka.bootstrap.servers", bootstrap).options(**options).load()


def mixed_records(n: int, partitions: int, base_ts: int) -> list[dict[str, object]]:
    """Null keys, empty and null values, headers with null values and repeated keys, no headers."""
    out: list[dict[str, object]] = []
    for i in range(n):
        record: dict[str, object] = {"partition": i % partitions, "timestamp": base_ts + i,
                                     "key": None if i % 5 == 0 else b"key-%d" % i,
                                     "value": None if i % 17 == 0 else b"" if i % 19 == 0 else b"value-%d" % i * 3}
        if i % 3 == 1:
            record["headers"] = [("trace", b"t%d" % i), ("empty", None), ("trace", b"again")]
        elif i % 3 == 2:
            record["headers"] = [("\u00e9t\u00e9", b"\x00\xff")]
        out.append(record)
    return out


def test_batch_read_matches_librdkafka_every_column(spark: SparkSession, bootstrap: str) -> None:
    topic = "read-mixed"
    create_topic(bootstrap, topic, 3)
    base = 1_700_000_000_000
    records = mixed_records(600, 3, base)
    produce(bootstrap, topic, records[:300], compression="gzip")
    produce(bootstrap, topic, records[300:], compression="zstd", batch_size=2000)
    expected = consume_all(bootstrap, topic, [0, 1, 2])
    assert len(expected) == 600
    got = spark_records(read(spark, bootstrap, subscribe=topic, includeHeaders="true"))
    assert got == expected
    # Without includeHeaders, Spark's schema has no headers column (as Spark's Kafka source).
    plain = read(spark, bootstrap, subscribe=topic)
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert spark_records(plain) == [Rec(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms,
                                        r.timestamp_type) for r in expected]


def test_a_compacted_topics_gaps_read_as_librdkafka_reads_them(spark: SparkSession, bootstrap: str) -> None:
    topic = "read-compacted"
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                       "min.cleanable.dirty.ratio": "0.01"})
    # Eight keys written over and over between keys written once: compaction leaves gaps all along.
    produce(bootstrap, topic, [{"key": b"k%d" % (i % 8) if i % 2 else b"once%d" % i, "value": b"v%d" % i * 8,
                                "partition": 0} for i in range(240)], batch_size=800)
    produce(bootstrap, topic, [{"key": b"tail%d" % i, "value": b"x" * 60, "partition": 0} for i in range(120)],
            batch_size=800)
    snapshot: list[Rec] = []

    def compacted() -> bool:
        snapshot[:] = consume_all(bootstrap, topic, [0])
        return len(snapshot) < 360 and snapshot[-1].offset == 359

    wait_until(compacted, what="the cleaner to compact the topic", timeout_s=60, interval_s=0.5)
    offsets = [r.offset for r in snapshot]
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:], strict=False)), "no gap to read across"
    got = spark_records(read(spark, bootstrap, subscribe=topic, includeHeaders="true", minPartitions="3"))
    # The cleaner may have gone on between the two reads; both saw a compacted log with the same tail.
    if got != snapshot:
        snapshot[:] = consume_all(bootstrap, topic, [0])
    assert got == snapshot


def test_offset_options_as_spark_takes_them(spark: SparkSession, bootstrap: str) -> None:
    topic = "read-offsets"
    create_topic(bootstrap, topic, 2)
    base = 1_600_000_000_000
    produce(bootstrap, topic, [{"partition": i % 2, "value": b"v%d" % i, "timestamp": base + i * 1000}
                               for i in range(40)])
    every = consume_all(bootstrap, topic, [0, 1])

    def offsets(df: DataFrame) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for r in spark_records(df)]

    starting = json.dumps({topic: {"0": 5, "1": -2}})
    ending = json.dumps({topic: {"0": -1, "1": 7}})
    assert offsets(read(spark, bootstrap, subscribe=topic, startingOffsets=starting, endingOffsets=ending)) == (
        [(0, o) for o in range(5, 20)] + [(1, o) for o in range(0, 7)])
    # startingTimestamp: the first offset at or after it in each partition (record i at base + i s).
    got = offsets(read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 30_000)))
    assert got == [(0, o) for o in range(15, 20)] + [(1, o) for o in range(15, 20)]
    # endingTimestamp: up to (not including) the first offset at or after it; past the end: latest.
    got = offsets(read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 30_000),
                       endingOffsetsByTimestamp=json.dumps({topic: {"0": base + 34_000, "1": base + 99_000}})))
    assert got == [(0, o) for o in range(15, 17)] + [(1, o) for o in range(15, 20)]
    # assign and subscribePattern name partitions as Spark's do.
    assert offsets(read(spark, bootstrap, assign=json.dumps({topic: [1]}))) == [(1, o) for o in range(20)]
    assert len(offsets(read(spark, bootstrap, subscribePattern="read-off.*"))) == len(every)
    # A task that stops early (limit) closes its range's fetch thread and the query ends.
    assert len(read(spark, bootstrap, subscribe=topic, **{"kafka.max.partition.fetch.bytes": "200"}).limit(3)
               .collect()) == 3
    # A start equal to the end reads nothing, and planning still succeeds.
    empty = json.dumps({topic: {"0": 20, "1": 20}})
    assert offsets(read(spark, bootstrap, subscribe=topic, startingOffsets=empty)) == []


def test_min_partitions_splits_ranges_without_losing_or_repeating(spark: SparkSession, bootstrap: str) -> None:
    topic = "read-split"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"partition": 0 if i < 900 else 1, "value": b"%d" % i} for i in range(1000)])
    df = read(spark, bootstrap, subscribe=topic, minPartitions="10")
    # Proportional cuts, as Spark's KafkaOffsetRangeCalculator: 900 offsets in 9 tasks, 100 in 1.
    assert df.rdd.getNumPartitions() == 10
    assert spark_records(df) == consume_all(bootstrap, topic, [0, 1])
    assert read(spark, bootstrap, subscribe=topic).rdd.getNumPartitions() == 2


def error_of(df_thunk: object) -> str:
    with pytest.raises(PySparkException) as raised:
        df_thunk()  # type: ignore[operator]
    return str(raised.value)


def test_bad_input_fails_with_a_message_naming_what(spark: SparkSession, bootstrap: str) -> None:
    message = error_of(lambda: read(spark, bootstrap, subscribe="no-such-topic").collect())
    assert "topic 'no-such-topic' does not exist" in message
    # Every option check (test_pipeline_units) reaches the user the same way; one stands for all.
    message = error_of(lambda: read(spark, bootstrap, subscribe="a", startingOffsets="latest").collect())
    assert "starting offset can't be latest for batch queries" in message

    # A cluster nobody listens on: a port that was just free.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    message = error_of(lambda: read(spark, dead, subscribe="a", **{"kafka.request.timeout.ms": "1500"}).collect())
    assert f"cluster {dead} is unreachable" in message


def test_offsets_outside_the_log_follow_fail_on_data_loss(spark: SparkSession, bootstrap: str) -> None:
    topic = "read-loss"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(30)])

    delete_before(bootstrap, topic, 0, 10)
    from_zero = json.dumps({topic: {"0": 0}})
    message = error_of(lambda: read(spark, bootstrap, subscribe=topic, startingOffsets=from_zero).collect())
    assert f"{topic}-0: starting offset 0 is before the log start offset 10" in message
    assert "failOnDataLoss" in message
    past_end = json.dumps({topic: {"0": 99}})
    message = error_of(lambda: read(spark, bootstrap, subscribe=topic, endingOffsets=past_end).collect())
    assert f"{topic}-0: ending offset 99 is after the log end offset 30" in message
    # failOnDataLoss=false: reported, and the read goes on with what the log holds.
    got = spark_records(read(spark, bootstrap, subscribe=topic, startingOffsets=from_zero, endingOffsets=past_end,
                             failOnDataLoss="false"))
    assert [r.offset for r in got] == list(range(10, 30))
    assert got == consume_all(bootstrap, topic, [0], start=10)


def test_a_range_whose_start_was_deleted_after_planning(bootstrap: str) -> None:
    # The executor's side alone: the plan said [0, 30), then the log start moved to 10.
    topic = "read-loss-late"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"partition": 0, "value": b"%d" % i} for i in range(30)])

    delete_before(bootstrap, topic, 0, 10)
    strict = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    with pytest.raises(PipelineError, match=r"read-loss-late-0: offsets \[0, 10\) are no longer in the log"):
        list(read_range(OffsetRange(topic, 0, 0, 30), strict))
    lenient = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                  "failOnDataLoss": "false"})
    batches = list(read_range(OffsetRange(topic, 0, 0, 30), lenient))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(10, 30))


def test_a_corrupt_batch_on_disk_fails_the_read_naming_its_offset(spark: SparkSession, pipeline_broker: BrokerProcess,
                                                                   bootstrap: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    topic = "read-corrupt"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"partition": 0, "value": b"first-%d" % i} for i in range(10)])
    produce(bootstrap, topic, [{"partition": 0, "value": b"second-%d" % i} for i in range(10)])
    # One byte of the second batch's last value flipped behind the broker's back (a bad disk).
    segment = pipeline_broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    data = bytearray(segment.read_bytes())
    assert data.endswith(b"second-9\x00")  # the value, then a header count of 0
    with segment.open("r+b") as f:
        f.seek(len(data) - 2)
        f.write(b"8")
    message = error_of(lambda: read(spark, bootstrap, subscribe=topic).collect())
    assert f"{topic}-0: corrupt record batch at offset 10: batch CRC mismatch" in message
    # A job meets it in a Spark task: the command says so in one line, and exports nothing.
    out = tmp_path / "out"
    assert main(["pipeline", "export", "--bootstrap", bootstrap, "--topic", topic, "--to", str(out)]) == 1
    assert capsys.readouterr().err.strip() == f"Error: {topic}-0: corrupt record batch at offset 10: batch CRC mismatch"
    assert not list(out.rglob("*.parquet")) and not (out / "_causeway_export.json").exists()
