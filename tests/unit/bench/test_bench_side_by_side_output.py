"""The side-by-side benchmark reads Kafka's perf tools' output (captured from the 4.3.1 tools) into
figures, and refuses output it does not recognise instead of reporting zeros."""

from __future__ import annotations

import pytest

from bench.peers import ToolRun
from bench.perf_tools import ToolOutputError, parse_consumer_perf, parse_end_to_end, parse_producer_perf
from bench.side_by_side import CAUSEWAY, KAFKA, QUICK, Figure, Results, markdown

PRODUCER = """\
67067 records sent, 13344.0 records/sec (1.27 MB/sec), 794.5 ms avg latency, 1534.0 ms max latency.
200000 records sent, 23158.869847 records/sec (2.21 MB/sec), 1643.62 ms avg latency, 3135.00 ms max latency, \
1424 ms 50th, 3062 ms 95th, 3075 ms 99th, 3122 ms 99.9th.
"""
CONSUMER = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-23 18:35:21:704, 2026-11-23 18:35:22:488, 19.0735, 24.3284, 200000, 255102.0408, 268, 516, 36.9641, \
387596.8992
"""
END_TO_END = """\
WARNING: Positional argument usage is deprecated and will be removed in Apache Kafka 5.0.
0	111.40874099999999
Avg latency: 4.2555 ms
Percentiles: 50th = 2, 99th = 33, 99.9th = 111
"""


def run(stdout: str) -> ToolRun:
    return ToolRun(["tool"], 0, stdout, "")


def test_producer_summary_is_the_line_with_percentiles() -> None:
    figures = parse_producer_perf(run(PRODUCER))
    assert figures.records == 200_000
    assert figures.records_per_s == pytest.approx(23158.869847)
    assert figures.mib_per_s == pytest.approx(2.21)
    assert figures.avg_ms == pytest.approx(1643.62)
    assert (figures.p50_ms, figures.p95_ms, figures.p99_ms, figures.p999_ms) == (1424, 3062, 3075, 3122)


def test_consumer_columns_are_read_by_name() -> None:
    figures = parse_consumer_perf(run(CONSUMER))
    assert figures.records == 200_000
    assert figures.mib_per_s == pytest.approx(24.3284)
    assert figures.records_per_s == pytest.approx(255102.0408)
    assert figures.rebalance_ms == 268
    assert figures.fetch_mib_per_s == pytest.approx(36.9641)


def test_end_to_end_average_and_percentiles() -> None:
    figures = parse_end_to_end(run(END_TO_END))
    assert figures.avg_ms == pytest.approx(4.2555)
    assert (figures.p50_ms, figures.p99_ms, figures.p999_ms) == (2, 33, 111)


@pytest.mark.parametrize("parse", [parse_producer_perf, parse_consumer_perf, parse_end_to_end])
def test_unrecognised_output_is_an_error_naming_the_output(parse: object) -> None:
    assert callable(parse)
    with pytest.raises(ToolOutputError, match="Exception in thread"):
        parse(run("Exception in thread \"main\" org.apache.kafka.common.errors.TimeoutException\n"))


def test_consumer_line_missing_a_value_is_an_error() -> None:
    with pytest.raises(ToolOutputError, match="values for 10 columns"):
        parse_consumer_perf(run(CONSUMER.rsplit(",", 1)[0] + "\n"))


def test_table_gives_best_of_rounds_and_the_ratio() -> None:
    results = Results(QUICK, "4.3.1")
    rps = Figure("produce 100 B, acks=1 rps", "produce 100 B, acks=1, records/s", "rec/s", True)
    p99 = Figure("p99", "p99", "ms", False)
    for broker, values in ((KAFKA, (100.0, 200.0, 2.0, 4.0)), (CAUSEWAY, (300.0, 100.0, 3.0, 1.0))):
        results.record(broker, rps, values[0])
        results.record(broker, rps, values[1])
        results.record(broker, p99, values[2])
        results.record(broker, p99, values[3])
    table = markdown(results, "python -m bench.side_by_side --quick")
    assert "| produce 100 B, acks=1, records/s | 200 | 300 | 1.50 | higher |" in table
    assert "| p99 | 2 ms | 1 ms | 0.50 | lower |" in table
    assert "| 821,557 | 300 | 0.00 | higher |" in table  # the published anchor stays in the table
