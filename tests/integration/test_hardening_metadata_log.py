"""Issue 19, items 12 and 8 (second half), against real broker processes: a standalone broker's
metadata is a log of changes with snapshots. Auto-creating thousands of topics writes O(N) bytes
(the old single document was rewritten whole for each: 963 MB for 2,566 topics), 100 topics
auto-created by one Metadata request are one write, every topic and config is back after a
restart or a SIGKILL (also one inside a compaction), a torn or garbage tail is cut with a warning,
damage is named with its file and byte offset, and a bad topic config read back names the file
and the topic."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

from broker.controller import metadata_file
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import MetadataRequest, MetadataResponse
from deploy.broker_process import BrokerProcess, broker_command
from deploy.kafka_socket import call, connect
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
LOG = "cluster-metadata.log"
SNAPSHOT = "cluster-metadata.json"
# Offset checkpoints (every partition, each interval) would blur the metadata's share of the bytes.
QUIET = ("num.partitions=1", "log.flush.offset.checkpoint.interval.ms=3600000")


def auto_create(bootstrap: str, names: list[str]) -> None:
    """One Metadata request (v9) that auto-creates `names`; each must be created."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                              allow_auto_topic_creation=True)
    with connect(bootstrap) as sock:
        response: MetadataResponse = call(sock, request, 9)
    assert {t.name for t in response.topics} == set(names)
    assert {t.error_code for t in response.topics} <= {ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE}


def written(broker: BrokerProcess) -> int:
    """Bytes the broker handed to write(2) and its kin (/proc/PID/io wchar): its files, its log,
    its sockets. Not write_bytes: that one also counts every 4 KiB page of file system metadata
    (directories, inodes) dirtied by creating partition directories, and how often those pages
    are dirtied again depends on when writeback cleaned them, which is a matter of time, not N."""
    assert broker.proc is not None
    with open(f"/proc/{broker.proc.pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def log_lines(data_dir: Path) -> list[dict[str, object]]:
    path = data_dir / LOG
    lines = path.read_bytes().splitlines() if path.exists() else []
    return [json.loads(line.split(b" ", 1)[1]) for line in lines]


def describe(bootstrap: str) -> dict[str, tuple[int, dict[str, str]]]:
    """Every topic but the broker's own: partition count and config overrides."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = sorted(t for t in admin.list_topics(timeout=60).topics if not t.startswith("__"))
    partitions = {n: len(t.partitions) for n, t in admin.list_topics(timeout=60).topics.items()}
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for start in range(0, len(names), 200):
        resources = [ConfigResource("topic", n) for n in names[start:start + 200]]
        for resource, future in admin.describe_configs(resources).items():
            overrides = {k: v.value for k, v in future.result(timeout=60).items()
                         if v.source == 1}  # DYNAMIC_TOPIC_CONFIG: the topic's own overrides
            out[resource.name] = (partitions[resource.name], overrides)
    return out


def test_one_metadata_request_of_100_new_topics_is_one_write(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=QUIET).start()
    try:
        snapshot = (broker.data_dir / SNAPSHOT).read_bytes()
        # 100 new names; then 60 new among 40 that exist (and one name twice).
        for names in ([f"new-{i:03d}" for i in range(100)],
                      [f"new-{i:03d}" for i in range(40)] + [f"more-{i:03d}" for i in range(60)] + ["more-000"]):
            before = log_lines(broker.data_dir)
            auto_create(broker.bootstrap, names)
            added = log_lines(broker.data_dir)[len(before):]
            assert len(added) == 1  # one line: one write, one fsync
            assert {r["name"] for r in added[0]["records"]} == set(names) - {  # type: ignore[attr-defined]
                r["name"] for b in before for r in b["records"]}  # type: ignore[attr-defined]
        # (No compaction in between, which would have emptied the log.)
        assert (broker.data_dir / SNAPSHOT).read_bytes() == snapshot
    finally:
        broker.kill()


def test_auto_creating_thousands_of_topics_writes_o_n_bytes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=QUIET).start()
    try:
        per_topic = {}
        start_bytes = written(broker)
        created = 0
        for rounds in (3, 15):  # to 300, then to 1,500 topics
            while created < rounds * 100:
                auto_create(broker.bootstrap, [f"t{created + i:05d}" for i in range(100)])
                created += 100
            per_topic[created] = (written(broker) - start_bytes) / created
        # Rewriting the whole document per topic makes each topic cost more the more there are
        # (5x from 300 to 1,500 topics); a log of changes with snapshots costs the same per topic.
        assert per_topic[1500] < 1.5 * per_topic[300], per_topic
        assert broker.stop() == 0
        assert len(describe(broker.start().bootstrap)) == 1500
    finally:
        broker.kill()


def make_history(bootstrap: str, count: int) -> None:
    """Topics made every way a client can: CreateTopics with configs and partitions, auto-created,
    configs changed, partitions added, topics deleted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(f"c{i:04d}", 1 + i % 3, 1, config={"retention.ms": str(1000 + i)} if i % 2 else {})
           for i in range(count)]
    for future in admin.create_topics(new, operation_timeout=60).values():
        future.result(timeout=120)
    for start in range(0, count, 100):
        auto_create(bootstrap, [f"a{i:04d}" for i in range(start, min(count, start + 100))])
    changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in {"cleanup.policy": "compact", "segment.bytes": "1048576"}.items()]
    changed = [ConfigResource("topic", f"c{i:04d}", incremental_configs=changes) for i in range(0, count, 7)]
    for future in admin.incremental_alter_configs(changed).values():
        future.result(timeout=60)
    grown = [NewPartitions(f"a{i:04d}", 4) for i in range(0, count, 5)]
    for future in admin.create_partitions(grown).values():
        future.result(timeout=60)
    for future in admin.delete_topics([f"c{i:04d}" for i in range(3, count, 11)]).values():
        future.result(timeout=60)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_every_topic_and_config_is_back_after_a_restart(tmp_path: Path, stop: str) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        make_history(broker.bootstrap, 400)  # past the first snapshot
        assert (broker.data_dir / SNAPSHOT).exists()
        expected = describe(broker.bootstrap)
        assert len(expected) == 800 - len(range(3, 400, 11))
        assert expected["c0007"] == (2, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                         "retention.ms": "1007"})
        if stop == "SIGTERM":
            assert broker.stop() == 0
        else:
            broker.kill()
        assert describe(broker.start().bootstrap) == expected
    finally:
        broker.kill()


@pytest.mark.parametrize(("crash_at", "kill_after"), [("", 100), ("", 700), ("metadata-snapshot-before-log-reset", 0)])
def test_a_sigkill_during_creation_loses_nothing_acknowledged(tmp_path: Path, crash_at: str, kill_after: int) -> None:
    """A client auto-creates topics, 20 a request, while the broker is SIGKILLed: by the test
    (once 100 topics are acknowledged, before the first snapshot, or 700, after some), or by
    itself inside a compaction, between the new snapshot and the log's reset. Every topic
    acknowledged before is there after the restart."""
    env = {"CAUSEWAY_CRASH_AT": crash_at} if crash_at else {}
    broker = BrokerProcess(tmp_path / "data", overrides=QUIET, env=env).start()
    acknowledged: list[str] = []
    failure: list[BaseException] = []

    def create_until_the_broker_dies() -> None:
        for start in range(0, 2000, 20):
            names = [f"t{i:05d}" for i in range(start, start + 20)]
            try:
                auto_create(broker.bootstrap, names)
            except (ConnectionError, OSError):
                return
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                failure.append(exc)
                return
            acknowledged.extend(names)

    creator = threading.Thread(target=create_until_the_broker_dies)
    creator.start()
    try:
        if not crash_at:
            wait_until(lambda: len(acknowledged) >= kill_after or not creator.is_alive(),
                       what=f"{kill_after} topics acknowledged", timeout_s=300)
            broker.kill()
        creator.join(timeout=600)
        assert not creator.is_alive() and failure == []
        if crash_at:
            assert broker.proc is not None and broker.proc.wait(timeout=60) == -9  # it crashed where asked
            broker.proc = None
        assert 0 < len(acknowledged) < 2000
        broker.env = {}
        topics = AdminClient({"bootstrap.servers": broker.start().bootstrap}).list_topics(timeout=60).topics
        assert set(acknowledged) <= set(topics)
    finally:
        broker.kill()


@pytest.fixture
def stopped(tmp_path: Path) -> tuple[BrokerProcess, bytes]:
    """A broker that created topics a1..a3 and stopped; its intact log."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    for name in ("a1", "a2", "a3"):
        auto_create(broker.bootstrap, [name])
    assert broker.stop() == 0
    return broker, (broker.data_dir / LOG).read_bytes()


@pytest.mark.parametrize("tail", [b'0badc0de {"offset":9,"rec', b"\0" * 4096, bytes(range(256)) * 3])
def test_a_torn_or_garbage_tail_is_cut_with_a_warning(stopped: tuple[BrokerProcess, bytes], tail: bytes) -> None:
    broker, intact = stopped
    path = broker.data_dir / LOG
    path.write_bytes(intact + tail)
    broker.start()
    try:
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=60).topics
        assert {"a1", "a2", "a3"} <= set(topics)
        assert f"{path} ended in a torn write at byte {len(intact)}" in broker.log_path.read_text()
        kept = list(broker.data_dir.glob(f"{LOG}.torn-*"))
        assert [k.read_bytes() for k in kept] == [tail]
        auto_create(broker.bootstrap, ["after"])  # appends after the cut, read back whole
        assert broker.stop() == 0
        broker.start()
        assert "after" in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=60).topics
    finally:
        broker.kill()


def start_and_fail(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(broker_command(data_dir, listen="127.0.0.1:0"), capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=False)


def test_damage_before_whole_records_stops_the_start_naming_file_and_offset(
        stopped: tuple[BrokerProcess, bytes]) -> None:
    broker, intact = stopped
    path = broker.data_dir / LOG
    lines = intact.splitlines(keepends=True)
    assert b'"a1"' in lines[1]  # line 1 created __consumer_offsets
    damaged = lines[1].replace(b'"a1"', b'"x1"', 1)  # the CRC no longer matches
    path.write_bytes(lines[0] + damaged + b"".join(lines[2:]))
    result = start_and_fail(broker.data_dir)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{path} is damaged at byte {len(lines[0])} (line 2): CRC mismatch" in result.stderr
    assert "ready" not in result.stdout


def v1_document(topics: dict[str, dict[str, str]]) -> bytes:
    """cluster-metadata.json as versions before the log wrote it."""
    return json.dumps({"version": 1, "cluster_id": "c", "producer_id_block_end": 0, "topics": {
        name: {"topic_id": str(uuid.uuid4()), "internal": False, "configs": configs,
               "partitions": [{"partition": 0, "leader": 0, "leader_epoch": 0, "replicas": [0], "isr": [0]}]}
        for name, configs in topics.items()}}).encode()


def test_a_data_dir_of_an_earlier_version_is_migrated_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / SNAPSHOT).write_bytes(v1_document({"old": {"retention.ms": "1000"}, "older": {}}))
    broker = BrokerProcess(data).start()
    try:
        assert "was in the format of earlier versions" in broker.log_path.read_text()
        assert describe(broker.bootstrap) == {"old": (1, {"retention.ms": "1000"}), "older": (1, {})}
        assert json.loads((data / SNAPSHOT).read_text())["version"] == metadata_file.FORMAT_VERSION
        assert broker.stop() == 0
        broker.log_path.unlink()
        broker.start()
        assert "earlier versions" not in broker.log_path.read_text()
        assert describe(broker.bootstrap)["old"] == (1, {"retention.ms": "1000"})
    finally:
        broker.kill()


@pytest.mark.parametrize("where", ["cluster-metadata.json", "cluster-metadata.log"])
def test_a_bad_topic_config_names_the_file_and_the_topic(tmp_path: Path, where: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if where == SNAPSHOT:
        # The case: an existing data dir whose document holds segment.bytes=-1.
        (data / SNAPSHOT).write_bytes(v1_document({"fine": {}, "orders": {"segment.bytes": "-1"}}))
    else:
        broker = BrokerProcess(data).start()
        auto_create(broker.bootstrap, ["fine", "orders"])
        assert broker.stop() == 0
        created = [r for batch in log_lines(data) for r in batch["records"]  # type: ignore[attr-defined]
                   if r.get("name") == "orders"]
        topic_id = uuid.UUID(created[0]["topic"]["topic_id"])
        last = log_lines(data)[-1]
        following = int(last["offset"]) + len(last["records"])  # type: ignore[call-overload, arg-type]
        record = metadata_file.ConfigRecord("orders", topic_id, {"segment.bytes": "-1"})
        with open(data / LOG, "ab") as f:
            f.write(metadata_file.encode_batch(following, [record]))
    result = start_and_fail(data)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert str(data / where) in result.stderr
    assert "topic 'orders'" in result.stderr
    assert "Invalid value -1 for configuration segment.bytes" in result.stderr


def test_names_of_one_request_that_collide_are_decided_in_request_order(tmp_path: Path) -> None:
    """Auto-created together, the topics of one request still meet the name-collision check in
    the request's order: the first of 'x.N' and 'x_N' wins, whichever comes first."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        names = [n for i in range(20) for n in ((f"x.{i}", f"x_{i}") if i % 2 else (f"x_{i}", f"x.{i}"))]
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                  allow_auto_topic_creation=True)
        with connect(broker.bootstrap) as sock:
            response: MetadataResponse = call(sock, request, 9)
        codes = {t.name: t.error_code for t in response.topics}
        assert [n for n in names if codes[n] == ErrorCode.INVALID_TOPIC_EXCEPTION] == names[1::2]
        assert all(codes[n] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE) for n in names[::2])
    finally:
        broker.kill()
