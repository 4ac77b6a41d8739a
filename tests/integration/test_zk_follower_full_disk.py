"""Issue 19, item 7: a follower whose log dir is full takes the dir offline, as a leader does.

A ZooKeeper-mode follower whose disk filled only backed off its fetches: its dir stayed online,
so the partitions it led from the same full dir kept their leader, which would refuse their next
write. Kafka's follower append reports the IOException to the LogDirFailureChannel like any
write. Against three real brokers, broker 1's data dir a 16 MiB tmpfs filled to its last byte:
records produced (librdkafka, idempotent, acks=all) to ``orders``, which broker 2 leads and broker
1 follows, make broker 1's follower append fail; the dir goes offline (log line, controller told),
and ``led``, which broker 1 led from that dir and which nobody wrote to, moves to an in-sync
replica. Once the filler is removed, broker 1 rejoins both ISRs and every acknowledged record of
``orders`` is there, in order, once.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import ZkCluster
from tests.support.consume import read_partition
from tests.support.polling import wait_until
from tests.support.produce import produce_acked, records
from tests.support.small_disk import fill_to_the_last_byte, small_disk
from tests.support.zookeeper import ZooKeeperServer

OVERRIDES = ("zookeeper.session.timeout.ms=6000", "offsets.topic.num.partitions=1",
             "offsets.topic.replication.factor=3", "min.insync.replicas=2", "replica.lag.time.max.ms=4000",
             "leader.imbalance.check.interval.seconds=1")


def test_a_full_follower_dir_goes_offline_and_moves_what_it_led(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with small_disk(tmp_path / "broker-1", size="16m") as disk:
        cluster = ZkCluster(zookeeper, tmp_path, OVERRIDES).start()
        try:
            bootstrap = cluster.bootstrap()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for topic, replicas in (("orders", [2, 1, 3]), ("led", [1, 2, 3])):
                admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(60)
                wait_until(lambda t=topic: sorted(cluster.state(t)["isr"]) == [1, 2, 3],  # type: ignore[type-var]
                           what=f"{topic}'s ISR of 3", timeout_s=60)
            assert (cluster.state("orders")["leader"], cluster.state("led")["leader"]) == (2, 1)
            before = records(0, 100)
            assert produce_acked(bootstrap, "orders", before) == before

            fill_to_the_last_byte(disk / "filler")
            during = records(100, 400)
            assert produce_acked(bootstrap, "orders", during) == during  # broker 2 leads: nothing moves
            # Broker 1's next follower append fails: its dir goes offline, and what it led moves.
            wait_until(lambda: cluster.state("led")["leader"] in (2, 3), what="led's leadership moved off broker 1",
                       timeout_s=60)
            assert 1 not in cluster.state("led")["isr"]  # type: ignore[operator]
            assert f"log dir {disk} is offline" in cluster.brokers[1].log_path.read_text()
            controller = cluster.brokers[cluster.controller()[0]]
            assert "replicas are in an offline log dir" in controller.log_path.read_text()
            assert cluster.state("orders")["leader"] == 2

            (disk / "filler").unlink()
            for topic in ("orders", "led"):
                wait_until(lambda t=topic: 1 in cluster.state(t)["isr"],  # type: ignore[operator]
                           what=f"broker 1 back in the ISR of {topic}", timeout_s=60)
            assert [m.value() for m in read_partition(bootstrap, "orders", timeout_s=60)] == before + during
        finally:
            cluster.close()
