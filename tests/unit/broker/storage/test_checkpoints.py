"""Kafka's checkpoint text format: version 0, a count, then the entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.storage.checkpoints import (
    CheckpointError,
    read_checkpoint,
    read_offsets,
    write_checkpoint,
    write_offsets,
)


def test_offsets_are_written_as_kafka_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets(path, {("orders", 1): 42, ("orders", 0): 7, ("a-b.c", 10): 0})
    assert path.read_text() == "0\n3\na-b.c 10 0\norders 0 7\norders 1 42\n"
    assert read_offsets(path) == {("orders", 1): 42, ("orders", 0): 7, ("a-b.c", 10): 0}
    assert not list(tmp_path.glob("*.tmp"))


def test_an_empty_checkpoint_and_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    write_offsets(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offsets(path) == {}
    assert read_offsets(tmp_path / "absent") == {}


def test_leader_epoch_entries(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, [(0, 0), (3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert read_checkpoint(path, 2) == [["0", "0"], ["3", "120"]]


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\nx\n",  # bad count
        "0\n2\nt 0 1\n",  # fewer entries than announced
        "0\n1\nt 0\n",  # missing a column
        "",
    ],
)
def test_malformed_checkpoints_are_named(tmp_path: Path, text: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match="replication-offset-checkpoint"):
        read_offsets(path)
