"""Failback of a link-mode mirror with real brokers (mirror/failback.py, LinkTruncate):
truncate-and-restore after a failover on a three-broker ZooKeeper-mode old primary (the leader
cuts the diverged tail into quarantine, its followers cut theirs by their normal truncation, the
reverse mirror copies the new primary's records after the cut), reverse-and-start after a planned
promote, and the refusals that change nothing. The commands run as `causeway mirror ...`
processes; records come from librdkafka.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from broker.client import MIRROR_NAME_CONFIG, TopicPartition, admin, link_append, open_client, produce
from broker.client.admin import EARLIEST, LATEST, NewTopic
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_batch, split_batches
from deploy.broker_process import BrokerProcess
from mirror.config import MirrorConfig, mirror_config_from_data
from mirror.promote import promote
from tests.integration.partition_reads import read_whole_batches
from tests.integration.started_clusters import started
from tests.integration.test_mirror import running
from tests.integration.test_mirror_link import produce as produce_records
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_for, wait_until
from tests.support.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
FORWARD, BACK = "p-to-dr", "dr-to-p"
OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1", "min.insync.replicas=2",
             "leader.imbalance.check.interval.seconds=3600")

Batch = tuple[int, int, int]  # base offset, last offset, CRC


def link(name: str, source: str, target: str) -> MirrorConfig:
    return mirror_config_from_data({
        "name": name, "mode": "link",
        "source": {"alias": "src", "bootstrap": source},
        "target": {"alias": "dst", "bootstrap": target},
        "topics": {"include": ["orders"]},
        "refresh.topics.interval.seconds": 0.2,
        "emit.heartbeats.interval.seconds": 0.5,
        "sync.group.offsets.enabled": False,
    })


def failback_cli(command: str, old: str, new: str, *extra: str, timeout: str = "30"
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "mirror", command, "--bootstrap", old,
                           "--new-primary-bootstrap", new, "--reverse-mirror", BACK, "--timeout", timeout,
                           "--topics", "orders", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


async def ends(bootstrap: str, partitions: int, spec: int = LATEST) -> dict[int, int]:
    async with open_client(bootstrap) as client:
        listed = await admin.list_offsets(client, {TopicPartition("orders", p): spec for p in range(partitions)})
    return {tp.partition: o.offset for tp, o in listed.items()}


async def batches(bootstrap: str, partition: int) -> list[Batch]:
    """The partition's batches from its log start to its high watermark, promotion markers left out
    (a copy leaves the source's out)."""
    tp = TopicPartition("orders", partition)
    async with open_client(bootstrap) as client:
        start = (await admin.list_offsets(client, {tp: EARLIEST}))[tp].offset
        data = await read_whole_batches(client, tp, start)
    return [(h.base_offset, h.last_offset, h.crc) for _, h in split_batches(data)
            if not (h.is_control and not h.has_producer_id)]


def disk_batches(broker: BrokerProcess, partition: int) -> list[Batch]:
    directory = broker.data_dir / f"orders-{partition}"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    return [(h.base_offset, h.last_offset, h.crc) for _, h in split_batches(data)]


async def owner(bootstrap: str) -> str | None:
    async with open_client(bootstrap) as client:
        entry = (await admin.describe_configs(client, "orders", keys=[MIRROR_NAME_CONFIG])).get(MIRROR_NAME_CONFIG)
    return entry.value if entry is not None and entry.value else None


async def copy_until_caught_up(config: MirrorConfig, source: str, target: str, partitions: int) -> dict[int, int]:
    want = await ends(source, partitions)

    async def reached() -> bool:
        try:
            return await ends(target, partitions) == want
        except Exception:  # noqa: BLE001 - not created yet, or a leader not elected yet
            return False

    async with running(config):
        await wait_for(reached, what=f"the copy at {target} to reach {want}", timeout_s=DEADLINE_S)
    return want


async def create_orders(bootstrap: str, partitions: int) -> None:
    """`orders` on the three-broker primary, every partition on all three."""
    async with open_client(bootstrap) as client:
        await admin.create_topics(client, {"orders": NewTopic(partitions, 3)})


@pytest.fixture
def primary(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with started(ZkCluster(zookeeper, tmp_path / "primary", OVERRIDES)) as running_cluster:
        yield running_cluster


@pytest.fixture
def dr(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "dr").start()
    yield process
    process.stop()


def test_truncate_and_restore_cuts_only_the_lost_tail_keeps_it_and_the_old_primary_follows(
        primary: ZkCluster, dr: BrokerProcess) -> None:
    p_boot = primary.bootstrap()
    trio.run(create_orders, p_boot, 2)
    for partition in (0, 1):
        wait_until(lambda p=partition: len(primary.state("orders", p)["isr"]) == 3,  # type: ignore[arg-type]
                   what=f"orders-{partition}'s ISR")
    produce_records(p_boot, "orders", 40, partitions=2)
    copied = trio.run(copy_until_caught_up, link(FORWARD, p_boot, dr.bootstrap), p_boot, dr.bootstrap, 2)
    assert copied == {0: 20, 1: 20}
    # Acknowledged at the primary (acks=all, three replicas), never copied: the RPO.
    produce_records(p_boot, "orders", 14, start=40, partitions=2)
    lost = {p: trio.run(batches, p_boot, p)[-1][1] + 1 for p in (0, 1)}
    assert lost == {0: 27, 1: 27}
    report = trio.run(partial(promote, dr.bootstrap, mirror=FORWARD, failover=True, timeout_s=5))
    assert report.promoted == ["orders"]
    produce_records(dr.bootstrap, "orders", 6, start=100, partitions=2)  # the new primary's own

    done = failback_cli("truncate-and-restore", p_boot, dr.bootstrap)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "cut 14 record(s)" in done.stdout, done.stdout

    # Each partition's seven lost records are in its leader's quarantine, with their offsets.
    for partition in (0, 1):
        leader = primary.brokers[primary.state("orders", partition)["leader"]]  # type: ignore[index]
        manifests = list((leader.data_dir / f"orders-{partition}.quarantine").glob("*/quarantine.txt"))
        assert len(manifests) == 1, manifests
        kept = manifests[0].parent
        assert str(kept) in done.stdout
        assert "failback" in manifests[0].read_text()
        records = [r for f in sorted(kept.glob("*.log")) for pos, _ in split_batches(f.read_bytes())
                   for r in decode_batch(f.read_bytes(), pos)[1]]
        assert [r.offset for r in records] == list(range(20, 27))
        assert [r.value for r in records] == [f"value-{i}".encode() * (1 + i % 5)
                                              for i in range(40, 54) if i % 2 == partition]
        assert f"orders-{partition}: cut at offset 20: 7 record(s)" in done.stdout

    # Every replica cut its own log (normal follower truncation), and the topic refuses producers.
    for partition in (0, 1):
        for broker in primary.brokers.values():
            wait_until(lambda b=broker, p=partition: disk_batches(b, p)[-1][1] == 19,
                       what=f"broker {broker.data_dir.name}'s orders-{partition} to end at offset 19")
    assert trio.run(owner, p_boot) == BACK

    async def refused() -> None:
        async with open_client(p_boot) as client:
            with pytest.raises(KafkaError) as caught:
                await produce(client, "orders", 0, build_batch([Record(b"k", b"late")]))
        assert caught.value.code == ErrorCode.INVALID_REQUEST and BACK in str(caught.value)

    trio.run(refused)

    # The reverse mirror copies the new primary's records after the cut: batch for batch the same.
    trio.run(copy_until_caught_up, link(BACK, dr.bootstrap, p_boot), dr.bootstrap, p_boot, 2)
    for partition in (0, 1):
        want = trio.run(batches, dr.bootstrap, partition)
        assert trio.run(batches, p_boot, partition) == want
        for broker in primary.brokers.values():
            wait_until(lambda b=broker, p=partition, w=want: disk_batches(b, p) == w,
                       what=f"broker {broker.data_dir.name}'s orders-{partition} to hold the new primary's batches")

    again = failback_cli("truncate-and-restore", p_boot, dr.bootstrap)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "cut at offset" not in again.stdout and again.stdout.count("nothing to cut") == 2, again.stdout


@pytest.fixture
def east(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "east", topics=("orders:2",)).start()
    yield process
    process.stop()


@pytest.fixture
def stranger(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "stranger", topics=("orders:2",)).start()
    yield process
    process.stop()


def planned_promote(east: BrokerProcess, dr: BrokerProcess) -> None:
    produce_records(east.bootstrap, "orders", 20, partitions=2)
    trio.run(copy_until_caught_up, link(FORWARD, east.bootstrap, dr.bootstrap), east.bootstrap, dr.bootstrap, 2)
    report = trio.run(partial(promote, dr.bootstrap, source_bootstrap=east.bootstrap, mirror=FORWARD, timeout_s=30))
    assert report.ok, report
    produce_records(dr.bootstrap, "orders", 6, start=100, partitions=2)


def test_reverse_and_start_after_a_planned_promote_swaps_the_direction_at_the_same_offsets(
        east: BrokerProcess, dr: BrokerProcess) -> None:
    planned_promote(east, dr)
    done = failback_cli("reverse-and-start", east.bootstrap, dr.bootstrap)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.count("nothing to cut") == 2 and not list(east.data_dir.glob("*.quarantine")), done.stdout
    assert trio.run(owner, east.bootstrap) == BACK
    trio.run(copy_until_caught_up, link(BACK, dr.bootstrap, east.bootstrap), dr.bootstrap, east.bootstrap, 2)
    for partition in (0, 1):
        assert trio.run(batches, east.bootstrap, partition) == trio.run(batches, dr.bootstrap, partition)


def test_refusals_change_nothing(east: BrokerProcess, dr: BrokerProcess, stranger: BrokerProcess) -> None:
    planned_promote(east, dr)
    produce_records(stranger.bootstrap, "orders", 20, start=500, partitions=2)
    before = trio.run(ends, stranger.bootstrap, 2)

    # A cluster that was never the source of the copy: its logs share no batch with it.
    never = failback_cli("truncate-and-restore", stranger.bootstrap, dr.bootstrap)
    assert never.returncode == 1, never.stdout
    assert "shares no batch" in never.stderr or "share no epoch" in never.stderr, never.stderr
    assert "nothing was changed" in never.stderr
    assert trio.run(ends, stranger.bootstrap, 2) == before and trio.run(owner, stranger.bootstrap) is None
    assert not list(stranger.data_dir.glob("*.quarantine"))

    # Records written at the old primary after the promote: reverse-and-start cuts nothing.
    produce_records(east.bootstrap, "orders", 4, start=200, partitions=2)
    held = trio.run(ends, east.bootstrap, 2)
    late = failback_cli("reverse-and-start", east.bootstrap, dr.bootstrap)
    assert late.returncode == 1, late.stdout
    assert "use truncate-and-restore" in late.stderr, late.stderr
    assert trio.run(ends, east.bootstrap, 2) == held and trio.run(owner, east.bootstrap) is None


def test_a_replica_down_during_truncate_and_restore_holds_the_copy_until_it_cuts_its_log_and_a_rerun_completes(
        primary: ZkCluster, dr: BrokerProcess) -> None:
    p_boot = primary.bootstrap()
    trio.run(create_orders, p_boot, 1)
    wait_until(lambda: len(primary.state("orders")["isr"]) == 3, what="orders-0's ISR")  # type: ignore[arg-type]
    produce_records(p_boot, "orders", 20, partitions=1)
    trio.run(copy_until_caught_up, link(FORWARD, p_boot, dr.bootstrap), p_boot, dr.bootstrap, 1)
    produce_records(p_boot, "orders", 6, start=20, partitions=1)  # never copied
    assert trio.run(partial(promote, dr.bootstrap, mirror=FORWARD, failover=True, timeout_s=5)).promoted == ["orders"]
    produce_records(dr.bootstrap, "orders", 3, start=100, partitions=1)
    leader_id = primary.state("orders")["leader"]
    down_id = next(i for i in sorted(primary.brokers) if i != leader_id)
    down = primary.brokers[down_id]
    down.kill()

    stuck = failback_cli("truncate-and-restore", p_boot, dr.bootstrap, timeout="5")
    assert stuck.returncode == 1, stuck.stdout
    assert f"orders-0: REQUEST_TIMED_OUT: orders-0: replica(s) {down_id} did not cut" in stuck.stdout, stuck.stdout
    leader = primary.brokers[leader_id]  # type: ignore[index]
    kept = list((leader.data_dir / "orders-0.quarantine").glob("*/quarantine.txt"))
    assert len(kept) == 1
    # The leader's cut is done and said, though its replicas have not all followed.
    assert "orders-0: cut at offset 20: 6 record(s)" in stuck.stdout and str(kept[0].parent) in stuck.stdout

    async def copy_refused() -> None:
        tp = TopicPartition("orders", 0)
        async with open_client(dr.bootstrap) as client:
            tail = await read_whole_batches(client, tp, 20)
        async with open_client(p_boot) as client:
            answer = (await link_append(client, BACK, {tp: tail}, previous_ends={tp: 20}))[tp]
        assert answer.error == ErrorCode.NOT_ENOUGH_REPLICAS, answer
        assert f"waiting for: {down_id}" in (answer.error_message or "")

    trio.run(copy_refused)
    down.restart()
    wait_until(lambda: disk_batches(down, 0)[-1][1] == 19, what="the restarted replica to cut its log at 20")
    done = failback_cli("truncate-and-restore", p_boot, dr.bootstrap)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "orders-0: nothing to cut (the log ends at 20" in done.stdout, done.stdout

    trio.run(copy_until_caught_up, link(BACK, dr.bootstrap, p_boot), dr.bootstrap, p_boot, 1)
    want = trio.run(batches, dr.bootstrap, 0)
    for broker in primary.brokers.values():
        wait_until(lambda b=broker: disk_batches(b, 0) == want,
                   what=f"broker {broker.data_dir.name} to hold the new primary's batches")


@pytest.mark.parametrize("argv, says", [
    ((), "give a TOPOLOGY and --mirror NAME, or the old primary's --bootstrap"),
    (("--bootstrap", "127.0.0.1:1"), "give --new-primary-bootstrap and --reverse-mirror"),
    (("--bootstrap", "127.0.0.1:1", "--new-primary-bootstrap", "127.0.0.1:2", "--reverse-mirror", "b",
      "--topics", "("), "is not a regular expression"),
    (("--bootstrap", "127.0.0.1:1", "--new-primary-bootstrap", "127.0.0.1:2", "--reverse-mirror", "b",
      "--timeout", "0"), "--timeout must be positive"),
])
def test_a_bad_command_line_exits_2_saying_why(argv: tuple[str, ...], says: str) -> None:
    for command in ("truncate-and-restore", "reverse-and-start"):
        done = subprocess.run([sys.executable, "-m", "deploy.cli", "mirror", command, *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr, done.stderr
