"""`spark.readStream.format("causeway")` and `writeStream.format("causeway")` against a real
broker: availableNow reads everything (every column, as librdkafka reads it), a restart from the
checkpoint goes on without repeating or skipping, maxOffsetsPerTrigger bounds each batch, `once`
reads all in one batch, processingTime picks up records produced while the query runs, and the
streaming writer's records read back."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pipeline.streaming import CausewayStreamReader, StreamPartition, parse_stream_options, rate_limit
from tests.pipeline.brokers import delete_before
from tests.pipeline.clients import Rec, consume_all, create_topic, produce, spark_records
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat


def stream(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    return (spark.readStream.format("causeway").option("kafka.bootstrap.servers", bootstrap)
            .options(**options).load())


class Batches:
    """foreachBatch's sink: each micro-batch's records, kept in the driver."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[Rec]] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        got = spark_records(df)
        with self.lock:
            self.batches.append(got)

    @property
    def records(self) -> list[Rec]:
        with self.lock:
            return sorted((r for b in self.batches for r in b), key=lambda r: (r.topic, r.partition, r.offset))


def run_available_now(df: DataFrame, sink: Batches, checkpoint: Path) -> None:
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the availableNow query did not finish"
    assert query.exception() is None


def rows(n: int, partitions: int, first: int = 0) -> list[dict[str, object]]:
    return [{"partition": i % partitions, "key": b"k%d" % i, "value": b"v%d" % i, "timestamp": 1_700_000_000_000 + i,
             **({"headers": [("h", b"%d" % i)]} if i % 2 else {})} for i in range(first, first + n)]


def test_available_now_reads_everything_and_a_restart_goes_on_from_the_checkpoint(
        spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    create_topic(bootstrap, "stream-all", 3)
    produce(bootstrap, "stream-all", rows(300, 3))
    checkpoint = tmp_path / "checkpoint"
    first = Batches()
    df = stream(spark, bootstrap, subscribe="stream-all", startingOffsets="earliest", includeHeaders="true",
                maxOffsetsPerTrigger="100")
    run_available_now(df, first, checkpoint)
    assert first.records == consume_all(bootstrap, "stream-all", [0, 1, 2])  # every column, every record
    assert all(len(b) <= 100 for b in first.batches) and len(first.batches) >= 3  # maxOffsetsPerTrigger

    produce(bootstrap, "stream-all", rows(150, 3, first=300))
    again = Batches()
    run_available_now(df, again, checkpoint)  # the same query, restarted from its checkpoint
    expected = consume_all(bootstrap, "stream-all", [0, 1, 2])
    assert again.records == [r for r in expected if r.offset >= 100]  # only what is new: no repeat, no gap
    assert all(len(b) <= 100 for b in again.batches)

    nothing = Batches()
    run_available_now(df, nothing, checkpoint)
    assert nothing.records == []


def test_once_reads_all_in_one_batch_and_processing_time_follows_new_records(
        spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    create_topic(bootstrap, "stream-live", 2)
    produce(bootstrap, "stream-live", rows(120, 2))
    once = Batches()
    query = (stream(spark, bootstrap, subscribe="stream-live", startingOffsets="earliest", maxOffsetsPerTrigger="10")
             .writeStream.foreachBatch(once).option("checkpointLocation", str(tmp_path / "once"))
             .trigger(once=True).start())
    assert query.awaitTermination(120)
    assert [len(b) for b in once.batches] == [120]  # once: everything, whatever the limit

    live = Batches()
    # startingOffsets latest (the streaming default): only what arrives after the query started.
    query = (stream(spark, bootstrap, subscribe="stream-live").writeStream.foreachBatch(live)
             .option("checkpointLocation", str(tmp_path / "live")).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, what="the first micro-batch", timeout_s=60)
        produce(bootstrap, "stream-live", rows(40, 2, first=120))
        wait_until(lambda: len(live.records) >= 40, what="the new records to be streamed", timeout_s=60)
    finally:
        query.stop()
    assert [r.value for r in live.records] == [r.value for r in consume_all(bootstrap, "stream-live", [0, 1], 60)]


def test_streaming_writer_produces_each_batch_in_order(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    create_topic(bootstrap, "stream-in", 2)
    create_topic(bootstrap, "stream-out", 2)
    produce(bootstrap, "stream-in", rows(200, 2))
    query = (stream(spark, bootstrap, subscribe="stream-in", startingOffsets="earliest", maxOffsetsPerTrigger="60",
                    includeHeaders="true")
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "partition", "headers")
             .writeStream.format("causeway").option("kafka.bootstrap.servers", bootstrap).option("topic", "stream-out")
             .option("checkpointLocation", str(tmp_path / "out")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    source = consume_all(bootstrap, "stream-in", [0, 1])
    written = consume_all(bootstrap, "stream-out", [0, 1])
    for p in (0, 1):
        assert [(r.key, r.value.upper(), r.headers) for r in source if r.partition == p] == [  # type: ignore[union-attr]
            (r.key, r.value, r.headers) for r in written if r.partition == p]


def test_stream_options_are_checked_as_spark_checks_them(spark: SparkSession, bootstrap: str) -> None:
    # Spark makes the stream's reader when the query runs: the query stops with the reason.
    for options, reason in (({"endingOffsets": "latest"}, "endingOffsets is not valid in streaming queries"),
                            ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer")):
        query = stream(spark, bootstrap, subscribe="x", **options).writeStream.format("noop").start()
        try:
            with pytest.raises(PySparkException, match=reason):
                query.awaitTermination(60)
        finally:
            query.stop()
    # Spark's proration: in proportion to what each partition has waiting, at least one each.
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    assert rate_limit({a: 0, b: 0, c: 5}, {a: 300, b: 100, c: 5}, 100) == {a: 75, b: 25, c: 5}
    assert rate_limit({a: 0, b: 0}, {a: 1000, b: 1}, 10) == {a: 9, b: 1}
    assert rate_limit({a: 0}, {a: 5}, 10) == {a: 5}


def test_a_partition_added_while_streaming_is_read_from_its_start(bootstrap: str) -> None:
    """The driver's side alone (no Spark needed): offsets as Spark's Kafka source keeps them."""
    create_topic(bootstrap, "stream-grow", 1)
    produce(bootstrap, "stream-grow", rows(10, 1))
    reader = CausewayStreamReader(parse_stream_options({"kafka.bootstrap.servers": bootstrap,
                                                        "subscribe": "stream-grow"}))
    start = reader.initialOffset()
    assert start == {"stream-grow": {"0": 10}}  # latest, the streaming default
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the call fails if it is collected first
    admin.create_partitions([NewPartitions("stream-grow", 2)])["stream-grow"].result(30)
    produce(bootstrap, "stream-grow", [{**r, "partition": 1} for r in rows(5, 1)])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"stream-grow": {"0": 10, "1": 5}}
    ranges = [p.range for p in reader.partitions(start, end) if isinstance(p, StreamPartition)]
    assert [(r.partition, r.start, r.end) for r in ranges] == [(1, 0, 5)]
    assert reader.latestOffset(end, ReadMaxRows(3)) == end  # nothing new: the same offsets


def test_offsets_deleted_past_the_checkpoint_fail_the_query_or_are_skipped(
        spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    """failOnDataLoss for a stream: records past the last batch deleted before the next one reads
    them. By default the query stops naming partition and offsets; with false it goes on from
    the new log start."""
    create_topic(bootstrap, "stream-loss", 1)
    produce(bootstrap, "stream-loss", rows(30, 1))
    checkpoint = tmp_path / "checkpoint"
    first = Batches()
    run_available_now(stream(spark, bootstrap, subscribe="stream-loss", startingOffsets="earliest"), first, checkpoint)
    assert [r.offset for r in first.records] == list(range(30))
    produce(bootstrap, "stream-loss", rows(30, 1, first=30))

    delete_before(bootstrap, "stream-loss", 0, 45)
    query = (stream(spark, bootstrap, subscribe="stream-loss").writeStream.foreachBatch(Batches())
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        with pytest.raises(PySparkException, match=r"stream-loss-0: offsets \[30, 45\) are no longer in the log "
                                                   r"\(its start offset is now 45\)"):
            query.awaitTermination(120)
    finally:
        query.stop()
    lenient = Batches()
    run_available_now(stream(spark, bootstrap, subscribe="stream-loss", failOnDataLoss="false", includeHeaders="true"),
                      lenient, checkpoint)
    assert lenient.records == consume_all(bootstrap, "stream-loss", [0], start=45)
