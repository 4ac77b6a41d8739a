"""LogManager: the partitions of a broker's log dirs and the checkpoint files at their roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.storage import LogConfig, LogManager

NOW = 1_700_000_000_000


def batch(value: bytes = b"x", ts: int = NOW) -> bytes:
    return build_batch([Record(None, value, timestamp=ts)])


def loaded(*dirs: Path, config: LogConfig | None = None) -> LogManager:
    manager = LogManager(list(dirs), config or LogConfig())
    manager.load_all(NOW)
    return manager


def test_only_partition_directories_are_loaded(tmp_path: Path) -> None:
    for name in ["orders-0", "my-topic-12", "orders-1.0a1b2c-delete", "orders-x", "lost+found", "cluster-meta"]:
        (tmp_path / name).mkdir()
    (tmp_path / "meta.properties").write_text("version=0\n")
    manager = loaded(tmp_path)
    assert sorted(manager.logs()) == [("my-topic", 12), ("orders", 0)]
    # A deletion interrupted by a crash is finished.
    assert not (tmp_path / "orders-1.0a1b2c-delete").exists()
    assert (tmp_path / "meta.properties").exists()


def test_the_three_checkpoints_are_written_and_read_back(tmp_path: Path) -> None:
    manager = loaded(tmp_path, config=LogConfig(segment_bytes=300))
    log = manager.get_or_create("orders", 0, LogConfig(segment_bytes=300))
    for _ in range(10):
        log.append_as_leader(batch(b"x" * 40), leader_epoch=0, now_ms=NOW)
    log.high_watermark = 8
    log.delete_records_before(5)
    manager.get_or_create("audit", 3, LogConfig())
    manager.checkpoint()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\naudit 3 0\norders 0 8\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n2\naudit 3 0\norders 0 5\n"
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text().startswith("0\n2\naudit 3 0\norders 0 ")
    manager.close()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\naudit 3 0\norders 0 10\n"

    again = loaded(tmp_path, config=LogConfig(segment_bytes=300))
    reopened = again.get("orders", 0)
    assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (5, 8, 10)
    with pytest.raises(KafkaError) as exc:
        reopened.read(4, 100)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_crash_without_checkpoints_recovers_every_log(tmp_path: Path) -> None:
    manager = loaded(tmp_path)
    log = manager.get_or_create("orders", 0, LogConfig())
    for _ in range(3):
        log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    path = log.active.path
    # No close, no checkpoint; the last batch is torn.
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 4)
    recovered = loaded(tmp_path).get("orders", 0)
    assert recovered.log_end_offset == 2


def test_a_malformed_checkpoint_means_full_recovery_not_a_crash(tmp_path: Path) -> None:
    manager = loaded(tmp_path)
    manager.get_or_create("orders", 0, LogConfig()).append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    manager.close()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage")
    assert loaded(tmp_path).get("orders", 0).log_end_offset == 1


def test_get_create_and_delete(tmp_path: Path) -> None:
    manager = loaded(tmp_path)
    with pytest.raises(KafkaError) as exc:
        manager.get("orders", 0)
    assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    created = manager.get_or_create("orders", 0, LogConfig())
    assert (tmp_path / "orders-0").is_dir()
    assert manager.get("orders", 0) is created
    # An existing log takes the newer config.
    assert manager.get_or_create("orders", 0, LogConfig(retention_ms=5)) is created
    assert created.config.retention_ms == 5
    created.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    manager.delete("orders", 0)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KafkaError):
        manager.get("orders", 0)
    manager.delete("orders", 0)  # deleting twice is harmless


def test_new_partitions_spread_over_log_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = loaded(*dirs)
    for partition in range(4):
        manager.get_or_create("orders", partition, LogConfig())
    assert len(list(dirs[0].glob("orders-*"))) == len(list(dirs[1].glob("orders-*"))) == 2
    manager.close()
    assert all((d / "recovery-point-offset-checkpoint").read_text().startswith("0\n2\n") for d in dirs)
    assert len(loaded(*dirs).logs()) == 4


def test_retention_and_flush_run_over_every_log(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=200, retention_ms=1000, flush_ms=500)
    manager = loaded(tmp_path, config=config)
    logs = [manager.get_or_create("t", p, config) for p in range(2)]
    for log in logs:
        for _ in range(6):
            log.append_as_leader(batch(b"x" * 40), leader_epoch=0, now_ms=NOW)
        log.high_watermark = log.log_end_offset
    assert manager.flush_due(NOW + 100) == 0
    assert manager.flush_due(NOW + 600) == 2
    assert all(log.recovery_point == log.log_end_offset for log in logs)
    assert manager.flush_due(NOW + 1200) == 0  # nothing new to flush
    assert manager.apply_retention(NOW + 500) == 0
    deleted = manager.apply_retention(NOW + 5000)
    assert deleted >= 2 * 3
    assert all(log.log_start_offset == log.log_end_offset == 6 for log in logs)
