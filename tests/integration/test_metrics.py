"""The broker's Prometheus metrics move with real traffic: records produced by a real client
raise the topic's messages-in counter by exactly their count, a consumer's fetches raise bytes
out, requests are counted and timed per API, the logs' end offsets are the records' count, a
group's lag is the high watermark less its committed offset and goes to 0 once it commits the
end; in a
3-broker ZooKeeper cluster, a killed broker leaves the others' led partitions under-replicated,
and the controller's counts add up. Every scrape is parsed by prometheus_client's text parser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.consume import read_topic
from tests.support.metrics import metrics_url, scrape
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

METRICS = "causeway.metrics.listener=127.0.0.1:0"


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failed: list[object] = []
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode() * 4, partition=i % partitions,
                         on_delivery=lambda err, _m: failed.append(err) if err is not None else None)
    assert producer.flush(60) == 0 and not failed, failed


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", overrides=(METRICS,), topics=("orders:3",)).start()
    yield process
    process.stop()


def test_messages_bytes_requests_and_logs_move_with_traffic(broker: BrokerProcess) -> None:
    url = metrics_url(broker)
    before = scrape(url)
    assert before["kafka_controller_kafkacontroller_activecontrollercount"] == 1  # one broker: the controller
    assert before["kafka_server_replicamanager_partitioncount"] >= 3

    _produce(broker.bootstrap, "orders", 1000, 3)
    after = scrape(url)
    topic = '{topic="orders"}'
    assert after[f"kafka_server_brokertopicmetrics_messagesin_total{topic}"] \
        - before.get(f"kafka_server_brokertopicmetrics_messagesin_total{topic}", 0) == 1000
    bytes_in = after[f"kafka_server_brokertopicmetrics_bytesin_total{topic}"]
    assert bytes_in > 1000 * len(b"record-0") * 4  # the batches, headers and all
    assert sum(after[f'kafka_log_log_logendoffset{{partition="{p}",topic="orders"}}'] for p in range(3)) == 1000
    assert all(after[f'kafka_log_log_size{{partition="{p}",topic="orders"}}'] > 0 for p in range(3))
    produce_requests = sum(v for k, v in after.items()
                           if k.startswith('kafka_network_requestmetrics_requests_total{request="Produce"'))
    assert produce_requests >= 1
    assert after['kafka_network_requestmetrics_totaltimems_count{request="Produce"}'] >= produce_requests
    assert after['kafka_network_requestmetrics_requestqueuetimems_count{request="Produce"}'] >= produce_requests

    records = read_topic(broker.bootstrap, "orders", 1000)
    assert sum(map(len, records.values())) == 1000
    fetched = scrape(url)
    # Every byte appended went out at least once to a consumer that read every record.
    assert fetched.get(f"kafka_server_brokertopicmetrics_bytesout_total{topic}", 0) >= bytes_in
    assert fetched['kafka_network_requestmetrics_totaltimems_count{request="Fetch"}'] > 0
    # As Kafka, a consumer's fetches count under FetchConsumer too (no follower here).
    assert fetched['kafka_network_requestmetrics_totaltimems_count{request="FetchConsumer"}'] > 0
    assert not any('request="FetchFollower"' in key for key in fetched)
    assert fetched["kafka_server_replicamanager_underreplicatedpartitions"] == 0

    # A group's lag, as the lag exporters compute it: high watermark less committed offset.
    ends = {p: int(after[f'kafka_log_log_logendoffset{{partition="{p}",topic="orders"}}']) for p in range(3)}
    _commit(broker.bootstrap, "billing", {p: 10 for p in range(3)})
    groups = scrape(url)
    for p in range(3):
        labels = f'{{consumergroup="billing",partition="{p}",topic="orders"}}'
        assert groups[f"kafka_consumergroup_current_offset{labels}"] == 10
        assert groups[f"kafka_consumergroup_lag{labels}"] == ends[p] - 10
    assert groups['kafka_consumergroup_lag_sum{consumergroup="billing",topic="orders"}'] == 1000 - 30
    assert groups["kafka_coordinator_group_groupmetadatamanager_numgroups"] >= 1
    _commit(broker.bootstrap, "billing", ends)
    assert scrape(url)['kafka_consumergroup_lag_sum{consumergroup="billing",topic="orders"}'] == 0

    # A deleted topic's series go with it.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["orders"], operation_timeout=30)["orders"].result(timeout=60)
    wait_until(lambda: not any('topic="orders"' in key and not key.startswith("kafka_consumergroup")
                               for key in scrape(url)), what="the deleted topic's series gone", timeout_s=30)


def _commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    running = ZkCluster(zookeeper, tmp_path, (METRICS, "zookeeper.session.timeout.ms=6000",
                                              "replica.lag.time.max.ms=3000", "offsets.topic.num.partitions=3"))
    try:
        running.start()
        yield running
    finally:
        running.close()


def test_a_killed_broker_leaves_partitions_under_replicated_on_the_others(cluster: ZkCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic("replicated", 6, 3)], operation_timeout=30)["replicated"].result(timeout=60)
    wait_until(lambda: all(len(cluster.state("replicated", p)["isr"]) == 3 for p in range(6)),  # type: ignore[arg-type]
               what="every partition with its whole ISR", timeout_s=60)
    urls = {i: metrics_url(b) for i, b in cluster.brokers.items()}

    def total(name: str, ids: tuple[int, ...] = (1, 2, 3)) -> float:
        return sum(scrape(urls[i]).get(name, 0) for i in ids)

    assert total("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert total("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert total("kafka_server_replicamanager_leadercount") >= 6
    wait_until(lambda: total('kafka_network_requestmetrics_totaltimems_count{request="FetchFollower"}') > 0,
               what="followers' fetches counted as FetchFollower", timeout_s=30, interval_s=0.5)
    controller_id, _ = cluster.controller()
    victim = next(i for i in (3, 2, 1) if i != controller_id)
    survivors = tuple(i for i in (1, 2, 3) if i != victim)
    _produce(cluster.bootstrap(), "replicated", 60, 6)

    cluster.brokers[victim].kill()
    wait_until(lambda: total("kafka_server_replicamanager_underreplicatedpartitions", survivors) > 0,
               what="under-replicated partitions on the surviving brokers", timeout_s=60, interval_s=0.5)
    # The partitions the victim led got new leaders: the controller counted the elections.
    wait_until(lambda: total("kafka_controller_controllerstats_leaderelectionrateandtimems_count", survivors) > 0,
               what="leader elections counted", timeout_s=60, interval_s=0.5)
    assert total("kafka_controller_kafkacontroller_activecontrollercount", survivors) == 1
    assert total("kafka_controller_kafkacontroller_offlinepartitionscount", survivors) == 0
    per_partition = sum(v for i in survivors for k, v in scrape(urls[i]).items()
                        if k.startswith("kafka_cluster_partition_underreplicated{") and 'topic="replicated"' in k)
    assert per_partition > 0
