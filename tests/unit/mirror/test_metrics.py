"""The mirror's lag in seconds, as Kafka's lag exporters estimate it, and its latency window."""

from __future__ import annotations

import pytest

from mirror.config import mirror_config_from_data
from mirror.metrics import WINDOW_S, LatencyWindow, lag_seconds
from topology.errors import TopologyError

# The source's log end as the mirror saw it: 100 at t=10, 200 at t=20, 300 at t=30.
ENDS = [(100, 10.0), (200, 20.0), (300, 30.0)]


@pytest.mark.parametrize(("position", "expected"), [
    (300, 0.0),  # caught up: nothing is behind
    (250, 40.0 - 25.1),  # offset 250 came between t=20 and t=30, a little after the middle
    (199, 40.0 - 20.0),  # the last record before t=20's end
    (50, 40.0 - 10.0),  # older than the oldest point: at least since then
])
def test_lag_seconds_interpolates_when_the_source_end_passed_the_position(position: int, expected: float) -> None:
    assert lag_seconds(ENDS, position, now=40.0) == pytest.approx(expected)


def test_lag_seconds_without_points_is_zero() -> None:
    assert lag_seconds([], 5, now=1.0) == 0.0


def test_latency_window_keeps_the_last_window_only(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("mirror.metrics.time.monotonic", lambda: clock[0])
    window = LatencyWindow()
    assert window.stats(clock[0]) is None
    assert window.add(40) == 40
    window.add(20)
    assert window.stats(clock[0]) == (40.0, 30.0)
    clock[0] += WINDOW_S + 1
    window.add(5)
    assert window.stats(clock[0]) == (5.0, 5.0)


def test_a_bad_metrics_listener_is_refused_at_its_key() -> None:
    data = {"source": {"alias": "east", "bootstrap": "127.0.0.1:1"},
            "target": {"alias": "west", "bootstrap": "127.0.0.1:2"}, "metrics.listener": "127.0.0.1"}
    with pytest.raises(TopologyError, match="metrics.listener"):
        mirror_config_from_data(data)
    assert mirror_config_from_data({**data, "metrics.listener": "127.0.0.1:0"}).metrics_listener == "127.0.0.1:0"
