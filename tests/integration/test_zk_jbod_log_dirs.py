"""Issue 19, item 7: a ZooKeeper-mode broker with two log dirs (``log.dirs``, JBOD) keeps working
through one of them going offline, as Kafka's brokers do.

Three real brokers on a real ZooKeeper; broker 1's two log dirs are 16 MiB tmpfs mounts, and a dir
goes offline the real way: the test fills it to its last byte and librdkafka's idempotent acks=all
producer writes to a partition that broker 1 leads from it.

- A new replica goes to an online dir (Kafka's LogManager creates logs only in its live dirs):
  the offline dir held the fewest partitions, and a topic created then was refused by broker 1
  (KAFKA_STORAGE_ERROR, led elsewhere) although its other dir had room. Now broker 1 places the
  replica in the online dir and leads it; only once no dir is online is a new replica refused,
  and it joins the ISR when the dirs come back.
- ``kafka-log-dirs --describe`` (Apache Kafka 4's own tool) shows the offline dir as Kafka's
  brokers answer it, with the error KafkaStorageException and no partitions, the online dir and
  the other brokers' dirs without error; once the dir is back it lists its partitions again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import run_tool
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.polling import wait_until
from tests.support.produce import produce_acked, records
from tests.support.small_disk import fill_to_the_last_byte, small_disk
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=3", "min.insync.replicas=2", "replica.lag.time.max.ms=4000",
             "leader.imbalance.check.interval.seconds=1")
# What Kafka 4's kafka-log-dirs prints as the error of a log dir answered KAFKA_STORAGE_ERROR.
STORAGE_ERROR = "org.apache.kafka.common.errors.KafkaStorageException"


class _TwoDirBroker(BrokerProcess):
    """A broker whose ``data_dir`` is two log dirs joined by a comma: ``causeway broker --data-dir``
    sets ``log.dirs``, Kafka's comma-separated list. Its log goes beside the first dir."""

    @property
    def log_path(self) -> Path:
        first = Path(str(self.data_dir).split(",", 1)[0])
        return first.with_name(first.name + ".log")


class JbodCluster(ZkCluster):
    """Brokers 1, 2, 3; broker 1 with the log dirs ``first`` and ``second``, in that order."""

    def __init__(self, zookeeper: ZooKeeperServer, root: Path, first: Path, second: Path) -> None:
        self.first, self.second = first, second
        super().__init__(zookeeper, root, OVERRIDES)

    def broker(self, broker_id: int) -> BrokerProcess:
        plain = super().broker(broker_id)
        if broker_id != 1:
            return plain
        return _TwoDirBroker(Path(f"{self.first},{self.second}"), overrides=plain.overrides)

    def log_dirs(self, *broker_ids: int) -> dict[int, dict[str, dict[str, object]]]:
        """What ``kafka-log-dirs --describe`` prints for these brokers: broker id -> log dir -> its
        entry (``logDir``, ``error``, ``partitions``)."""
        run = run_tool("kafka-log-dirs", "--bootstrap-server", self.bootstrap(), "--describe",
                       "--broker-list", ",".join(map(str, broker_ids))).check()
        described = json.loads(run.lines[-1])  # after two lines saying whom it asked
        return {b["broker"]: {d["logDir"]: d for d in b["logDirs"]} for b in described["brokers"]}


@contextmanager
def jbod_cluster(zookeeper: ZooKeeperServer, root: Path) -> Iterator[JbodCluster]:
    with ExitStack() as stack:
        first = stack.enter_context(small_disk(root / "broker-1" / "first", size="16m"))
        second = stack.enter_context(small_disk(root / "broker-1" / "second", size="16m"))
        cluster = JbodCluster(zookeeper, root, first, second)
        stack.callback(cluster.close)  # before the disks are unmounted
        yield cluster.start()


def _held(root: Path) -> set[str]:
    """The partitions a log dir holds (their directories)."""
    return {child.name for child in root.iterdir() if child.is_dir() and not child.name.startswith(".")}


def _create(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(60)


def _take_offline(cluster: JbodCluster, root: Path, topic: str) -> None:
    """Fill ``root`` and write to ``topic`` (led by broker 1 from ``root``) until the dir goes
    offline and the leadership moves; every record is acknowledged on the way."""
    fill_to_the_last_byte(root / "filler")
    values = records(0, 300)
    assert sorted(produce_acked(cluster.bootstrap(), topic, values)) == sorted(values)
    assert f"log dir {root} is offline" in cluster.brokers[1].log_path.read_text()
    state = cluster.state(topic)
    assert state["leader"] in (2, 3) and 1 not in state["isr"], state  # type: ignore[operator]


def test_a_new_replica_goes_to_an_online_log_dir_and_is_refused_only_when_none_is(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with jbod_cluster(zookeeper, tmp_path) as cluster:
        first, second = cluster.first, cluster.second
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        # __consumer_offsets (created once a controller runs) goes to the first dir, orders to the
        # second, ballast to the first again (a tie goes to the first): the second dir, orders',
        # holds the fewest.
        wait_until(lambda: (first / "__consumer_offsets-0").is_dir(), what="__consumer_offsets on broker 1",
                   timeout_s=60)
        _create(admin, "orders")
        _create(admin, "ballast")
        assert (_held(first), _held(second)) == ({"__consumer_offsets-0", "ballast-0"}, {"orders-0"})
        wait_until(lambda: cluster.state("orders")["isr"] == [1, 2, 3] == cluster.state("ballast")["isr"],
                   what="orders and ballast led by 1, ISR of 3", timeout_s=60)

        _take_offline(cluster, second, "orders")
        # The least-loaded dir is offline: a new topic's replica on broker 1 goes to the first dir,
        # and broker 1 leads it (before, it answered KAFKA_STORAGE_ERROR and broker 2 led).
        _create(admin, "late")
        wait_until(lambda: cluster.state("late")["leader"] == 1 and cluster.state("late")["isr"] == [1, 2, 3],
                   what="broker 1 leading late, ISR of 3", timeout_s=60)
        assert (first / "late-0").is_dir() and not (second / "late-0").exists()
        late = records(0, 50)
        assert produce_acked(cluster.bootstrap(), "late", late) == late
        assert [m.value() for m in read_partition(cluster.brokers[1].bootstrap, "late", timeout_s=60)] == late
        assert cluster.state("orders")["leader"] != 1  # the second dir is still offline

        # Both dirs offline: now, and only now, broker 1 refuses a new replica; the topic is led
        # elsewhere, and broker 1 joins its ISR once its dirs take writes again.
        _take_offline(cluster, first, "ballast")
        _create(admin, "later")
        later = records(0, 50)
        assert produce_acked(cluster.bootstrap(), "later", later) == later
        state = cluster.state("later")
        assert state["leader"] in (2, 3) and 1 not in state["isr"], state  # type: ignore[operator]
        assert "later-0" not in _held(first) | _held(second)

        (first / "filler").unlink()
        (second / "filler").unlink()
        for topic in ("orders", "ballast", "late", "later"):
            wait_until(lambda t=topic: 1 in cluster.state(t)["isr"],  # type: ignore[operator]
                       what=f"broker 1 back in the ISR of {topic}", timeout_s=60)
        assert "later-0" in _held(first) | _held(second)
        assert [m.value() for m in read_partition(cluster.bootstrap(), "late", timeout_s=60)] == late


def test_kafka_log_dirs_reports_an_offline_log_dir_as_a_storage_error(
        zookeeper: ZooKeeperServer, tmp_path: Path, kafka_jars: None) -> None:
    with jbod_cluster(zookeeper, tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _create(admin, "orders")
        wait_until(lambda: cluster.state("orders")["isr"] == [1, 2, 3], what="orders led by 1, ISR of 3",
                   timeout_s=60)
        held, other = (cluster.first, cluster.second) if (cluster.first / "orders-0").is_dir() \
            else (cluster.second, cluster.first)

        def partitions(entry: dict[str, object]) -> set[str]:
            return {str(p["partition"]) for p in entry["partitions"]}  # type: ignore[attr-defined, index]

        described = cluster.log_dirs(1, 2)
        assert set(described[1]) == {str(held), str(other)}
        assert described[1][str(held)]["error"] is None and "orders-0" in partitions(described[1][str(held)])

        _take_offline(cluster, held, "orders")
        described = cluster.log_dirs(1, 2)
        assert described[1][str(held)] == {"logDir": str(held), "error": STORAGE_ERROR, "partitions": []}
        assert described[1][str(other)]["error"] is None  # broker 1's other dir is online
        assert [entry["error"] for entry in described[2].values()] == [None]  # so is broker 2's only one
        assert "orders-0" in set().union(*(partitions(entry) for entry in described[2].values()))

        (held / "filler").unlink()
        wait_until(lambda: 1 in cluster.state("orders")["isr"],  # type: ignore[operator]
                   what="broker 1 back in the ISR of orders", timeout_s=60)
        entry = cluster.log_dirs(1)[1][str(held)]
        assert entry["error"] is None and "orders-0" in partitions(entry)
