"""Link mode end to end, as a user runs it: `causeway up examples/dr-link.yaml`, real processes.

The mirror topics at west carry east's records at east's offsets (every column equal), refuse
producers, survive a SIGKILLed mirror (the supervisor restarts it) without a duplicate or a
gap, carry a group's committed offsets over unchanged (one last time at the promotion, so the
group moved to west re-reads nothing), and become writable once `causeway mirror promote` has
promoted them; promoting again says they were promoted already.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from deploy.launcher.control import alive
from tests.support.consume import committed, first_offsets, read_partition
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/dr-link.yaml"
MIRROR = "east-to-west"
TOPICS = {"orders": 3, "payments": 2}
DEADLINE_S = 90.0


def causeway(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def status(state: Path) -> dict[str, Any]:
    done = causeway("status", "--json", "--state-dir", str(state))
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    """Idempotent librdkafka writes with keys, headers and the producer's timestamps; raises
    KafkaException with the first delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for i in range(start, start + count):
        producer.produce(topic, key=b"key-%d" % (i % 7), value=b"%s-%d" % (topic.encode(), i), partition=i % partitions,
                         headers=[("seq", b"%d" % i)], on_delivery=delivered)
    assert producer.flush(30) == 0
    if errors:
        raise KafkaException(errors[0])


def ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int] | None:
    """Each partition's log end (high watermark), None while the topic is not there (yet)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or len(metadata.partitions) < partitions:
            return None
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def rows(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[object, ...]]]:
    """Every record of every partition, every column librdkafka shows."""
    out: dict[int, list[tuple[object, ...]]] = {}
    for p in range(partitions):
        out[p] = [(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp(), m.headers())
                  for m in read_partition(bootstrap, topic, p)]
    return out


def caught_up(east: str, west: str) -> bool:
    return all(ends(west, t, n) == ends(east, t, n) for t, n in TOPICS.items())


@contextmanager
def copied_topology(tmp_path: Path, records: int) -> Iterator[tuple[Path, str, str]]:
    """The example up (-d) with `records` records per partition-spread topic produced at east and
    copied to west: (state dir, east's bootstrap, west's). `down` on the way out, checked."""
    state = tmp_path / "state"
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        doc = status(state)
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        for topic, partitions in TOPICS.items():
            produce(east, topic, partitions, records)
        wait_until(lambda: caught_up(east, west), what="the mirror topics at west to reach east's log ends",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        yield state, east, west
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr


def assert_identical_copies(east: str, west: str) -> int:
    """West's copy equals east's record for record, offsets included; returns the record count."""
    total = 0
    for topic, partitions in TOPICS.items():
        source, copy = rows(east, topic, partitions), rows(west, topic, partitions)
        assert copy == source, f"{topic}: the copy differs from the source"
        for p, records in source.items():
            assert [r[2] for r in records] == list(range(len(records))), f"{topic}-{p}: a gap or a repeat"
            total += len(records)
    return total


def test_link_mode_through_causeway_up(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = causeway("up", EXAMPLE, "-d", "--state-dir", str(state))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"mirror {MIRROR} (link): east -> west (as <topic>, read-only mirror topics)" in up.stdout, up.stdout
        doc = status(state)
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        assert doc["mirrors"][MIRROR]["mode"] == "link"
        config = json.loads((state / "mirrors" / f"{MIRROR}.yaml").read_text())
        assert config["mode"] == "link" and "naming" not in config
        pids = [doc["pid"], doc["wan"]["pid"], doc["mirrors"][MIRROR]["pid"]] + [
            b["pid"] for c in doc["clusters"].values() for b in c["brokers"]]

        # Records produced at east arrive at west under the same names, at the same offsets.
        for topic, partitions in TOPICS.items():
            produce(east, topic, partitions, 60)
        wait_until(lambda: caught_up(east, west), what="the mirror topics at west to reach east's log ends",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        assert assert_identical_copies(east, west) == 120
        table = causeway("status", "--state-dir", str(state)).stdout
        header = next(line for line in table.splitlines() if line.startswith("MIRROR"))
        assert header.split()[:2] == ["MIRROR", "MODE"], table
        assert next(line for line in table.splitlines() if line.startswith(MIRROR)).split()[1] == "link", table

        # A mirror topic refuses producers.
        with pytest.raises(KafkaException) as refused:
            produce(west, "orders", 3, 1)
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST

        # A group commits at east; its offsets arrive at west unchanged.
        group = "billing"
        commits = {0: 7, 1: 3, 2: 12}
        consumer = Consumer({"bootstrap.servers": east, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in commits.items()], asynchronous=False)
        consumer.close()
        wait_until(lambda: committed(west, group, "orders", 3, timeout_s=10) == commits,
                   what="the group's committed offsets at west", timeout_s=DEADLINE_S, interval_s=0.5)

        # SIGKILL the mirror while east takes more writes: the supervisor restarts it, and the
        # copy goes on from west's log end, with no duplicate and no gap.
        victim = doc["mirrors"][MIRROR]["pid"]
        produce(east, "orders", 3, 30, start=60)
        os.kill(victim, signal.SIGKILL)
        produce(east, "orders", 3, 30, start=90)
        produce(east, "payments", 2, 20, start=60)

        def restarted() -> bool:
            mirror = status(state)["mirrors"][MIRROR]
            return bool(mirror["alive"]) and mirror["restarts"] >= 1 and mirror["pid"] != victim

        wait_until(restarted, what="the supervisor to restart the mirror", timeout_s=DEADLINE_S, interval_s=0.5)
        pids.append(status(state)["mirrors"][MIRROR]["pid"])
        wait_until(lambda: caught_up(east, west), what="the restarted mirror to catch up",
                   timeout_s=DEADLINE_S, interval_s=0.5)
        assert assert_identical_copies(east, west) == 200

        # A consumer of the group that moves to west resumes exactly where it committed at east.
        member = Consumer({"bootstrap.servers": west, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        assert first_offsets(member, "orders", set(commits)) == commits

        # Promotion (a planned switch-over: east's producers have stopped): then west takes writes.
        # The group reads on at east after the mirror's last copy of its offsets: the mirror is
        # frozen (SIGSTOP), so only the promotion's own last copy can bring them to west.
        mirror_pid = status(state)["mirrors"][MIRROR]["pid"]
        final = {0: 35, 1: 38, 2: 39}
        os.kill(mirror_pid, signal.SIGSTOP)
        try:
            consumer = Consumer({"bootstrap.servers": east, "group.id": group, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in final.items()], asynchronous=False)
            consumer.close()
            before = ends(west, "orders", 3)
            promoted = causeway("mirror", "promote", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state),
                                "--timeout", "60")
        finally:
            os.kill(mirror_pid, signal.SIGCONT)
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr
        assert "promoted 2 topic(s) at" in promoted.stdout and "orders, payments" in promoted.stdout, promoted.stdout
        assert f"group {group}: offsets copied one last time: orders-0 35, orders-1 38, orders-2 39" in promoted.stdout
        # Moved to west, the group resumes where it committed at east: it re-reads nothing.
        member = Consumer({"bootstrap.servers": west, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        assert first_offsets(member, "orders", set(final)) == final
        produce(west, "orders", 3, 3, start=1000)
        after = ends(west, "orders", 3)
        # One record each, after the promotion marker (one offset) the first local write brings.
        assert before is not None and after == {p: before[p] + 2 for p in range(3)}
        again = causeway("mirror", "promote", EXAMPLE, "--mirror", MIRROR, "--state-dir", str(state), "--failover")
        # Run again (a failover after the promotion): nothing left to do, and it says so.
        assert again.returncode == 0, again.stdout + again.stderr
        assert "orders, payments promoted already" in again.stdout, again.stdout
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(alive(pid) for pid in pids)
