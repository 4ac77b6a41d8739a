"""Apache Kafka's Java producer and consumer (4.x) against a real Causeway broker.

The clients are driven through Kafka's own VerifiableProducer and VerifiableConsumer (the tools
Kafka's system tests use): they print one JSON line per acked send, consumed record, commit and
rebalance callback, so every claim below is checked on what the Java client saw, and the stored
batches are read back from the broker's segment files. Each JVM start costs ~1 s: the tests keep
to a few per check (bench/peers makes each tool's class-data archive on its first run).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers.events import Event, ToolProcess, start_tool
from broker.protocol.records import Compression, split_batches
from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat
TIMEOUT_S = 60.0
CLIENTS_LOG4J2 = Path(__file__).parents[2] / "bench" / "peers" / "clients-log4j2.properties"
PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"


def create_topic(causeway: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": causeway.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=TIMEOUT_S)


def properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def producer(causeway: BrokerProcess, tmp_path: Path, name: str, topic: str, *args: str,
             settings: dict[str, str]) -> ToolProcess:
    config = properties(tmp_path / f"{name}.properties", settings)
    return start_tool(PRODUCER, "--bootstrap-server", causeway.bootstrap, "--topic", topic,
                      "--command-config", str(config), *args, stderr_path=tmp_path / f"{name}.stderr")


def consumer(causeway: BrokerProcess, tmp_path: Path, name: str, topic: str, group: str, *args: str,
             assignor: str = COOPERATIVE, settings: dict[str, str] | None = None) -> ToolProcess:
    config = properties(tmp_path / f"{name}.properties", {"client.id": name, **(settings or {})})
    return start_tool(CONSUMER, "--bootstrap-server", causeway.bootstrap, "--topic", topic, "--group-id", group,
                      "--assignment-strategy", assignor, "--verbose", "--command-config", str(config), *args,
                      stderr_path=tmp_path / f"{name}.stderr", log4j2=CLIENTS_LOG4J2)


def acked(tool: ToolProcess) -> dict[tuple[int, int], str]:
    """(partition, offset) -> value of every send the producer saw acknowledged."""
    return {(e["partition"], e["offset"]): e["value"] for e in tool.named("producer_send_success")}


def consumed(tool: ToolProcess) -> list[tuple[int, int, str]]:
    return [(e["partition"], e["offset"], e["value"]) for e in tool.named("record_data")]


def partitions_of(event: Event) -> set[int]:
    return {p["partition"] for p in event["partitions"]}


def rebalance_events(tool: ToolProcess) -> list[Event]:
    return [e for e in tool.events if e.get("name") in ("partitions_assigned", "partitions_revoked")]


def owned(tool: ToolProcess) -> set[int]:
    """The partitions the consumer holds after the callbacks so far (incremental under cooperative)."""
    held: set[int] = set()
    for event in rebalance_events(tool):
        if event["name"] == "partitions_assigned":
            held |= partitions_of(event)
        else:
            held -= partitions_of(event)
    return held


def stored_batches(causeway: BrokerProcess, topic: str, partition: int) -> list[Any]:
    """The batch headers as the broker stored them, read from its segment files."""
    headers = []
    for segment in sorted((causeway.data_dir / f"{topic}-{partition}").glob("*.log")):
        headers += [header for _, header in split_batches(segment.read_bytes())]
    return headers


# --- the idempotent producer, every codec -----------------------------------------------------------------------


CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def test_idempotent_producer_every_codec_read_back_by_the_java_consumer(causeway: BrokerProcess,
                                                                        tmp_path: Path) -> None:
    topic, count = "java-codecs", 300
    create_topic(causeway, topic, 2)
    producers = {
        codec: producer(causeway, tmp_path, f"producer-{codec}", topic, "--max-messages", str(count),
                        "--value-prefix", str(prefix), "--repeating-keys", "16",
                        settings={"compression.type": codec, "enable.idempotence": "true", "acks": "all",
                                  # VerifiableProducer defaults retries to 0, which idempotence refuses.
                                  "retries": "2147483647", "max.in.flight.requests.per.connection": "5",
                                  "linger.ms": "20", "batch.size": "4096"})
        for prefix, codec in enumerate(CODECS, 1)}
    sent: dict[str, dict[tuple[int, int], str]] = {}
    for codec, tool in producers.items():
        code = tool.wait(TIMEOUT_S)
        assert code == 0, tool.stderr_tail()
        assert not tool.named("producer_send_error"), tool.named("producer_send_error")[:3]
        (summary,) = tool.named("tool_data")
        assert (summary["sent"], summary["acked"]) == (count, count), summary
        sent[codec] = acked(tool)
        assert sorted(int(value.split(".")[1]) for value in sent[codec].values()) == list(range(count))

    # One offset per acked send, no gap and no duplicate per partition: every send landed once.
    everything = {key: value for per_codec in sent.values() for key, value in per_codec.items()}
    assert len(everything) == len(CODECS) * count
    for partition in (0, 1):
        offsets = sorted(offset for p, offset in everything if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition}: offsets not dense"

    # The broker kept each producer's batches as sent: its codec, its producer id, idempotent sequences.
    codec_of = {key: codec for codec, per_codec in sent.items() for key in per_codec}
    producer_ids: dict[str, set[int]] = {codec: set() for codec in CODECS}
    for partition in (0, 1):
        for header in stored_batches(causeway, topic, partition):
            codecs = {codec_of[(partition, o)] for o in range(header.base_offset, header.last_offset + 1)}
            assert len(codecs) == 1, f"batch at {header.base_offset} mixes producers {codecs}"
            (codec,) = codecs
            assert header.compression == CODECS[codec], (codec, header)
            assert header.producer_id >= 0 and header.base_sequence >= 0, header
            producer_ids[codec].add(header.producer_id)
    assert all(len(ids) == 1 for ids in producer_ids.values()), producer_ids
    assert len({next(iter(ids)) for ids in producer_ids.values()}) == len(CODECS), producer_ids

    # The Java consumer decodes every codec and sees exactly what was acked, at the acked offsets.
    with consumer(causeway, tmp_path, "codec-reader", topic, "java-codecs-reader", "--max-messages",
                  str(len(everything))) as reader:
        assert reader.wait(TIMEOUT_S) == 0, reader.stderr_tail()
        seen = consumed(reader)
    assert len(seen) == len(everything)
    assert {(p, o): v for p, o, v in seen} == everything


# --- consumer groups: the cooperative-sticky assignor ------------------------------------------------------------


def check_delivery(acks: dict[tuple[int, int], str], readers: list[ToolProcess]) -> Counter[tuple[int, int]]:
    """Nothing acked is missing, every value is the acked one, and a record is read again only when
    no commit had covered it yet: a new owner resumes from the group's committed offset, so only
    records read past the last commit before the handover come twice. The JVMs share the clock, so
    their event timestamps order reads and commits. Returns how often each record was read."""
    reads: Counter[tuple[int, int]] = Counter()
    timeline: list[tuple[int, int, int]] = []  # (time, partition, offset) of every read
    commits: list[tuple[int, int, int]] = []  # (time, partition, committed offset)
    for reader in readers:
        for event in reader.named("record_data"):
            partition, offset = event["partition"], event["offset"]
            assert acks.get((partition, offset), event["value"]) == event["value"], event
            reads[(partition, offset)] += 1
            timeline.append((event["timestamp"], partition, offset))
        commits += [(e["timestamp"], o["partition"], o["offset"]) for e in reader.named("offsets_committed")
                    if e["success"] for o in e["offsets"]]
    missing = sorted(set(acks) - set(reads))
    assert not missing, f"{len(missing)} acked records never consumed, e.g. {missing[:5]}"
    first_read: set[tuple[int, int]] = set()
    for at, partition, offset in sorted(timeline):
        if (partition, offset) in first_read:
            covered = max((o for t, p, o in commits if p == partition and t < at), default=0)
            assert offset >= covered, f"{partition}@{offset} read again though offset {covered} was committed"
        first_read.add((partition, offset))
    return reads


def test_cooperative_sticky_rebalance_when_a_consumer_joins_and_leaves(causeway: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    topic, group = "java-coop", "java-coop-group"
    create_topic(causeway, topic, 4)
    settings = {"heartbeat.interval.ms": "500", "enable.idempotence": "true"}
    with producer(causeway, tmp_path, "coop-producer", topic, "--throughput", "300", "--repeating-keys", "64",
                  settings={"acks": "all", "linger.ms": "5", "retries": "2147483647", **settings}) as source:
        first = consumer(causeway, tmp_path, "coop-a", topic, group)
        second: ToolProcess | None = None
        try:
            first.wait_for(lambda _: owned(first) == {0, 1, 2, 3}, "all four partitions for the first member")
            first.wait_for(lambda _: len(first.named("record_data")) >= 50, "records before the join")
            before_join = len(rebalance_events(first))

            second = consumer(causeway, tmp_path, "coop-b", topic, group)
            second.wait_for(lambda _: len(owned(second)) == 2, "two partitions for the joining member")
            first.wait_for(lambda _: len(owned(first)) == 2, "the first member giving up two partitions")
            second.wait_for(lambda _: len(second.named("record_data")) >= 20, "records on the joining member")
            moved = owned(second)
            # Cooperative: the first member gave up only what moved, in one revocation, and kept the rest
            # (an eager assignor revokes everything and reassigns).
            joined = rebalance_events(first)[before_join:]
            revoked = [partitions_of(e) for e in joined if e["name"] == "partitions_revoked"]
            assert revoked == [moved], joined
            assert owned(first) == {0, 1, 2, 3} - moved

            before_leave = len(rebalance_events(first))
            assert second.stop() == 0, second.stderr_tail()
            first.wait_for(lambda _: owned(first) == {0, 1, 2, 3}, "the leaver's partitions back on the first member")
            left = rebalance_events(first)[before_leave:]
            assert [e["name"] for e in left] == ["partitions_assigned"] and partitions_of(left[0]) == moved, left

            assert source.stop() == 0, source.stderr_tail()
            acks = acked(source)
            assert len(acks) >= 100, f"only {len(acks)} records acked"
            last = {p: max(o for q, o in acks if q == p) for p, _ in acks}
            first.wait_for(lambda _: all(max((o for q, o, _ in consumed(first) if q == p), default=-1) >= end
                                         for p, end in last.items()), "every acked record consumed")
            assert first.stop() == 0, first.stderr_tail()
        finally:
            first.stop()
            if second is not None:
                second.stop()
    reads = check_delivery(acks, [first, second])
    assert {p for p, _ in reads} == {0, 1, 2, 3}
    assert {p for p, _, _ in consumed(second)} == moved


# --- static membership -------------------------------------------------------------------------------------------


GENERATION = re.compile(r"Successfully joined group with generation Generation\{generationId=(\d+)")


def generations(tool: ToolProcess) -> list[int]:
    return [int(n) for n in GENERATION.findall(tool.stderr_path.read_text(errors="replace"))]


def test_static_member_restart_within_session_timeout_keeps_its_assignment(causeway: BrokerProcess,
                                                                           tmp_path: Path) -> None:
    """group.instance.id (KIP-345): a static member that restarts within session.timeout.ms gets its
    old partitions back in the same generation; the other member sees no rebalance at all. The eager
    range assignor makes any rebalance visible as a revocation on every member."""
    topic, group = "java-static", "java-static-group"
    create_topic(causeway, topic, 2)
    settings = {"heartbeat.interval.ms": "500"}

    def send(count: int, tag: str) -> None:
        client = Producer({"bootstrap.servers": causeway.bootstrap, "linger.ms": 5})
        for i in range(count):
            client.produce(topic, value=f"{tag}{i}".encode(), partition=i % 2)
        assert client.flush(TIMEOUT_S) == 0

    def static(name: str, instance: str) -> ToolProcess:
        return consumer(causeway, tmp_path, name, topic, group, "--group-instance-id", instance,
                        "--session-timeout", "30000", assignor=RANGE, settings=settings)

    send(20, "before")
    one = static("static-1", "instance-1")
    other = static("static-2", "instance-2")
    restarted: ToolProcess | None = None

    def holds_one(member: ToolProcess) -> None:
        member.wait_for(lambda _: len(owned(member)) == 1, f"one partition for {member.name}")

    def reads_new_records(member: ToolProcess) -> None:
        member.wait_for(lambda _: any(v.startswith("after") for _, _, v in consumed(member)),
                        f"new records on {member.name}")

    try:
        for member in (one, other):
            holds_one(member)
        kept = owned(one)
        assert kept | owned(other) == {0, 1}
        generation = generations(one)[-1]
        assert generations(other)[-1] == generation
        quiet_from = len(rebalance_events(other))

        assert one.stop() == 0, one.stderr_tail()
        assert "LeaveGroup" not in one.stderr_path.read_text(), "a static member must not leave on close"
        again = restarted = static("static-1-again", "instance-1")
        again.wait_for(lambda _: owned(again) == kept, "the restarted member's old partition")
        assert generations(again) == [generation], (generations(again), generation)

        send(20, "after")
        for member in (again, other):
            reads_new_records(member)
        assert rebalance_events(other)[quiet_from:] == [], rebalance_events(other)[quiet_from:]
        assert generations(other)[-1] == generation

        admin = AdminClient({"bootstrap.servers": causeway.bootstrap})  # held: its futures need the handle
        description = admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT_S)
        assert sorted(m.group_instance_id for m in description.members) == ["instance-1", "instance-2"]
    finally:
        started: list[ToolProcess | None] = [one, other, restarted]
        for process in started:
            if process is not None:
                process.stop()
