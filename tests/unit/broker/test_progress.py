"""broker/progress.py: rate and ETA arithmetic, never a division by zero."""

from __future__ import annotations

import pytest

from broker.progress import bytes_text, duration_text, eta_s, rate_and_eta, rate_per_s, rate_text


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


def test_bytes_in_binary_units() -> None:
    assert [bytes_text(n) for n in (0, 1023, 1024, 1536, 5 * 2**20, 3 * 2**30, 2**40, 2**50, 2**60)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB", "1.0 TiB", "1.0 PiB", "1024.0 PiB"]
    assert bytes_text(float("nan")) == "?" and bytes_text(float("inf")) == "?"


def test_bytes_beside_records() -> None:
    assert rate_text(100, 10.0, "records") == "10 records/s"
    assert rate_text(100, 10.0, "records", 10 * 1024) == "10.0 KiB, 10 records/s (1.0 KiB/s)"
    assert rate_text(0, 0.0, "records", 0) == "0 B, 0 records/s (0 B/s)"  # no time yet: no division by zero
    assert rate_and_eta(120, 240, 4.0, "offsets", 4096) == "4.0 KiB, 30 offsets/s (1.0 KiB/s), ETA 4 s"
