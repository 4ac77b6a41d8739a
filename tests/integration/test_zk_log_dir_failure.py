"""Issue 19, item 7: a leader whose log dir is full stops leading, and its dir comes back.

A ZooKeeper-mode leader whose disk filled kept leading, so its partition refused every write
while two in-sync followers had room. Against three real brokers, broker 1's data dir a 16 MiB
tmpfs that the test fills to its last byte, with confluent-kafka's idempotent acks=all producer:
the dir goes offline (log line), the controller hears of it through
``/log_dir_event_notification`` and moves the leadership of ``orders`` to an in-sync follower,
the producer carries on and every acknowledged record is read back, in order, once. A partition
with no other replica (``solo``) goes offline instead of electing an out-of-sync replica. Once
the filler is removed the dir comes back without a restart: broker 1 rejoins the ISR, leads
``orders`` again (preferred leader) and ``solo`` again, and serves every record.
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


def test_a_full_leader_dir_goes_offline_leadership_moves_and_it_comes_back(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with small_disk(tmp_path / "broker-1", size="16m") as disk:
        cluster = ZkCluster(zookeeper, tmp_path, OVERRIDES).start()
        try:
            bootstrap = cluster.bootstrap()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("orders", 1, replica_assignment=[[1, 2, 3]])])["orders"].result(60)
            admin.create_topics([NewTopic("solo", 1, replica_assignment=[[1]], config={"min.insync.replicas": "1"})]
                              )["solo"].result(60)
            wait_until(lambda: cluster.state("orders")["isr"] == [1, 2, 3], what="orders led by 1, ISR of 3",
                       timeout_s=60)
            assert cluster.state("orders")["leader"] == 1
            before = records(0, 200)
            assert produce_acked(bootstrap, "orders", before) == before
            solo = records(0, 10)
            assert produce_acked(bootstrap, "solo", solo) == solo

            fill_to_the_last_byte(disk / "filler")
            during = records(200, 600)
            acked = produce_acked(bootstrap, "orders", during)
            assert sorted(acked) == sorted(during)

            state = cluster.state("orders")
            assert state["leader"] in (2, 3) and 1 not in state["isr"], state  # type: ignore[operator]
            assert cluster.state("solo")["leader"] == -1  # nobody else has its records: offline
            assert f"log dir {disk} is offline" in cluster.brokers[1].log_path.read_text()
            controller = cluster.brokers[cluster.controller()[0]]
            assert "broker 1: " in controller.log_path.read_text()
            assert "replicas are in an offline log dir" in controller.log_path.read_text()
            read = [m.value() for m in read_partition(bootstrap, "orders", timeout_s=60)]
            assert read == before + during  # every acknowledged record, in order, once
            # A topic created now is not led from the offline dir either: broker 1 has no online
            # log dir to place it in, answers the controller KAFKA_STORAGE_ERROR, and the next
            # replica leads (a broker with an online dir places it there: test_zk_jbod_log_dirs).
            admin.create_topics([NewTopic("late", 1, replica_assignment=[[1, 2, 3]])])["late"].result(60)
            late = records(0, 20)
            assert produce_acked(bootstrap, "late", late) == late
            assert cluster.state("late")["leader"] in (2, 3)

            (disk / "filler").unlink()
            wait_until(lambda: 1 in cluster.state("orders")["isr"], what="broker 1 back in the ISR",  # type: ignore[operator]
                       timeout_s=60)
            wait_until(lambda: cluster.state("orders")["leader"] == 1, what="broker 1 leads orders again",
                       timeout_s=60)
            wait_until(lambda: cluster.state("solo")["leader"] == 1, what="solo online again", timeout_s=60)
            assert f"log dir {disk} accepts writes again" in cluster.brokers[1].log_path.read_text()
            after = records(600, 700)
            assert produce_acked(bootstrap, "orders", after) == after
            assert [m.value() for m in read_partition(cluster.brokers[1].bootstrap, "orders", timeout_s=60)] \
                == before + during + after
            assert [m.value() for m in read_partition(bootstrap, "solo", timeout_s=60)] == solo
            wait_until(lambda: 1 in cluster.state("late")["isr"], what="broker 1 follows late",  # type: ignore[operator]
                       timeout_s=60)
        finally:
            cluster.close()
