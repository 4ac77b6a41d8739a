"""`python -m bench.side_by_side --quick` runs end to end: Apache Kafka (the cached 4.x peer) and a
Causeway broker are started, Kafka's perf tools and the fixed-rate pair run against both, and every
figure comes back parsed. It checks that each figure exists and is positive (or, for the whole
milliseconds Kafka's tools print, not negative), never how large: the machine is shared."""

from __future__ import annotations

import pytest

from bench import side_by_side

pytestmark = pytest.mark.slow


def test_quick_profile_measures_both_brokers(kafka_jars: None) -> None:
    said: list[str] = []
    results = side_by_side.run(side_by_side.QUICK, say=said.append)

    keys = [figure.key for figure in results.figures]
    for expected in ("startup", "produce 100 B, acks=1 rps", "produce 100 B, acks=1 mib", "consume 100 B rps",
                     "consume 100 B mib", "e2e tool p99", "e2e rate p50", "e2e rate p999", "rss", "peak rss"):
        assert expected in keys, f"{expected!r} missing from {keys}"
    for figure in results.figures:
        # Only Kafka formats its storage before it starts; every other figure is measured on both.
        brokers = (side_by_side.KAFKA,) if figure.key == "format" else (side_by_side.KAFKA, side_by_side.CAUSEWAY)
        for broker in brokers:
            values = results.values[broker].get(figure.key)
            assert values, f"no {figure.label} for {broker}"
            # Kafka's tools print latency percentiles in whole milliseconds: 0 is a real reading.
            whole_ms = figure.unit == "ms" and figure.key.endswith(("p50", "p99", "p999")) and "rate" not in figure.key
            assert all(v >= 0 if whole_ms else v > 0 for v in values), f"{broker} {figure.label}: {values}"
    assert results.tcp_mb_s[0] > 0 and results.append_mb_s[0] > 0

    table = side_by_side.markdown(results, "python -m bench.side_by_side --quick")
    assert "| figure | Apache Kafka | Causeway | Causeway / Kafka |" in table
    assert "821,557" in table
    assert any(line.startswith("  causeway: RSS after the runs") for line in said)
