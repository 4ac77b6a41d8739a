"""mirror/runtime.py `catch_up_line`: the initial catch-up's log line, from a status snapshot."""

from __future__ import annotations

from mirror.runtime import catch_up_line
from mirror.status import ClusterRef, MirrorStatus, PartitionStatus


def _status(*lags: int, source_end: int = 100, reached: int | None = 1) -> MirrorStatus:
    partitions = [PartitionStatus(topic="t", partition=i, remote_topic="t", position=source_end - lag,
                                  source_end=source_end, lag=lag, bytes=1536 * i) for i, lag in enumerate(lags)]
    return MirrorStatus(name="m", source=ClusterRef(alias="a", bootstrap="x:1"),
                        target=ClusterRef(alias="b", bootstrap="y:1"), state="running", updated_ms=0,
                        partitions=partitions, lag=sum(lags), records=500, source_reached_ms=reached)


def test_records_left_rate_and_eta() -> None:
    """Bytes beside the records: what the partitions copied (1.5 KiB here), in binary units."""
    assert catch_up_line(_status(300, 100), 100.0, 5.0) == (
        "mirror m: catching up: 400 records left on 2 partitions, 1.5 KiB copied, 100 records/s, ETA 4 s", False)


def test_rate_zero_is_an_unknown_eta() -> None:
    assert catch_up_line(_status(300), 0.0, 5.0) == (
        "mirror m: catching up: 300 records left on 1 partitions, 0 B copied, 0 records/s, ETA ?", False)


def test_caught_up_once_lag_is_zero() -> None:
    assert catch_up_line(_status(0, 0), 50.0, 12.0) == (
        "mirror m: caught up with the source, 2 partitions, 500 records (1.5 KiB) copied in 12 s", True)


def test_nothing_said_before_the_source_is_known() -> None:
    assert catch_up_line(_status(), 0.0, 5.0) == (None, False)  # no partition yet
    assert catch_up_line(_status(0, reached=None), 0.0, 5.0) == (None, False)
    assert catch_up_line(_status(0, source_end=-1), 0.0, 5.0) == (None, False)  # not fetched: lag 0 means nothing
