"""`spark.read.format("causeway")` and `df.write.format("causeway")`: a PySpark 4 Python Data
Source for any Kafka-compatible cluster, with the options and schema of Spark's Kafka source.

    from pipeline.source import CausewayDataSource
    spark.dataSource.register(CausewayDataSource)
    df = (spark.read.format("causeway")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

The driver plans (options checked, partitions listed, offsets resolved, ranges cut for
`minPartitions`: `pipeline.planning`); each task fetches its range and yields Arrow record
batches (`pipeline.fetching`). Writing produces each task's rows idempotently
(`pipeline.producing`). Streams (`readStream`, `writeStream`) are in `pipeline.streaming`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.options import (
    PipelineError,
    ReadOptions,
    WriteOptions,
    check_write_schema,
    parse_bool,
    parse_read_options,
    parse_write_options,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.planning import OffsetRange

# Spark starts a fresh Python process to create the source and another to plan each read: the
# client, trio and the codec (a second or two to import) are imported only where they are used.

__all__ = ["FORMAT", "CausewayDataSource", "RangePartition", "kafka_spark_schema"]

FORMAT = "causeway"

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_spark_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (headers only with includeHeaders=true, as Spark's)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS))
    return StructType(fields)


class RangePartition(InputPartition):
    """One task's work: offsets [start, end) of one partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__((rng.topic, rng.partition, rng.start, rng.end))
        self.range = rng


class CausewayReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        from pipeline.planning import plan_read, split_ranges

        plan = plan_read(self.opts)
        return [RangePartition(r) for r in split_ranges(plan.ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):  # no ranges: Spark still runs one empty task
            return iter(())
        from pipeline.fetching import read_range

        return read_range(partition.range, self.opts)


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int
    partitions: int


class CausewayWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        from pipeline.producing import write_task_batches

        result = write_task_batches(iterator, self.opts)
        return WriteCommit(result.records, result.partitions)


class CausewayDataSource(DataSource):
    """Register with `spark.dataSource.register(CausewayDataSource)`; then format "causeway"."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return kafka_spark_schema(parse_bool("includeHeaders", self.options.get("includeHeaders", "false")))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(dict(self.options))
        _check_read_schema(schema, opts.include_headers)
        return CausewayReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return CausewayWriter(self._write_options(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pipeline.streaming import CausewayStreamReader, parse_stream_options  # pipeline/streaming.py

        opts = parse_stream_options(dict(self.options))
        _check_read_schema(schema, opts.read.include_headers)
        return CausewayStreamReader(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipeline.streaming import CausewayStreamWriter

        return CausewayStreamWriter(self._write_options(schema))

    def _write_options(self, schema: StructType) -> WriteOptions:
        """The write options, checked against the schema of the rows to write."""
        opts = parse_write_options(dict(self.options))
        check_write_schema({f.name: f.dataType.simpleString() for f in schema.fields}, opts)
        return opts


def _check_read_schema(schema: StructType, include_headers: bool) -> None:
    if schema != kafka_spark_schema(include_headers):
        raise PipelineError("format causeway has a fixed schema (Spark's Kafka source schema); "
                            "do not pass one with .schema()")
