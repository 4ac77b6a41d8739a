"""broker/progress.py: rate and ETA arithmetic, never a division by zero."""

from __future__ import annotations

import pytest

from broker.progress import duration_text, eta_s, rate_and_eta, rate_per_s


@pytest.mark.parametrize(("left", "rate", "expected"), [
    (100, 10.0, 10.0),
    (0, 0.0, 0.0),  # nothing left: done, whatever the rate
    (-5, 3.0, 0.0),  # a total passed (it grew less than counted)
    (100, 0.0, None),  # rate 0: unknown, not a division by zero
    (100, -1.0, None),
    (100, float("nan"), None),
    (100, float("inf"), None),
])
def test_eta(left: float, rate: float, expected: float | None) -> None:
    assert eta_s(left, rate) == expected


def test_rate() -> None:
    assert rate_per_s(500, 10.0) == 50.0
    assert rate_per_s(500, 0.0) == 0.0  # no time yet
    assert rate_per_s(0, 10.0) == 0.0


def test_duration_text() -> None:
    assert [duration_text(s) for s in (None, 0, 59.4, 60, 185, 3600, 7830)] == [
        "?", "0 s", "59 s", "1m00s", "3m05s", "1h00m", "2h10m"]


def test_rate_and_eta() -> None:
    assert rate_and_eta(120, 240, 4.0, "offsets") == "30 offsets/s, ETA 4 s"
    assert rate_and_eta(0, 240, 0.0, "offsets") == "0 offsets/s, ETA ?"
    assert rate_and_eta(240, 240, 8.0, "offsets") == "30 offsets/s, ETA 0 s"
