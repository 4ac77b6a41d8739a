"""The executor's half of a batch write: rows of a DataFrame produced to a cluster.

Columns as Spark's Kafka sink takes them: `value` (binary or string, required), `key` (binary
or string), `topic` (string; the `topic` option overrides it), `partition` (int; otherwise
Kafka's default partitioner: murmur2 of the key, and for a null key one partition per incoming
Arrow batch in turn, as the sticky partitioner keeps null-keyed records together), `headers`
(array<struct<key string, value binary>>). Each Spark task produces idempotently (a producer id,
per-partition sequence numbers, acks=all), one batch in flight per partition, so the rows of one
partition land in the order the task saw them and a resend never writes twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import trio

from broker.client import Client, KafkaError, admin, init_idempotent_producer
from broker.client.batching import size_batches
from broker.client.partitioner import kafka_partition
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode
from broker.protocol.records import Record
from pipeline.clients import open_job_client
from pipeline.options import PipelineError, WriteOptions
from pipeline.planning import job_error

__all__ = ["WriteResult", "write_batches"]

def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    if name not in batch.schema.names:
        return [None] * batch.num_rows
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()  # type: ignore[no-any-return]


@dataclass(slots=True)
class WriteResult:
    records: int = 0
    partitions: int = 0


async def _write(batches: Iterator[pa.RecordBatch], opts: WriteOptions, task: int) -> WriteResult:
    result = WriteResult()
    touched: set[tuple[str, int]] = set()
    async with open_job_client(opts.bootstrap, opts.security, client_id="causeway-pipeline-writer",
                               request_timeout_s=opts.request_timeout_s) as client:
        with trio.fail_after(opts.request_timeout_s + 1):
            producer = await init_idempotent_producer(client)
        partition_counts: dict[str, int] = {}
        sticky = itertools.count(task)
        # Pulling the next batch from Spark blocks this thread briefly; nothing is in flight
        # then, since every batch is acknowledged before the next is taken.
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = batch.schema.names
            keys = _bytes_column(batch, "key")
            values = _bytes_column(batch, "value")
            if opts.topic is not None:
                topics: list[str | None] = [opts.topic] * batch.num_rows
            else:
                topics = batch.column("topic").to_pylist()
            parts: list[int | None] = (batch.column("partition").to_pylist() if "partition" in names
                                       else [None] * batch.num_rows)
            headers = batch.column("headers").to_pylist() if "headers" in names else None
            for name in set(topics):
                if name is None:
                    raise PipelineError("null topic: every row needs a topic (a 'topic' column or the topic option)")
                if name not in partition_counts:
                    partition_counts[name] = await _partition_count(client, name, opts)
            null_key_partition = next(sticky)
            ts = now_ms()
            grouped: dict[tuple[str, int], list[Record]] = {}
            for i in range(batch.num_rows):
                topic = topics[i]
                assert topic is not None
                count = partition_counts[topic]
                partition = parts[i]
                if partition is None:
                    key = keys[i]
                    partition = kafka_partition(key, count) if key is not None else null_key_partition % count
                elif not 0 <= partition < count:
                    raise PipelineError(f"row {i} of a batch: topic {topic!r} has no partition {partition} "
                                        f"(it has {count})")
                row_headers = () if headers is None or headers[i] is None else tuple(
                    (h["key"], h["value"]) for h in headers[i])
                grouped.setdefault((topic, partition), []).append(Record(keys[i], values[i], row_headers, ts))

            async def send(topic: str, partition: int, records: list[Record]) -> None:
                for chunk in size_batches(records, opts.batch_bytes):
                    with trio.fail_after(opts.request_timeout_s + 1):
                        answer = await producer.send(topic, partition, chunk, compression=opts.compression)
                    if answer.error != ErrorCode.NONE:
                        raise PipelineError(f"{topic}-{partition}: produce failed: {ErrorCode(answer.error).name}"
                                            + (f" ({answer.error_message})" if answer.error_message else ""))

            async with trio.open_nursery() as nursery:
                for (topic, partition), records in grouped.items():
                    nursery.start_soon(send, topic, partition, records)
            result.records += batch.num_rows
            touched.update(grouped)
    result.partitions = len(touched)
    return result


async def _partition_count(client: Client, topic: str, opts: WriteOptions) -> int:
    try:
        with trio.fail_after(opts.request_timeout_s + 1):
            described = await admin.describe_topics(client, [topic])
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise PipelineError(f"topic {topic!r} does not exist on cluster {opts.bootstrap}") from None
        raise
    return described[topic].partition_count


def write_task_batches(batches: Iterator[pa.RecordBatch], opts: WriteOptions) -> WriteResult:
    """`write_batches` in a Spark task (batch or streaming): the task's index picks its first
    null-key partition (0 outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return write_batches(batches, opts, context.partitionId() if context is not None else 0)


def write_batches(batches: Iterator[pa.RecordBatch], opts: WriteOptions, task: int = 0) -> WriteResult:
    """Produce every row of `batches` (one trio.run). Raises PipelineError naming the topic and
    partition that failed, or the cluster when it is out of reach."""
    try:
        return trio.run(_write, batches, opts, task)
    except BaseException as exc:
        raise job_error(opts.bootstrap, exc) from None
