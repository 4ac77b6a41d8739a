"""Checkpoint readers take every offset Kafka can have (up to 2**63 - 1, 19 digits) and every
epoch and partition (up to 2**31 - 1), and refuse only what no Kafka log can hold (issue 19,
item 5: an offset of 19 digits made a whole log dir's checkpoints count as damaged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.errors import KafkaError
from broker.protocol.records import Record, build_batch
from broker.storage import Log, LogConfig
from broker.storage.checkpoints import CheckpointError, read_offsets, read_pairs, write_checkpoint, write_offsets

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@pytest.mark.parametrize("offset", [10**18, 10**18 + 123, LONG_MAX - 1, LONG_MAX])
def test_offsets_of_nineteen_digits_round_trip(tmp_path: Path, offset: int) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {("high", INT_MAX): offset, ("kept", 0): 60}
    write_offsets(path, offsets)
    assert read_offsets(path) == offsets


def test_epochs_and_start_offsets_at_their_limits(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, [(0, 10**18), (INT_MAX, LONG_MAX)])
    assert read_pairs(path) == [(0, 10**18), (INT_MAX, LONG_MAX)]


def test_leading_zeros_are_read_as_javas_parsers_read_them(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text(f"0\n1\nt 0 {'0' * 40}{LONG_MAX}\n")
    assert read_offsets(path) == {("t", 0): LONG_MAX}


@pytest.mark.parametrize("line", [
    f"t 0 {LONG_MAX + 1}",  # past int64
    f"t 0 {'9' * 5000}",  # 5,000 digits: refused before any conversion
    "t 0 -1",  # no offset is negative
    "t 0 +5",
    "t 0 1e3",
    f"t {INT_MAX + 1} 0",  # partitions are int32
    "t -1 0",
])
def test_what_no_kafka_log_holds_is_refused_naming_the_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(f"0\n2\nok 0 1\n{line}\n")
    with pytest.raises(CheckpointError, match=r"recovery-point-offset-checkpoint:4: .* is not an offset or epoch"):
        read_offsets(path)


def test_an_epoch_past_int32_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(f"0\n1\n{INT_MAX + 1} 0\n")
    with pytest.raises(CheckpointError, match="leader-epoch-checkpoint:3"):
        read_pairs(path)


def test_a_follower_refuses_a_batch_past_the_largest_offset(tmp_path: Path) -> None:
    # Its log end offset would leave int64 and no checkpoint could hold it.
    log = Log.open(tmp_path / "t-0", LogConfig())
    batch = build_batch([Record(b"k", b"v")] * 3, base_offset=LONG_MAX - 2, base_timestamp=0)
    with pytest.raises(KafkaError) as refused:
        log.append_as_follower(batch, now_ms=0)
    assert "ends past the largest offset" in str(refused.value)
    assert log.log_end_offset == 0
