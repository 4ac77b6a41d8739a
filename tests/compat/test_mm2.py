"""Apache Kafka's MirrorMaker 2 (4.x, `connect-mirror-maker`) between two Causeway brokers, and
MM2's `RemoteClusterUtils.translateOffsets` reading the checkpoints `causeway mirror` writes.

MM2 is the judge here: its Connect worker keeps its config, offset and status topics (compacted)
and its worker group on the target broker, its connectors copy records, emit heartbeats and
checkpoint a consumer group. Everything it wrote is read back and checked; the JVM is stopped
with SIGTERM and reaped at the end. One MM2 run (the JVM start and the Connect herder's start
are most of its ~10 s) serves every check of the first test.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from bench.peers import KafkaBroker, run_tool
from bench.peers.events import start_tool
from bench.peers.java import run_java_program
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from mirror.formats import Checkpoint, Heartbeat, OffsetSync, decode_position
from tests.compat.partitions import TIMEOUT_S, create_topic, log_end, raw, read_all
from tests.support.consume import committed
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat
REPO = Path(__file__).resolve().parents[2]
TRANSLATE = REPO / "bench" / "peers" / "TranslateOffsets.java"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory,
             kafka_jars: None) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Two single-broker Causeway clusters, `east` (source) and `west` (target)."""
    base = tmp_path_factory.mktemp("mm2")
    started: list[BrokerProcess] = []
    try:
        for name in ("east", "west"):
            started.append(BrokerProcess(base / name, overrides=("group.initial.rebalance.delay.ms=0",)).start())
        yield started[0], started[1]
    finally:
        for broker in started:
            code = broker.stop()
            assert code == 0, f"broker did not stop cleanly (exit {code}):\n{broker.log_tail()}"


def produce(broker: BrokerProcess, topic: str, count: int, partitions: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(count):
        producer.produce(topic, key=f"{tag}-k{i}".encode(), value=f"{tag}-v{i}".encode() * (1 + i % 7),
                         partition=i % partitions, headers=[("n", str(i).encode())],
                         timestamp=1_700_000_000_000 + i)
    assert producer.flush(TIMEOUT_S) == 0


def commit(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def mm2_properties(path: Path, east: BrokerProcess, west: BrokerProcess, topics: str) -> Path:
    """A dedicated-mode MM2 configuration, as in Kafka's config/connect-mirror-maker.properties,
    with single-replica internal topics and one-second intervals so a test sees each effect soon."""
    settings = {
        "clusters": "east, west",
        "east.bootstrap.servers": east.bootstrap,
        "west.bootstrap.servers": west.bootstrap,
        "east->west.enabled": "true",
        "west->east.enabled": "false",
        "east->west.topics": topics,
        "east->west.groups": ".*",
        "replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "emit.heartbeats.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        # Worker settings of the east->west herder are the target cluster's (MirrorMakerConfig.workerConfig).
        "west.offset.flush.interval.ms": "1000",
        "tasks.max": "1",
    }
    path.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
    return path


# MM2's JVM: Connect starts a herder with several clients and threads; a little more heap than a tool.
MM2_JVM_FLAGS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                 "-Xlog:disable", "-Xlog:all=warning,cds*=off:stderr", "-Djava.awt.headless=true")


def test_mirror_maker_2_between_two_causeway_clusters(clusters: tuple[BrokerProcess, BrokerProcess],
                                                      tmp_path: Path) -> None:
    east, west = clusters
    topic, group, partitions, count = "orders", "orders-app", 2, 300
    create_topic(east.bootstrap, topic, partitions, {"retention.ms": "86400000"})
    produce(east, topic, count, partitions, "a")
    commit(east, group, {(topic, 0): 60, (topic, 1): 40})

    config = mm2_properties(tmp_path / "mm2.properties", east, west, "orders")
    began = time.monotonic()
    mm2 = start_tool("connect-mirror-maker", str(config), stderr_path=tmp_path / "mm2.log",
                     jvm_flags=MM2_JVM_FLAGS)
    try:
        remote = f"east.{topic}"
        wait_until(lambda: all(log_end(west.bootstrap, remote, p) == count // partitions for p in range(partitions)),
                   what=f"{count} records in {remote}", timeout_s=TIMEOUT_S)
        copied_s = time.monotonic() - began
        # Identical and in order: keys, values, headers, timestamps, partition by partition.
        for p in range(partitions):
            assert read_all(west.bootstrap, remote, p) == read_all(east.bootstrap, topic, p), f"partition {p} differs"
        # More records while it runs arrive behind them.
        produce(east, topic, 20, partitions, "b")
        wait_until(lambda: all(log_end(west.bootstrap, remote, p) == (count + 20) // partitions
                               for p in range(partitions)),
                   what="records produced while MM2 runs", timeout_s=TIMEOUT_S)
        for p in range(partitions):
            assert read_all(west.bootstrap, remote, p) == read_all(east.bootstrap, topic, p), f"partition {p} differs"

        # The remote topic got the source's partition count and its non-default config.
        admin = AdminClient({"bootstrap.servers": west.bootstrap})
        assert len(admin.list_topics(timeout=TIMEOUT_S).topics[remote].partitions) == partitions
        resource = ConfigResource("topic", remote)
        wait_until(lambda: admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)[
            "retention.ms"].value == "86400000", what="retention.ms synced", timeout_s=TIMEOUT_S)

        # Heartbeats: MM2's heartbeat connector writes east->west beats to `heartbeats` on the target.
        def beats() -> list[Heartbeat]:
            if log_end(west.bootstrap, "heartbeats", 0) <= 0:
                return []
            return [Heartbeat.decode(key, value or b"") for key, value in raw(west.bootstrap, "heartbeats")]
        wait_until(lambda: len(beats()) >= 2, what="two heartbeats", timeout_s=TIMEOUT_S)
        assert {(b.source_alias, b.target_alias) for b in beats()} == {("east", "west")}
        stamps = [b.timestamp_ms for b in beats()]
        assert stamps == sorted(stamps) and abs(stamps[-1] / 1000 - time.time()) < TIMEOUT_S

        # Checkpoints: the group's committed offsets, translated, in east.checkpoints.internal.
        checkpoints_topic = "east.checkpoints.internal"

        def checkpoints() -> dict[int, Checkpoint]:
            if log_end(west.bootstrap, checkpoints_topic, 0) <= 0:
                return {}
            latest = {}
            for key, value in raw(west.bootstrap, checkpoints_topic):
                checkpoint = Checkpoint.decode(key, value or b"")
                latest[checkpoint.partition] = checkpoint
            return latest
        wait_until(lambda: {p: c.upstream_offset for p, c in checkpoints().items()} == {0: 60, 1: 40},
                   what="checkpoints of the group", timeout_s=TIMEOUT_S)
        found = checkpoints()
        assert {(c.group, c.topic) for c in found.values()} == {(group, remote)}
        # MM2 translates through its offset syncs (on the source, mm2-offset-syncs.west.internal): the
        # newest sync at or below the group's offset, plus one when past it. Check against those syncs.
        syncs = [OffsetSync.decode(key, value or b"")
                 for key, value in raw(east.bootstrap, "mm2-offset-syncs.west.internal")]
        for p, checkpoint in found.items():
            below = [s for s in syncs if s.topic == topic and s.partition == p
                     and s.upstream_offset <= checkpoint.upstream_offset]
            assert below, f"no offset sync at or below {checkpoint}"
            newest = max(below, key=lambda s: s.upstream_offset)
            step = 0 if newest.upstream_offset == checkpoint.upstream_offset else 1
            assert checkpoint.downstream_offset == newest.downstream_offset + step, (checkpoint, newest)
        # ... and committed them to the same group at the target (it has no members there).
        wait_until(lambda: committed(west.bootstrap, group, remote, partitions) == {p: c.downstream_offset
                                                                          for p, c in found.items()},
                   what="group offsets synced to the target", timeout_s=TIMEOUT_S)

        # Connect's internals live on the target Causeway broker: compacted config, offset, status topics.
        for internal in ("mm2-configs.east.internal", "mm2-offsets.east.internal", "mm2-status.east.internal"):
            resource = ConfigResource("topic", internal)
            described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
            assert described["cleanup.policy"].value == "compact", internal
        # Its source task's positions are Connect offset records: the last record of each partition.
        def positions() -> dict[int, int | None]:
            found = {}
            for p in range(25):  # Connect's offsets topic has 25 partitions by default
                for key, value in raw(west.bootstrap, "mm2-offsets.east.internal", p):
                    where = decode_position(key, value)
                    if where is not None and where[:2] == ("east", topic):
                        found[where[2]] = where[3]
            return found
        wait_until(lambda: positions() == {p: (count + 20) // partitions - 1 for p in range(partitions)},
                   what="MM2's source offsets in mm2-offsets.east.internal", timeout_s=TIMEOUT_S)
        configs = [json.loads(value) for key, value in raw(west.bootstrap, "mm2-configs.east.internal")
                   if key.startswith(b"connector-") and value]
        assert {c["properties"]["connector.class"].rsplit(".", 1)[1] for c in configs} >= {
            "MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector"}, configs
        # The Connect worker group (protocol type `connect`) is a live group on Causeway.
        # MM2's default worker group.id is <source>-mm2; librdkafka lists only consumer groups, Kafka's
        # kafka-groups lists every type.
        listed = run_tool("kafka-groups", "--bootstrap-server", west.bootstrap, "--list").check()
        assert ["east-mm2", "Classic", "connect"] in [line.split() for line in listed.lines], listed.stdout
        assert "ERROR" not in mm2.stderr_path.read_text(), mm2.stderr_tail()
    finally:
        pid = mm2.proc.pid
        code = mm2.stop()
    assert code == 0, mm2.stderr_tail()
    assert not Path(f"/proc/{pid}").exists()
    print(f"MM2: {copied_s:.1f} s from start to {count} records copied")

    # The migration path: `causeway mirror` started where MM2 ran reads MM2's positions (Connect's
    # offset records in mm2-offsets.east.internal) and carries on without copying anything again.
    produce(east, topic, 20, partitions, "c")
    mirror = start_mirror(tmp_path, east, west, "east", topic, group)
    try:
        total = (count + 40) // partitions
        wait_until(lambda: all(log_end(west.bootstrap, remote, p) >= total for p in range(partitions)),
                   what="records produced after MM2 stopped", timeout_s=TIMEOUT_S)
        for p in range(partitions):
            assert read_all(west.bootstrap, remote, p) == read_all(east.bootstrap, topic, p), \
                f"partition {p}: re-copied or lost"
    finally:
        stop_mirror(mirror, tmp_path)


def start_mirror(tmp_path: Path, source: BrokerProcess, target: BrokerProcess, alias: str, topic: str,
                 group: str, **settings: object) -> ChildProcess:
    """`causeway mirror` (mm2 mode) from `source` (as `alias`) to `target` (as `west`)."""
    config = tmp_path / f"mirror-{alias}.yaml"
    config.write_text(json.dumps({
        "source": {"alias": alias, "bootstrap": source.bootstrap},
        "target": {"alias": "west", "bootstrap": target.bootstrap},
        "topics": {"include": [topic]}, "groups": {"include": [group]},
        "refresh.topics.interval.seconds": 1, **settings}))
    argv = [sys.executable, "-m", "deploy.cli", "mirror", "--config", str(config)]
    return ChildProcess.start("causeway mirror", argv, log_path=tmp_path / f"mirror-{alias}.log", stdout="discard",
                              cwd=REPO)


def stop_mirror(mirror: ChildProcess, tmp_path: Path) -> None:
    code = mirror.stop(TIMEOUT_S)
    logs = "".join(path.read_text(errors="replace")[-3000:] for path in tmp_path.glob("mirror-*.log"))
    assert code == 0, logs


def checkpoints(broker: BrokerProcess, alias: str) -> dict[int, Checkpoint]:
    """The newest checkpoint per partition in `<alias>.checkpoints.internal` (one group per test)."""
    topic = f"{alias}.checkpoints.internal"
    if log_end(broker.bootstrap, topic, 0) <= 0:
        return {}
    return {c.partition: c
            for c in (Checkpoint.decode(key, value or b"") for key, value in raw(broker.bootstrap, topic))}



# --- formats both ways: `causeway mirror`'s checkpoints, translated by MM2's RemoteClusterUtils ----------------


def test_remote_cluster_utils_translates_causeway_mirror_checkpoints(clusters: tuple[BrokerProcess, BrokerProcess],
                                                                     tmp_path: Path) -> None:
    east, west = clusters
    topic, group, partitions = "payments", "payments-app", 3
    create_topic(east.bootstrap, topic, partitions)
    produce(east, topic, 240, partitions, "p")
    offsets = {0: 80, 1: 33, 2: 0}
    commit(east, group, {(topic, p): o for p, o in offsets.items()})

    mirror = start_mirror(tmp_path, east, west, "south", topic, group, **{
        "emit.checkpoints.interval.seconds": 1, "sync.group.offsets.enabled": False, "offset.lag.max": 100})
    try:
        remote = f"south.{topic}"
        wait_until(lambda: all(log_end(west.bootstrap, remote, p) == 80 for p in range(partitions)),
                   what="the topic mirrored", timeout_s=TIMEOUT_S)

        def checkpoints() -> dict[int, Checkpoint]:
            if log_end(west.bootstrap, "south.checkpoints.internal", 0) <= 0:
                return {}
            return {c.partition: c for c in (Checkpoint.decode(k, v or b"")
                                             for k, v in raw(west.bootstrap, "south.checkpoints.internal"))}
        wait_until(lambda: {p: c.upstream_offset for p, c in checkpoints().items()} == offsets,
                   what="causeway mirror's checkpoints", timeout_s=TIMEOUT_S)
        written = checkpoints()
    finally:
        stop_mirror(mirror, tmp_path)

    run = run_java_program(TRANSLATE, west.bootstrap, "south", group, timeout=TIMEOUT_S)
    translated = {(entry["topic"], entry["partition"]): entry["offset"]
                  for entry in map(json.loads, run.lines)}
    assert translated == {(remote, p): c.downstream_offset for p, c in written.items()}, run.stdout
    # The remote topic holds the same records at the same offsets here (mirrored from offset 0), so a
    # consumer moved to the translated offsets reads from where it stopped, or a little before.
    for p, offset in offsets.items():
        assert translated[(remote, p)] <= offset


def test_acl_apis_answer_as_kafka_without_an_authorizer(clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    """MM2 syncs topic ACLs by default (sync.topic.acls.enabled): DescribeAcls must answer as a Kafka
    broker without `authorizer.class.name` does, SECURITY_DISABLED, which MM2 takes as "nothing to
    sync" (a broker that does not list the API makes it log an ERROR every round). kafka-acls says so."""
    east, _ = clusters
    for action in (("--list",), ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t")):
        run = run_tool("kafka-acls", "--bootstrap-server", east.bootstrap, *action)
        assert run.returncode == 1, run.stdout
        assert run.stdout.splitlines()[0] == ("Error while executing ACL command: "
                                              "org.apache.kafka.common.errors.SecurityDisabledException: "
                                              "No Authorizer is configured."), (action, run.stdout, run.stderr)


# --- `causeway mirror` from a real Apache Kafka broker ---------------------------------------------------------


def test_causeway_mirror_from_apache_kafka_to_causeway(clusters: tuple[BrokerProcess, BrokerProcess],
                                                      tmp_path: Path) -> None:
    """Apache Kafka 4.x (KRaft, bench/peers) as the source: its records, as Kafka stored them, arrive
    identical in `kafka.<topic>` on Causeway, and the group's committed offsets are checkpointed and
    synced to the target group, with the offset syncs kept in Kafka's own compacted topic."""
    _, west = clusters
    topic, group, partitions = "ledger", "ledger-app", 3
    with KafkaBroker(tmp_path / "kafka") as kafka:
        source = BrokerProcess(tmp_path / "unused")  # only its bootstrap is used by the helpers below
        source.bootstrap = kafka.bootstrap
        create_topic(source.bootstrap, topic, partitions, {"cleanup.policy": "delete", "retention.ms": "3600000"})
        produce(source, topic, 150, partitions, "k")

        def committing() -> bool:  # Kafka makes __consumer_offsets on first use: NOT_COORDINATOR until then
            try:
                commit(source, group, {(topic, 0): 50, (topic, 1): 7, (topic, 2): 0})
            except KafkaException as exc:
                if exc.args[0].code() not in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                              KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
                    raise
                return False
            return True
        wait_until(committing, what="the group's offsets committed at Kafka", timeout_s=TIMEOUT_S)
        mirror = start_mirror(tmp_path, source, west, "kafka", topic, group, **{
            "emit.checkpoints.interval.seconds": 1, "sync.group.offsets.interval.seconds": 1})
        try:
            remote = f"kafka.{topic}"
            wait_until(lambda: all(log_end(west.bootstrap, remote, p) == 50 for p in range(partitions)),
                       what="Kafka's records on Causeway", timeout_s=TIMEOUT_S)
            for p in range(partitions):
                assert read_all(west.bootstrap, remote, p) == read_all(source.bootstrap, topic, p), \
                    f"partition {p} differs"
            # Offset syncs on the source (Kafka), in MM2's topic; the checkpointed group on the target.
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            syncs_topic = ConfigResource("topic", "mm2-offset-syncs.west.internal")
            assert admin.describe_configs([syncs_topic])[syncs_topic].result(timeout=TIMEOUT_S)[
                "cleanup.policy"].value == "compact"
            # The group's offsets: checkpointed, translated by MM2's rule (exact at an offset sync, such as
            # the log end of an idle partition; else one past the sync below), and synced to the target.
            def settled() -> bool:
                found = {p: (c.upstream_offset, c.downstream_offset) for p, c in checkpoints(west, "kafka").items()}
                return (found.get(0), found.get(2)) == ((50, 50), (0, 0)) and found.get(1, (0, 0))[0] == 7
            wait_until(settled, what="the group's checkpoints, partition 0 translated exactly once idle",
                       timeout_s=TIMEOUT_S)
            translated = {p: c.downstream_offset for p, c in checkpoints(west, "kafka").items()}
            assert 0 < translated[1] <= 7, translated
            wait_until(lambda: committed(west.bootstrap, group, remote, partitions) == translated,
                       what="the group's offsets synced to Causeway", timeout_s=TIMEOUT_S)
            remote_config = ConfigResource("topic", remote)
            target_admin = AdminClient({"bootstrap.servers": west.bootstrap})  # held: its futures need the handle
            described = target_admin.describe_configs([remote_config])[remote_config].result(timeout=TIMEOUT_S)
            assert described["retention.ms"].value == "3600000"
        finally:
            stop_mirror(mirror, tmp_path)
