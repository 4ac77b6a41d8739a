"""`df.write.format("causeway")`: rows produced idempotently, read back by librdkafka."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from broker.client.partitioner import kafka_partition
from tests.pipeline.clients import consume_all, create_topic

pytestmark = pytest.mark.compat

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def test_written_rows_read_back_in_order_with_every_column(spark: SparkSession, bootstrap: str) -> None:
    create_topic(bootstrap, "write-a", 3)
    create_topic(bootstrap, "write-b", 2)
    schema = StructType([StructField("topic", StringType()), StructField("key", StringType()),
                         StructField("value", BinaryType()), StructField("partition", IntegerType()),
                         StructField("headers", HEADERS)])
    rows = []
    for i in range(400):
        topic = "write-a" if i % 4 else "write-b"
        key = None if i % 7 == 0 else f"key-{i % 13}"
        headers = [("n", b"%d" % i), ("null", None)] if i % 2 else None
        partition = 1 if topic == "write-b" and i % 8 == 0 else None
        rows.append((topic, key, b"value-%d" % i, partition, headers))
    # Four Spark partitions: four tasks producing at once, each with its own producer id.
    spark.createDataFrame(rows, schema).repartition(4).write.format("causeway").option(
        "kafka.bootstrap.servers", bootstrap).mode("append").save()
    got = consume_all(bootstrap, "write-a", [0, 1, 2]) + consume_all(bootstrap, "write-b", [0, 1])
    assert len(got) == 400  # nothing lost, nothing written twice
    by_value = {r.value: r for r in got}
    for topic, key, value, partition, headers in rows:
        record = by_value[value]
        assert record.topic == topic
        assert record.key == (key.encode() if key is not None else None)
        assert record.headers == (tuple(headers) if headers else None)
        if partition is not None:
            assert record.partition == partition
        elif key is not None:  # Kafka's default partitioner, as a Java or librdkafka producer places it
            assert record.partition == kafka_partition(key.encode(), 3 if topic == "write-a" else 2)


def test_order_within_a_partition_is_the_rows_order(spark: SparkSession, bootstrap: str) -> None:
    create_topic(bootstrap, "write-order", 2)
    df = spark.range(3000).selectExpr("CAST(id AS STRING) AS value", "CAST(id % 2 AS INT) AS partition")
    df.coalesce(1).write.format("causeway").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", "write-order").option("kafka.batch.size", "4096").mode("append").save()
    got = consume_all(bootstrap, "write-order", [0, 1])
    for p in (0, 1):
        values = [int(r.value) for r in got if r.partition == p]
        assert values == list(range(p, 3000, 2))
        assert [r.offset for r in got if r.partition == p] == list(range(1500))


def test_a_write_with_bad_columns_or_topic_fails_clearly(spark: SparkSession, bootstrap: str) -> None:
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(PySparkException, match="topic option required when no 'topic' attribute is present"):
        df.write.format("causeway").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    with pytest.raises(PySparkException, match="required attribute 'value' not found"):
        df.select("key").write.format("causeway").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", "x").mode("append").save()
    with pytest.raises(PySparkException, match="topic 'write-missing' does not exist"):
        df.write.format("causeway").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", "write-missing").mode("append").save()
