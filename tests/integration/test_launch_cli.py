"""`causeway up -d`, `status`, `down` as a user runs them, on the two-dc example."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from deploy.launcher.control import alive
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def test_up_detached_status_and_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = causeway("up", "examples/two-dc.yaml", "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "cluster east (datacenter east): bootstrap 127.0.0.1:" in up.stdout
        assert "from datacenter west, through the WAN link: 127.0.0.1:" in up.stdout

        again = causeway("up", "examples/two-dc.yaml", "-d", "--state-dir", str(state))
        assert again.returncode == 1 and "already running" in again.stderr  # no twins

        report = causeway("status", "--json", "--state-dir", str(state))
        assert report.returncode == 0, report.stderr
        doc = json.loads(report.stdout)
        assert set(doc["clusters"]) == {"east", "west"}
        for cluster in doc["clusters"].values():
            assert cluster["healthy"] and cluster["bootstrap"] and cluster["brokers"][0]["pid"]
        assert doc["wan"]["api"] and set(doc["mirrors"]) == {"east-to-west"}
        mirror = doc["mirrors"]["east-to-west"]
        assert mirror["alive"] and (mirror["source"], mirror["target"]) == ("east", "west")
        pids = [doc["pid"], doc["wan"]["pid"], mirror["pid"]] + [
            c["brokers"][0]["pid"] for c in doc["clusters"].values()]

        # Records produced in east arrive in west as east.orders, across the emulated link.
        sent = produce_records(doc["clusters"]["east"]["bootstrap"], "orders", 60)
        assert read_records(doc["clusters"]["west"]["bootstrap"], "east.orders", 60) == sent
        table = causeway("status", "--state-dir", str(state))
        assert "east" in table.stdout and "yes" in table.stdout and "east-to-west" in table.stdout
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "stopped launcher" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert causeway("status", "--state-dir", str(state)).returncode == 1  # nothing running


def produce_records(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {}
    for i in range(count):
        producer.produce(topic, value=b"record-%d" % i, partition=i % 3)
        sent.setdefault(i % 3, []).append(b"record-%d" % i)
    assert producer.flush(30) == 0
    return sent


def read_records(bootstrap: str, topic: str, count: int, deadline_s: float = 90) -> dict[int, list[bytes]]:
    """Every partition of `topic` from the beginning, until `count` records (or the deadline)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "west-check", "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + deadline_s
    try:
        # The mirror creates the topic when it discovers it; ask until it is there.
        def created() -> bool:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            return metadata.error is None and bool(metadata.partitions)

        wait_until(created, what=f"{topic} at {bootstrap}", timeout_s=deadline_s, interval_s=0.2)
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.setdefault(msg.partition(), []).append(msg.value())
    finally:
        consumer.close()
    return got


def test_a_broken_topology_is_refused_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "two-dc.yaml").read_text().replace("source: east", "source: eats"))
    up = causeway("up", str(bad), "--state-dir", str(tmp_path / "s"))
    assert up.returncode == 1
    assert "mirrors.east-to-west.source: unknown cluster 'eats' (did you mean 'east'?)" in up.stderr
    assert not (tmp_path / "s").exists()
