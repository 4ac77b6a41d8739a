"""Issue 11: the mirror's status file as a typed model, shared by the mirror that writes it and
`causeway status` that reads it: a round trip keeps every field, damage is named by file and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mirror.status import MAX_STATUS_BYTES, MirrorStatus, StatusFileError, read_status

SAMPLE = {
    "name": "east->west",
    "source": {"alias": "east", "bootstrap": "127.0.0.1:1"},
    "target": {"alias": "west", "bootstrap": "127.0.0.1:2"},
    "state": "running",
    "mode": "mm2",
    "updated_ms": 1_700_000_000_000,
    "topics": {"orders": "east.orders"},
    "not_mirrored": {},
    "lag": 3,
    "records": 10,
    "max_latency_ms": 12,
    "group_checkpoints": 1,
    "problems": {"parked orders-0": "parked at source offset 5: CRC mismatch"},
    "source_reached_ms": 1_699_999_999_000,
    "promoted": [],
    "topic_states": {"orders": {"state": "PAUSED", "reason": None, "lag": 3, "lag_ms": 40}},
    "partitions": [{
        "topic": "orders", "partition": 0, "remote_topic": "east.orders", "position": 5, "source_end": 8,
        "lag": 3, "target_end": -1, "latency_ms": 12, "records": 10, "bytes": 900,
        "error": "parked at source offset 5: CRC mismatch",
        "parked": True, "gaps": ["offsets 1..2 are gone at the source"], "lost": None, "recopy": None,
        "failed": None,
    }],
    "events": [{"time_ms": 1_700_000_000_000, "message": "a gap"}],
}


def test_round_trip_keeps_every_field_by_its_name(tmp_path: Path) -> None:
    path = tmp_path / "m.status.json"
    status = MirrorStatus.model_validate(SAMPLE)
    path.write_text(status.to_json())
    assert json.loads(path.read_text()) == SAMPLE  # the names `causeway status` and operators read
    assert read_status(path) == status


def test_no_file_yet_is_none_and_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "m.status.json"
    assert read_status(path) is None
    path.write_text(json.dumps({**SAMPLE, "from_a_newer_mirror": {"x": 1}}))
    report = read_status(path)
    assert report is not None and report.lag == 3 and report.partitions[0].parked


@pytest.mark.parametrize(("content", "reason"), [
    (b"\x89PNG\r\n\x1a\n\x00\xff", "not a mirror status file"),
    (b'{"name": "m", "state": ', "not a mirror status file"),
    (json.dumps({**SAMPLE, "lag": "3"}).encode(), "lag"),
    (json.dumps({**SAMPLE, "problems": ["x"]}).encode(), "problems"),
    (json.dumps({k: v for k, v in SAMPLE.items() if k != "updated_ms"}).encode(), "updated_ms"),
    (json.dumps({**SAMPLE, "partitions": [{"topic": "orders"}]}).encode(), "partitions.0.partition"),
])
def test_a_damaged_status_file_is_named_with_its_field(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "m.status.json"
    path.write_bytes(content)
    with pytest.raises(StatusFileError) as caught:
        read_status(path)
    assert str(path) in str(caught.value) and reason in str(caught.value)


def test_a_fifo_or_a_huge_file_is_refused_without_blocking_or_reading_it_whole(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.status.json"
    os.mkfifo(fifo)
    with pytest.raises(StatusFileError, match="is a FIFO, not a regular file"):
        read_status(fifo)  # a plain open() would wait here for a writer
    huge = tmp_path / "huge.status.json"
    with huge.open("wb") as f:
        f.truncate(MAX_STATUS_BYTES * 20)
    with pytest.raises(StatusFileError, match=f"is larger than {MAX_STATUS_BYTES} bytes"):
        read_status(huge)
