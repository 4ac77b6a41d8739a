"""`causeway up` with 3-broker ZooKeeper clusters: real ZooKeeper, brokers, WAN proxies and mirror.

A topology of two 3-broker ZooKeeper clusters in two datacenters and a mirror between them comes
up healthy: status shows each cluster's ZooKeeper, every broker serving, the controller and no
under-replicated or offline partition; the file's topic (replication factor, config) exists; a
client in the other datacenter reaches every broker through that broker's own WAN proxy. Then the
leader of the partition an idempotent acks=all producer writes to is SIGKILLed mid-stream: the
supervisor starts it again, status is healthy again (nothing under-replicated), every
acknowledged record is in the log once and in order, and the mirror, reading the source through
the WAN proxies, has copied all of them to the other cluster. On the way out every broker's
controlled shutdown completes (the controller stops last, ZooKeeper after the brokers).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from deploy.launcher.control import alive, status, stop
from deploy.launcher.from_topology import plan_from_file
from deploy.launcher.launch import LaunchState, run_plan
from tests.support.metrics import scrape
from tests.support.polling import wait_for, wait_until

REPO = Path(__file__).resolve().parents[2]

# Short ZooKeeper sessions and lag bound, few offsets partitions: a small cluster that notices a
# dead broker in seconds (Kafka's defaults are 18 s and 30 s).
CLUSTER_CONFIGS = """\
    brokers: 3
    coordination: zookeeper
    configs:
      default.replication.factor: 3
      min.insync.replicas: 2
      zookeeper.session.timeout.ms: 6000
      replica.lag.time.max.ms: 4000
      offsets.topic.num.partitions: 3
"""

TOPOLOGY = f"""\
name: zk-pair
datacenters:
  east: {{}}
  west: {{}}
clusters:
  east:
    datacenter: east
{CLUSTER_CONFIGS}    topics:
      orders:
        partitions: 2
        replication_factor: 3
        configs:
          retention.ms: 604800000
  west:
    datacenter: west
{CLUSTER_CONFIGS}links:
  - between: [east, west]
    latency: 5ms
mirrors:
  e2w: {{source: east, target: west}}
"""

RECORDS = 2000
KILL_AFTER_ACKS = 300


def _healthy_cluster(report: dict[str, Any], name: str) -> bool:
    cluster = report["clusters"][name]
    return bool(cluster["healthy"])


def _check_status(report: dict[str, Any]) -> None:
    assert report["running"] and report["healthy"], report
    for name in ("east", "west"):
        cluster = report["clusters"][name]
        assert [(b["id"], b["state"]) for b in cluster["brokers"]] == [(1, "serving"), (2, "serving"), (3, "serving")]
        assert cluster["controller"] in (1, 2, 3)
        assert (cluster["under_replicated_count"], cluster["offline_count"]) == (0, 0)
        assert cluster["zookeeper"]["healthy"]
        assert list(cluster["zookeeper"]["nodes"].values()) == ["standalone"]
        assert cluster["zookeeper"]["connect"].endswith(f"/{name}")


def _topic_as_planned(bootstrap: str) -> tuple[dict[int, int], str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics("orders", timeout=15).topics["orders"]
    replicas = {p: len(m.replicas) for p, m in topic.partitions.items()}
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    return replicas, configs["retention.ms"].value


def _advertised_through(bootstrap: str) -> set[str]:
    """The broker addresses a client that bootstraps through `bootstrap` is told to use."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {f"{b.host}:{b.port}" for b in admin.list_topics(timeout=30).brokers.values()}


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return int(admin.list_topics(topic, timeout=15).topics[topic].partitions[partition].leader)


def _produce(bootstrap: str, acked: list[bytes], killed: threading.Event, failed: list[str]) -> int:
    """RECORDS numbered records to orders-0, idempotent and acks=all; the second half only once
    the leader has been killed (the first half is in flight then). Returns what flush left;
    `failed` gets each delivery error, so a failure says which."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 90000, "linger.ms": 5})

    def report(err: object, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(f"{msg.value()!r}: {err}")

    for i in range(RECORDS):
        if i == RECORDS // 2:
            # Serve delivery reports (the test kills the leader after enough of them) until then.
            deadline = time.monotonic() + 90
            while not killed.is_set() and time.monotonic() < deadline:
                producer.poll(0.05)
        producer.produce("orders", b"%06d" % i, partition=0, on_delivery=report)
        producer.poll(0)
    return int(producer.flush(120))


def _read_partition(bootstrap: str, topic: str, partition: int, at_least: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []

    def enough() -> bool:
        for msg in consumer.consume(500, timeout=0.2):
            value = msg.value()
            if msg.error() is None and value is not None:
                got.append(value)
        return len(got) >= at_least

    try:
        # The mirror creates its topic when it discovers the source's: ask until it is there.
        wait_until(lambda: topic in consumer.list_topics(topic, timeout=10).topics
                   and consumer.list_topics(topic, timeout=10).topics[topic].error is None,
                   what=f"{topic} at {bootstrap}", timeout_s=90, interval_s=0.2)
        consumer.assign([TopicPartition(topic, partition, 0)])
        wait_until(enough, what=f"{at_least} records from {topic}-{partition}", timeout_s=90)
    finally:
        consumer.close()
    return got


def _status_text(state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "status", "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


async def test_three_broker_clusters_come_up_heal_a_killed_leader_and_mirror_everything(tmp_path: Path) -> None:
    topology = tmp_path / "zk-pair.yaml"
    topology.write_text(TOPOLOGY)
    state_dir = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        state: LaunchState = await nursery.start(run_plan, plan_from_file(topology), state_dir)
        east, west = state.clusters["east"], state.clusters["west"]
        assert list(east.brokers) == [1, 2, 3] and list(west.brokers) == [1, 2, 3]
        _check_status(await trio.to_thread.run_sync(status, state_dir))

        replicas, retention = await trio.to_thread.run_sync(_topic_as_planned, east.bootstrap)
        assert replicas == {0: 3, 1: 3} and retention == "604800000"

        # Every broker behind its own proxy: through the link, a client is told only proxies.
        proxies = {b.wan["west"] for b in east.brokers.values()}
        assert len(proxies) == 3 and not proxies & {b.local for b in east.brokers.values()}
        assert await trio.to_thread.run_sync(_advertised_through, east.wan["west"]) == proxies

        # SIGKILL the leader of orders-0 with records in flight.
        leader = await trio.to_thread.run_sync(_leader, east.bootstrap, "orders", 0)
        victim = east.brokers[leader].process
        acked: list[bytes] = []
        killed = threading.Event()
        left: list[int] = []
        failed: list[str] = []

        async def produce() -> None:
            left.append(await trio.to_thread.run_sync(_produce, east.bootstrap, acked, killed, failed))

        async with trio.open_nursery() as producing:
            producing.start_soon(produce)
            await wait_for(lambda: len(acked) >= KILL_AFTER_ACKS, what=f"{KILL_AFTER_ACKS} acknowledgements",
                           timeout_s=60)
            old_pid = victim.pid
            assert old_pid is not None
            os.kill(old_pid, signal.SIGKILL)
            killed.set()
        assert left == [0], "records left unacknowledged"
        assert len(acked) == RECORDS, (len(failed), failed[:3])

        # The supervisor starts it again; the cluster is whole again, nothing under-replicated.
        await wait_for(lambda: victim.restarts == 1 and victim.healthy and victim.pid != old_pid,
                       what=f"the supervisor to restart broker {leader}", timeout_s=90)

        async def healed() -> bool:
            report = await trio.to_thread.run_sync(status, state_dir)
            return _healthy_cluster(report, "east")

        await wait_for(healed, what="status to show east healthy again", timeout_s=90, interval_s=0.5)
        report = await trio.to_thread.run_sync(status, state_dir)
        restarted = next(b for b in report["clusters"]["east"]["brokers"] if b["id"] == leader)
        assert (restarted["restarts"], restarted["state"], restarted["pid"]) == (1, "serving", victim.pid)

        # The launcher's own metrics saw the death: one restart of that broker, none of the others,
        # every process up again (the address is in `status`, as operators find it).
        values = await trio.to_thread.run_sync(scrape, f"http://{report['metrics']}/metrics")
        restarts = {k: v for k, v in values.items() if k.startswith("causeway_launcher_process_restarts_total")}
        dead = f'causeway_launcher_process_restarts_total{{kind="broker",process="{victim.spec.name}"}}'
        assert restarts[dead] == 1
        assert sum(restarts.values()) == 1 and len(restarts) == 1 + 6 + 2 + 1  # WAN, brokers, ZooKeepers, mirror
        ups = {k: v for k, v in values.items() if k.startswith("causeway_launcher_process_up")}
        assert set(ups.values()) == {1.0} and len(ups) == len(restarts)

        # Every acknowledged record once, in order, at the source; the mirror has them all too.
        log = await trio.to_thread.run_sync(_read_partition, east.bootstrap, "orders", 0, RECORDS)
        assert log == sorted(set(log)) and set(acked) <= set(log)
        mirrored = await trio.to_thread.run_sync(_read_partition, west.bootstrap, "east.orders", 0, len(log))
        assert mirrored == log

        text = await trio.to_thread.run_sync(_status_text, state_dir)
        assert text.returncode in (0, 2), text.stderr  # the mirror's lag may still be settling
        assert re.search(r"^east +east +yes +3/3 +[123] ", text.stdout, re.MULTILINE), text.stdout
        assert f"broker {leader}" in text.stdout and "(controller)" in text.stdout
        assert f"ZooKeeper {east.zookeeper_connect}" in text.stdout
        pids = [b.process.pid for c in state.clusters.values() for b in c.brokers.values()]
        pids += [c.zookeeper.pid for c in state.clusters.values() if c.zookeeper is not None]
        logs = [b.process.spec.log_path for c in state.clusters.values() for b in c.brokers.values()]
        nursery.cancel_scope.cancel()
    assert not any(alive(pid) for pid in pids)  # brokers, then ZooKeeper, all stopped
    assert stop(state_dir) == []
    # The controller stopped last: every other broker's controlled shutdown found it at once
    # (stopped all together, they warn "attempt 1 of 3: no controller known" and retry).
    warned = [line for log in logs for line in log.read_text().splitlines()
              if "WARNING" in line and "controlled shutdown" in line]
    assert warned == []
