"""Issue 19, items 12 and 8: the standalone controller's metadata as a log of changes with
snapshots. Changes made together share one write and one fsync (in worker threads); N topics cost
O(N) bytes; a restart replays everything; a torn tail is cut with a warning, damage is named
with its file and byte offset; an old single-document file is migrated; a bad topic config
read back names the file and the topic."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import uuid
from collections.abc import Awaitable
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig, StartupError
from broker.controller import metadata_file, metadata_log
from broker.controller.metadata_file import LOG_FILE, SNAPSHOT_FILE, TopicRecord
from broker.controller.model import PartitionInfo, TopicInfo
from broker.controller.standalone import PRODUCER_ID_BLOCK, StandaloneController
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.loop_thread import ThreadCalls


class Recorder:
    def __init__(self) -> None:
        self.changed: list[str] = []
        self.deleted: list[str] = []

    async def on_topic_changed(self, topic: TopicInfo) -> None:
        self.changed.append(topic.name)

    async def on_topic_deleted(self, topic: TopicInfo) -> None:
        self.deleted.append(topic.name)


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(tmp_path)})


def _written(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in tmp_path.glob("cluster-metadata.*") if p.is_file())


async def _create_many(controller: StandaloneController, names: list[str]) -> None:
    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(controller.create_topic, name, 1, 1, {})


async def test_changes_made_together_share_one_write(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("first", 1, 1, {})
    before = controller.metadata_log.batches_written
    await _create_many(controller, [f"t{i}" for i in range(100)])
    assert controller.metadata_log.batches_written - before == 1
    assert len((tmp_path / LOG_FILE).read_bytes().splitlines()) == 2
    again = StandaloneController(_config(tmp_path))
    assert set(again.topics()) == {"first", *(f"t{i}" for i in range(100))}


async def test_every_kind_of_change_survives_a_restart(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    created = await controller.create_topic("orders", 3, 1, {"retention.ms": "1000"})
    await controller.create_partitions("orders", 5)
    await controller.set_topic_configs("orders", {"cleanup.policy": "compact"})
    await controller.create_topic("gone", 1, 1, {})
    await controller.delete_topic("gone")
    await controller.create_topic("gone", 2, 1, {})  # the same name again, a new id
    assert await controller.allocate_producer_id() == 0
    again = StandaloneController(_config(tmp_path))
    assert again.topics() == controller.topics()
    assert again.topics()["orders"].topic_id == created.topic_id
    assert len(again.topics()["orders"].partitions) == 5
    assert again.topics()["orders"].configs == {"cleanup.policy": "compact"}
    assert again.partition_count() == 7
    assert again.topic_by_id(created.topic_id) is again.topics()["orders"]
    assert await again.allocate_producer_id() == PRODUCER_ID_BLOCK


async def test_raised_leader_epochs_survive_a_restart_and_never_go_back(tmp_path: Path) -> None:
    """LinkLeaderEpoch's change (a PartitionChangeRecord): raised to max(current + 1, asked),
    left alone at or above it, replayed at a start, and in the snapshot folded from the log."""
    recorder = Recorder()
    controller = StandaloneController(_config(tmp_path), recorder)
    await controller.create_topic("copy", 2, 1, {})
    asked = {("copy", 0): 5, ("copy", 1): 0, ("missing", 0): 3, ("copy", 7): 3}
    assert await controller.raise_leader_epochs(asked) == {
        ("copy", 0): (ErrorCode.NONE, None, 5), ("copy", 1): (ErrorCode.NONE, None, 0),
        ("missing", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, -1),
        ("copy", 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, -1)}
    assert recorder.changed[-1] == "copy"  # the broker's partitions take the new epoch
    assert await controller.raise_leader_epochs({("copy", 0): 2}) == {("copy", 0): (ErrorCode.NONE, None, 5)}
    assert await controller.raise_leader_epochs({("copy", 1): 1}) == {("copy", 1): (ErrorCode.NONE, None, 1)}
    again = StandaloneController(_config(tmp_path))
    assert [p.leader_epoch for p in again.topics()["copy"].partitions] == [5, 1]
    assert again.topics() == controller.topics()
    folded = StandaloneController(_config(tmp_path))  # started from the snapshot the last start wrote
    assert [p.leader_epoch for p in folded.topics()["copy"].partitions] == [5, 1]


def test_a_leader_epoch_change_must_go_up() -> None:
    image = metadata_file.MetadataImage()
    topic_id = uuid.uuid4()
    image.apply(TopicRecord(TopicInfo("copy", topic_id, (PartitionInfo(0, 1, 4, (1,), (1,)),))))
    with pytest.raises(ValueError, match="not above 4"):
        image.apply(metadata_file.PartitionChangeRecord("copy", topic_id, 0, 4))
    with pytest.raises(ValueError, match="no partition 1"):
        image.apply(metadata_file.PartitionChangeRecord("copy", topic_id, 1, 9))
    image.apply(metadata_file.PartitionChangeRecord("copy", topic_id, 0, 9))
    assert image.topics["copy"].partitions[0].leader_epoch == 9


async def test_concurrent_producer_ids_wait_for_their_block(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    ids: list[int] = []

    async def allocate() -> None:
        ids.append(await controller.allocate_producer_id())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(allocate)
    assert sorted(ids) == [0, 1, 2, 3, 4]
    assert controller.metadata_log.batches_written == 1  # one block, written once


async def test_n_topics_cost_o_n_bytes_and_the_disk_stays_bounded(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    real_append = controller.metadata_log._append
    real_snapshot = controller.metadata_log._write_snapshot
    appended = snapshots = 0

    def counting_append(data: bytes) -> None:
        nonlocal appended
        appended += len(data)
        real_append(data)

    def counting_snapshot(snapshot: object) -> int:
        nonlocal snapshots
        size = real_snapshot(snapshot)  # type: ignore[arg-type]
        snapshots += size
        return size

    controller.metadata_log._append = counting_append  # type: ignore[method-assign]
    controller.metadata_log._write_snapshot = counting_snapshot  # type: ignore[method-assign]
    largest_on_disk = 0
    topics = 3000
    for i in range(topics):  # one topic per change: the worst case, no batching
        await controller.create_topic(f"topic-{i:05d}", 1, 1, {})
        if i % 100 == 0:
            largest_on_disk = max(largest_on_disk, _written(tmp_path))
    assert controller.metadata_log.snapshots_written >= 3
    # Each topic appends one record; each snapshot is written once the log outgrew the one
    # before, so all snapshots together are at most twice the records: O(N) bytes in all.
    # (Rewriting every topic per change wrote N^2/2 topics' worth: 1,500 times this here.)
    assert appended <= 300 * topics
    assert snapshots <= 2 * appended + metadata_log.MIN_LOG_BYTES_BEFORE_SNAPSHOT
    # On disk: a snapshot, and a log smaller than it (or than the minimum) plus one batch.
    snapshot_size = (tmp_path / SNAPSHOT_FILE).stat().st_size
    assert largest_on_disk <= 3 * snapshot_size + metadata_log.MIN_LOG_BYTES_BEFORE_SNAPSHOT
    again = StandaloneController(_config(tmp_path))
    assert again.topics() == controller.topics()


async def test_no_fsync_on_the_event_loop_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = StandaloneController(_config(tmp_path))
    calls = ThreadCalls()
    monkeypatch.setattr(os, "fsync", calls.wrap(os.fsync))
    monkeypatch.setattr(os, "fdatasync", calls.wrap(os.fdatasync))
    for i in range(400):  # past the first snapshot
        await controller.create_topic(f"t{i}", 1, 1, {"retention.ms": "1000"})
    assert controller.metadata_log.snapshots_written >= 1
    assert calls.on_loop == []
    assert calls.in_workers >= 400


async def test_a_failed_write_is_undone_and_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("kept", 1, 1, {})
    await controller.set_topic_configs("kept", {"retention.ms": "5"})
    size = (tmp_path / LOG_FILE).stat().st_size
    kept = controller.topics()["kept"]
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        # A disk that takes part of the batch, then is full: the file holds a partial line.
        if len(data) > 10:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.RaisesGroup(pytest.RaisesExc(KafkaError, check=lambda e: e.code == ErrorCode.KAFKA_STORAGE_ERROR),
                            pytest.RaisesExc(KafkaError, check=lambda e: e.code == ErrorCode.KAFKA_STORAGE_ERROR),
                            pytest.RaisesExc(KafkaError, check=lambda e: e.code == ErrorCode.KAFKA_STORAGE_ERROR),
                            pytest.RaisesExc(KafkaError, check=lambda e: e.code == ErrorCode.KAFKA_STORAGE_ERROR)):
        async with trio.open_nursery() as nursery:
            for name in ("a", "b", "c"):
                nursery.start_soon(controller.create_topic, name, 1, 1, {})
            # Changes of one topic, newest undone first: "kept" ends as it was before them.
            nursery.start_soon(controller.set_topic_configs, "kept", {"retention.ms": "6"})
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / LOG_FILE).stat().st_size == size
    assert controller.topics() == {"kept": kept}
    assert controller.partition_count() == 1
    await controller.create_topic("after", 1, 1, {})
    again = StandaloneController(_config(tmp_path))
    assert set(again.topics()) == {"kept", "after"}


async def test_a_torn_or_garbage_tail_is_cut_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("whole", 1, 1, {})
    log_path = tmp_path / LOG_FILE
    whole = log_path.read_bytes()
    snapshot = (tmp_path / SNAPSHOT_FILE).read_bytes()  # the one before "whole" was created
    for tail in (b"0000abcd {\"offset\": 1, \"rec", b"\0" * 4096, bytes(range(256)) + b"\n" + bytes(range(256))):
        log_path.write_bytes(whole + tail)
        (tmp_path / SNAPSHOT_FILE).write_bytes(snapshot)
        with caplog.at_level(logging.WARNING):
            again = StandaloneController(_config(tmp_path))
        assert set(again.topics()) == {"whole"}
        assert log_path.read_bytes() == b""  # what it held is in the snapshot written at start
        assert f"{log_path} ended in a torn write at byte {len(whole)}" in caplog.text
        kept = sorted(tmp_path.glob(f"{LOG_FILE}.torn-*"))  # noqa: ASYNC240 - a test's few files
        assert kept and kept[-1].read_bytes() == tail
        for path in kept:
            path.unlink()
        caplog.clear()
    await again.create_topic("next", 1, 1, {})  # appends after the cut
    assert set(StandaloneController(_config(tmp_path)).topics()) == {"whole", "next"}


async def test_damage_followed_by_whole_records_is_named_with_file_and_offset(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    for name in ("a", "b", "c"):
        await controller.create_topic(name, 1, 1, {})
    log_path = tmp_path / LOG_FILE
    lines = log_path.read_bytes().splitlines(keepends=True)
    damaged = bytearray(lines[1])
    damaged[20] ^= 0x01
    log_path.write_bytes(lines[0] + bytes(damaged) + lines[2])
    with pytest.raises(StartupError) as info:
        StandaloneController(_config(tmp_path))
    message = str(info.value)
    assert f"{log_path} is damaged at byte {len(lines[0])} (line 2): CRC mismatch" in message
    assert "whole records follow it (line 3)" in message


async def test_a_gap_in_record_offsets_is_named(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("a", 1, 1, {})
    log_path = tmp_path / LOG_FILE
    stray = TopicRecord(dataclasses.replace(controller.topics()["a"], name="b", topic_id=uuid.uuid4()))
    log_path.write_bytes(log_path.read_bytes() + metadata_file.encode_batch(5, [stray]))
    with pytest.raises(StartupError, match=r"damaged at byte \d+ \(line 2\): record offset 5, expected 1"):
        StandaloneController(_config(tmp_path))


async def test_a_crash_between_snapshot_and_log_reset_replays_nothing_twice(tmp_path: Path) -> None:
    controller = StandaloneController(_config(tmp_path))
    for i in range(300):
        await controller.create_topic(f"t{i}", 1, 1, {})
    assert controller.metadata_log.snapshots_written >= 1
    await controller.create_topic("last", 1, 1, {})
    log_path = tmp_path / LOG_FILE
    # The log as a crash before its reset leaves it: records the snapshot holds, then newer ones.
    stale = metadata_file.encode_batch(0, [TopicRecord(controller.topics()["t0"])])
    log_path.write_bytes(stale + log_path.read_bytes())
    again = StandaloneController(_config(tmp_path))
    assert again.topics() == controller.topics()


async def test_a_version_1_document_is_migrated_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("old", 2, 1, {"retention.ms": "1000"})
    topics = dict(controller.topics())
    doc = json.loads(metadata_file.encode(controller.cluster_id, 3000, topics))
    doc["version"] = 1
    del doc["end_offset"]
    (tmp_path / SNAPSHOT_FILE).write_text(json.dumps(doc))
    (tmp_path / LOG_FILE).unlink()
    with caplog.at_level(logging.INFO):
        migrated = StandaloneController(_config(tmp_path))
    assert "was in the format of earlier versions" in caplog.text
    assert json.loads((tmp_path / SNAPSHOT_FILE).read_text())["version"] == metadata_file.FORMAT_VERSION
    assert migrated.topics() == topics
    assert await migrated.allocate_producer_id() == 3000
    caplog.clear()
    with caplog.at_level(logging.INFO):
        StandaloneController(_config(tmp_path))
    assert "earlier versions" not in caplog.text


@pytest.mark.parametrize("where", ["snapshot", "log"])
async def test_a_bad_topic_config_names_the_file_and_the_topic(tmp_path: Path, where: str) -> None:
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("fine", 1, 1, {})
    await controller.create_topic("broken", 1, 1, {"segment.bytes": "1048576"})
    if where == "snapshot":
        path = tmp_path / SNAPSHOT_FILE
        text = metadata_file.encode(controller.cluster_id, 0, controller.topics(), 2)
        path.write_text(text.replace('"segment.bytes": "1048576"', '"segment.bytes": "-1"'))
        (tmp_path / LOG_FILE).unlink()
    else:
        path = tmp_path / LOG_FILE
        await controller.set_topic_configs("broken", {"segment.bytes": "1048576"})
        lines = path.read_bytes().splitlines(keepends=True)
        first = json.loads(lines[-1].split(b" ", 1)[1])["offset"]
        record = metadata_file.ConfigRecord("broken", controller.topics()["broken"].topic_id, {"segment.bytes": "-1"})
        path.write_bytes(b"".join(lines[:-1]) + metadata_file.encode_batch(first, [record]))
    with pytest.raises(StartupError) as info:
        StandaloneController(_config(tmp_path))
    message = str(info.value)
    assert str(path) in message
    assert "topic 'broken'" in message
    assert "Invalid value -1 for configuration segment.bytes" in message


async def test_a_change_durable_after_a_concurrent_deletion_still_succeeds(tmp_path: Path) -> None:
    """CreatePartitions and DeleteTopics of one topic at once: both are acknowledged (the
    partitions were added before the deletion), and the restart finds the topic deleted."""
    controller = StandaloneController(_config(tmp_path))
    await controller.create_topic("t", 1, 1, {})
    async def applied_first(change: Awaitable[None], *, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()  # the change is applied before this task first waits
        await change

    recorder = Recorder()
    controller.set_listener(recorder)
    async with trio.open_nursery() as nursery:
        await nursery.start(applied_first, controller.create_partitions("t", 3))
        await nursery.start(applied_first, controller.set_topic_configs("t", {"retention.ms": "1"}))
        nursery.start_soon(controller.delete_topic, "t")
    assert recorder.deleted == ["t"] and recorder.changed == []
    assert "t" not in controller.topics()
    assert "t" not in StandaloneController(_config(tmp_path)).topics()
