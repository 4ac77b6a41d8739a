"""`causeway produce` and `causeway consume` against a real broker, cross-checked with
confluent-kafka: what one writes the other reads, keys, partitions and offsets included."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client import TopicPartition, fetch, open_client
from broker.client.partitioner import kafka_partition
from broker.protocol.records import Compression, split_batches
from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildProcess
from deploy.cli import main
from tests.support.consume import group_offsets

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0


def cli(broker: BrokerProcess, command: str, *args: str, stdin: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    with open(stdin or "/dev/null", "rb") as source:
        return subprocess.run([sys.executable, "-m", "deploy.cli", command, "--bootstrap-server", broker.bootstrap,
                               *args], stdin=source, capture_output=True, text=True, timeout=120, cwd=REPO)


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: the future dies with its client
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of the first `count` records, read by librdkafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    c.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return sorted(got)


async def batches_of(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    """(records, compression, has producer id) of every batch in the partition, as stored."""
    async with open_client(bootstrap) as client:
        got = (await fetch(client, {TopicPartition(topic, partition): 0}))[TopicPartition(topic, partition)]
    return [(h.records_count, h.compression, h.has_producer_id) for _, h in split_batches(got.records)]


# -- produce ----------------------------------------------------------------------------------


def test_produce_keyed_lines_read_back_by_confluent(group_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    create(bootstrap, "keyed", 3)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"".join(b"user-%d:clicked %d\n" % (i % 17, i) for i in range(300)))
    done = cli(group_broker, "produce", "--topic", "keyed", "--property", "parse.key=true",
               "--property", "key.separator=:", stdin=lines)
    assert done.returncode == 0, done.stderr

    got = read_all(bootstrap, "keyed", 3, 300)
    assert len(got) == 300
    assert sorted((k, v) for _, _, k, v in got) == sorted((b"user-%d" % (i % 17), b"clicked %d" % i)
                                                          for i in range(300))
    # Each key in the partition Kafka's Java producer would choose, and librdkafka's murmur2 one too.
    reference = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    chosen: dict[bytes, int] = {}
    for key in {k for _, _, k, _ in got}:
        assert key is not None
        reference.produce("keyed", key=key, value=b"reference",
                          on_delivery=lambda err, msg: chosen.__setitem__(msg.key(), msg.partition()))
    assert reference.flush(30) == 0
    assert all(p == kafka_partition(k, 3) == chosen[k] for p, _, k, _ in got if k is not None)
    # Order kept per key, as offsets grow.
    for key in chosen:
        values = [int(v.split()[1]) for _, _, k, v in got if k == key]
        assert values == sorted(values)

    # Batched (a file is read at once: one batch per partition), idempotent by default.
    for p in range(3):
        stored = trio.run(batches_of, bootstrap, "keyed", p)
        assert [(n, has_pid) for n, _, has_pid in stored[:1]] == [(sum(1 for q, *_ in got if q == p), True)]


def test_produce_to_one_partition_compressed_without_idempotence(group_broker: BrokerProcess,
                                                                 tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    create(bootstrap, "plain", 3)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"first\r\nsecond\n\nthird without newline")  # CRLF, an empty line, no final newline
    done = cli(group_broker, "produce", "--topic", "plain", "--partition", "1", "--compression-type", "zstd",
               "--acks", "1", stdin=lines)
    assert done.returncode == 0, done.stderr
    got = read_all(bootstrap, "plain", 3, 4)
    assert got == [(1, 0, None, b"first"), (1, 1, None, b"second"), (1, 2, None, b""),
                   (1, 3, None, b"third without newline")]
    # The unterminated last line is known to be whole only at end of input: a batch of its own.
    assert trio.run(batches_of, bootstrap, "plain", 1) == [(3, Compression.ZSTD, False), (1, Compression.ZSTD, False)]


def test_produce_stops_at_a_line_without_separator(group_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    create(bootstrap, "strict", 1)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"a:1\nb:2\nno separator here\nc:3\n")
    done = cli(group_broker, "produce", "--topic", "strict", "--property", "parse.key=true",
               "--property", "key.separator=:", stdin=lines)
    assert done.returncode == 1
    assert "line 3" in done.stderr and "no separator here" in done.stderr
    assert [(k, v) for *_, k, v in read_all(bootstrap, "strict", 1, 2)] == [(b"a", b"1"), (b"b", b"2")]

    lenient = cli(group_broker, "produce", "--topic", "strict", "--property", "parse.key=true",
                  "--property", "key.separator=:", "--property", "ignore.error=true", stdin=lines)
    assert lenient.returncode == 0, lenient.stderr
    assert [(k, v) for *_, k, v in read_all(bootstrap, "strict", 1, 6)][2:] == [
        (b"a", b"1"), (b"b", b"2"), (None, b"no separator here"), (b"c", b"3")]

    missing = cli(group_broker, "produce", "--topic", "nowhere", stdin=lines)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


# -- consume ----------------------------------------------------------------------------------


def fill_with_confluent(bootstrap: str, topic: str, per_partition: int) -> None:
    create(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(2):
        for i in range(per_partition):
            producer.produce(topic, key=b"k%d-%d" % (p, i), value=b"v%d-%d" % (p, i), partition=p,
                             timestamp=1_700_000_000_000 + i, headers=[("h", b"x")] if i == 0 else None)
    assert producer.flush(30) == 0


def test_consume_prints_what_confluent_produced(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    fill_with_confluent(bootstrap, "events", 5)
    done = cli(group_broker, "consume", "--topic", "events", "--from-beginning", "--max-messages", "10",
               "--property", "print.key=true", "--property", "print.partition=true",
               "--property", "print.offset=true", "--property", "print.timestamp=true",
               "--property", "key.separator=|")
    assert done.returncode == 0, done.stderr
    assert "Processed a total of 10 messages" in done.stderr
    printed = sorted(done.stdout.splitlines())
    assert printed == sorted(f"CreateTime:{1_700_000_000_000 + i}|Partition:{p}|Offset:{i}|k{p}-{i}|v{p}-{i}"
                             for p in range(2) for i in range(5))

    one = cli(group_broker, "consume", "--topic", "events", "--partition", "1", "--offset", "3",
              "--max-messages", "2", "--property", "print.headers=true")
    assert one.stdout.splitlines() == ["NO_HEADERS\tv1-3", "NO_HEADERS\tv1-4"]
    first = cli(group_broker, "consume", "--topic", "events", "--partition", "0", "--offset", "earliest",
                "--max-messages", "1", "--property", "print.headers=true", "--property", "print.value=false")
    assert first.stdout == "h:x\n"

    # No --max-messages: --timeout-ms ends the read once nothing more arrives.
    idle = cli(group_broker, "consume", "--topic", "events", "--from-beginning", "--timeout-ms", "500")
    assert idle.returncode == 0, idle.stderr
    assert sorted(idle.stdout.split()) == sorted(f"v{p}-{i}" for p in range(2) for i in range(5))
    latest = cli(group_broker, "consume", "--topic", "events", "--timeout-ms", "300")  # from the log end
    assert (latest.returncode, latest.stdout) == (0, "")


def test_consume_with_a_group_resumes_where_it_stopped(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    fill_with_confluent(bootstrap, "events", 5)
    first = cli(group_broker, "consume", "--topic", "events", "--partition", "0", "--group", "tail",
                "--from-beginning", "--max-messages", "3")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["v0-0", "v0-1", "v0-2"]
    assert group_offsets(bootstrap, "tail", "events") == {0: 3}  # after what it printed, no more

    rest = cli(group_broker, "consume", "--topic", "events", "--group", "tail", "--from-beginning",
               "--timeout-ms", "500")
    assert rest.returncode == 0, rest.stderr
    assert sorted(rest.stdout.split()) == ["v0-3", "v0-4", *(f"v1-{i}" for i in range(5))]
    assert group_offsets(bootstrap, "tail", "events") == {0: 5, 1: 5}

    # A librdkafka member of the same group carries on from there: nothing left to read...
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe(["events"])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            msg = c.poll(0.1)
            assert msg is None or msg.error() is not None, "a record the group had read came again"
        assert [tp.offset for tp in c.committed(c.assignment(), 30)] == [5, 5]
        # ... and while it is a member, the console consumer's commit is refused, loudly.
        late = Producer({"bootstrap.servers": bootstrap})
        late.produce("events", value=b"late", partition=0)
        assert late.flush(30) == 0
        busy = cli(group_broker, "consume", "--topic", "events", "--group", "tail", "--timeout-ms", "500")
        assert busy.returncode == 1 and "UNKNOWN_MEMBER_ID" in busy.stderr
        assert group_offsets(bootstrap, "tail", "events") == {0: 5, 1: 5}
    finally:
        c.close()


def test_consume_commits_on_sigterm(group_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    fill_with_confluent(bootstrap, "events", 5)
    proc = ChildProcess.start("causeway consume", [
        sys.executable, "-m", "deploy.cli", "consume", "--bootstrap-server", bootstrap, "--topic", "events",
        "--group", "stopped", "--from-beginning"], log_path=tmp_path / "consume.log", cwd=REPO)
    try:
        assert proc.stdout is not None
        printed = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while printed.count(b"\n") < 10:  # every record shown: now stop it
                assert sel.select(timeout=TIMEOUT_S), f"only {printed!r} after {TIMEOUT_S}s"
                data = os.read(proc.stdout.fileno(), 65536)
                assert data, proc.log_tail()
                printed += data
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        proc.kill()
    assert group_offsets(bootstrap, "stopped", "events") == {0: 5, 1: 5}


@pytest.mark.parametrize(("args", "message"), [
    (["consume", "--topic", "t", "--offset", "5"], "--offset N needs --partition"),
    (["consume", "--topic", "t", "--offset", "soon", "--partition", "0"], "--offset wants a number"),
    (["consume", "--topic", "t", "--offset", "earliest", "--from-beginning"], "exclude each other"),
    (["consume", "--topic", "t", "--offset", "latest", "--group", "g"], "exclude each other"),
    (["consume", "--topic", "t", "--property", "print.keys=true"], "does not know property 'print.keys'"),
    (["consume", "--topic", "t", "--property", "print.key=yes"], "must be true or false"),
    (["produce", "--topic", "t", "--acks", "1", "--idempotence"], "needs --acks all"),
    (["produce", "--topic", "t", "--property", "parse.key"], "wants KEY=VALUE"),
])
def test_bad_command_lines_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: these fail before anything is contacted.
    assert main([args[0], "--bootstrap-server", "127.0.0.1:1", *args[1:]]) == 2
    assert message in capsys.readouterr().err
