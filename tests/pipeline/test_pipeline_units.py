"""The pipeline's pure parts: options as Spark's Kafka source checks them, range splitting as
Spark's KafkaOffsetRangeCalculator cuts, and record batches decoded into Arrow columns."""

from __future__ import annotations

import pytest

from broker.protocol.records import Compression, Record, TimestampType, build_batch, decode_batch
from pipeline.columns import ColumnBuilder, CorruptBatch
from pipeline.options import PipelineError, parse_read_options
from pipeline.planning import OffsetRange, split_ranges

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a"} | {"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers is required"),
    ({}, "exactly one of the options subscribe, subscribePattern or assign"),
    ({"subscribe": "a", "subscribePattern": "b.*"}, "(got subscribe, subscribepattern)"),
    ({"assign": "[0]"}, "option assign: expected"),
    ({"subscribePattern": "("}, "bad regular expression"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "a-0: starting offset can't be latest (-1)"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "a-0: ending offset can't be earliest (-2)"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "has partition 'x', not a number"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-7}}'}, "offset -7 is neither"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be a positive integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp must be milliseconds"),
    ({"subscribe": "a", "endingTimestamp": "1.5"}, "endingTimestamp must be milliseconds"),
])
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(PipelineError) as raised:
        parse_read_options(BASE | options)
    assert message in str(raised.value)


def test_options_take_spark_names_in_any_case() -> None:
    opts = parse_read_options(BASE | {"SUBSCRIBE": "a,b", "startingoffsets": '{"a":{"0":5,"1":-2}}',
                                      "ENDINGOFFSETS": "latest", "minpartitions": "4", "FailOnDataLoss": "false"})
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.kind == "offsets" and opts.starting.offsets == {("a", 0): 5, ("a", 1): -2}
    assert opts.ending.kind == "latest"
    assert (opts.min_partitions, opts.fail_on_data_loss, opts.include_headers) == (4, False, False)
    # startingTimestamp wins over startingOffsets, as in Spark.
    assert parse_read_options(BASE | {"subscribe": "a", "startingOffsets": "earliest",
                                      "startingTimestamp": "1000"}).starting.timestamp == 1000


def test_ranges_are_cut_in_proportion_to_their_size() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 50, 150), OffsetRange("t", 2, 7, 7)]
    cut = split_ranges(ranges, 10)
    assert [(r.partition, r.start, r.end) for r in cut if r.partition == 1] == [(1, 50, 150)]
    assert [(r.start, r.end) for r in cut if r.partition == 0] == [(i * 100, i * 100 + 100) for i in range(9)]
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges make no task
    assert split_ranges(ranges, 2) == ranges[:2]
    # Never more parts than offsets, and every offset in exactly one part.
    tiny = split_ranges([OffsetRange("t", 0, 10, 13)], 50)
    assert [(r.start, r.end) for r in tiny] == [(10, 11), (11, 12), (12, 13)]


def _records(n: int) -> list[Record]:
    return [Record(None if i % 4 == 0 else b"k%d" % i, None if i % 9 == 0 else b"v" * (i % 300),
                   (("h", b"x"), ("n", None)) if i % 2 else (), 1_000 + i * 7) for i in range(n)]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_columns_match_the_reference_decoder(compression: int) -> None:
    batches = [build_batch(_records(200), base_offset=0, compression=compression),
               build_batch(_records(50), base_offset=200, compression=compression,
                           timestamp_type=TimestampType.LOG_APPEND_TIME, offset_deltas=range(0, 100, 2))]
    data = b"".join(batches) + batches[0][:100]  # a fetch may end inside a batch
    builder = ColumnBuilder("t", 3, include_headers=True)
    builder.add(data, 5, 290)
    table = builder.take().to_pylist()
    reference = [(h.timestamp_type, r) for b in batches for h, rs in [decode_batch(b)] for r in rs]
    reference = [(t, r) for t, r in reference if 5 <= r.offset < 290]
    assert len(table) == len(reference)
    for row, (ts_type, r) in zip(table, reference, strict=True):
        assert (row["offset"], row["key"], row["value"], row["topic"], row["partition"]) == (
            r.offset, r.key, r.value, "t", 3)
        assert round(row["timestamp"].timestamp() * 1000) == r.timestamp
        assert row["timestampType"] == ts_type
        assert row["headers"] == ([{"key": k, "value": v} for k, v in r.headers] if r.headers else None)


def test_a_corrupt_batch_is_named_by_its_offset() -> None:
    good = build_batch(_records(10), base_offset=40)
    bad = bytearray(build_batch(_records(10), base_offset=50))
    bad[-3] ^= 0xFF
    builder = ColumnBuilder("t", 0, include_headers=False)
    with pytest.raises(CorruptBatch) as raised:
        builder.add(good + bytes(bad), 40, 60)
    assert (raised.value.offset, raised.value.reason) == (50, "batch CRC mismatch")
