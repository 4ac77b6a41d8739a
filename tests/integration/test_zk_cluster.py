"""A three-broker ZooKeeper-mode cluster: real ZooKeeper, real broker processes, real clients.

The brokers register in Kafka's layout, one of them is elected controller, a topic created with
confluent-kafka's AdminClient gets replicas spread over the brokers with the whole ISR in its
state znodes, every broker answers the same metadata, an idempotent acks=all producer's records
all come back, a SIGKILLed leader is replaced from the ISR within the session timeout without
losing an acknowledged record, a SIGKILLed controller is replaced with a higher epoch, and a
hand-made controller request or a second broker with a taken id is refused. Topic configs,
partition growth and deletion go through the znodes; a broker frozen past its session timeout is
fenced, registers again and gets its preferred partitions back; SIGTERM moves leaderships first.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client.connection import open_connection
from broker.controller.zk.znodes import topic_id_from_string
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import AlterPartitionRequest, LeaderAndIsrRequest, UpdateMetadataRequest
from deploy.broker_process import BrokerProcess
from tests.integration.started_clusters import started
from tests.support.cluster import ZkCluster
from tests.support.polling import wait_until
from tests.support.zookeeper import ZooKeeperServer

SESSION_TIMEOUT_MS = 6000
# Small test clusters: few offsets partitions, a short lag bound so a dead follower leaves the ISR soon.
OVERRIDES = (f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}", "offsets.topic.num.partitions=3",
             "replica.lag.time.max.ms=4000", "min.insync.replicas=2", "controlled.shutdown.retry.backoff.ms=500",
             "leader.imbalance.check.interval.seconds=1")


class Cluster(ZkCluster):
    def __init__(self, zookeeper: ZooKeeperServer, root: Path, ids: tuple[int, ...] = (1, 2, 3)) -> None:
        super().__init__(zookeeper, root, OVERRIDES, ids)


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with started(Cluster(zookeeper, tmp_path)) as running:
        yield running


def _create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication)], operation_timeout=30)
    futures[name].result(timeout=60)


def _metadata(bootstrap: str, topic: str) -> tuple[set[int], dict[int, tuple[int, list[int], list[int]]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=15)
    parts = md.topics[topic].partitions
    return set(md.brokers), {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in parts.items()}


def _produce(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    _produce_to(bootstrap, topic, 0, values, acked)


def _produce_to(bootstrap: str, topic: str, partition: int, values: list[bytes], acked: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "linger.ms": 5})

    def report(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0, "records left unacknowledged"


def _consume_all(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, got) >= count, what=f"{count} records from {topic}-{partition}",
                   timeout_s=60)
    finally:
        consumer.close()
    return got


def _poll_into(consumer: Consumer, got: list[bytes]) -> int:
    for msg in consumer.consume(500, timeout=0.2):
        if msg.error() is None:
            got.append(msg.value())
    return len(got)


def test_a_ready_broker_already_names_the_controller(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """A broker reports ready only once the controller's metadata reached it, so an admin
    request sent right then (a CreateTopics) is not left waiting for a controller."""
    running = Cluster(zookeeper, tmp_path, ids=(1, 2))
    try:
        for broker_id in (1, 2):
            running.brokers[broker_id].start()
            answer = AdminClient({"bootstrap.servers": running.brokers[broker_id].bootstrap}).list_topics(timeout=10)
            assert answer.controller_id in (1, 2), answer.controller_id
            assert broker_id in answer.brokers
    finally:
        running.close()


def test_three_brokers_replicate_and_survive_a_leader_kill(cluster: Cluster) -> None:
    zk = cluster.zk
    # Registration in Kafka's layout.
    assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
    registration = json.loads(zk.get("/brokers/ids/2")[0])
    assert registration["version"] == 5
    assert registration["endpoints"] == [f"PLAINTEXT://{cluster.brokers[2].bootstrap}"]
    assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    controller_id, epoch = cluster.controller()
    assert controller_id in (1, 2, 3) and epoch >= 1

    _create_topic(cluster.bootstrap(), "orders", 3, 3)
    leaders = {p: cluster.state("orders", p)["leader"] for p in range(3)}
    assert sorted(leaders.values()) == [1, 2, 3], f"leaders not spread: {leaders}"
    for p in range(3):
        assert sorted(cluster.state("orders", p)["isr"]) == [1, 2, 3]  # type: ignore[arg-type]
    # Every broker tells clients the same cluster.
    views = [_metadata(b.bootstrap, "orders") for b in cluster.brokers.values()]
    for brokers, parts in views:
        assert brokers == {1, 2, 3}
        assert {p: leader for p, (leader, _, _) in parts.items()} == leaders

    first = [f"a-{i}".encode() for i in range(300)]
    acked: list[bytes] = []
    _produce(cluster.bootstrap(), "orders", first, acked)
    assert sorted(acked) == sorted(first)

    # SIGKILL the leader of partition 0: a new leader from the ISR within the session timeout.
    old_leader = int(leaders[0])
    old_epoch = int(cluster.state("orders", 0)["leader_epoch"])  # type: ignore[call-overload]
    cluster.brokers[old_leader].kill()
    wait_until(lambda: cluster.state("orders", 0)["leader"] not in (old_leader, -1),
               what="a new leader of orders-0", timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    state = cluster.state("orders", 0)
    assert state["leader_epoch"] > old_epoch  # type: ignore[operator]
    assert old_leader not in state["isr"]  # type: ignore[operator]

    second = [f"b-{i}".encode() for i in range(300)]
    _produce(cluster.bootstrap(), "orders", second, acked)
    assert sorted(acked) == sorted(first + second)
    got = _consume_all(cluster.bootstrap(), "orders", 0, len(first) + len(second))
    assert got == first + second, "records lost, duplicated or reordered across the leader change"


def test_controller_failover_and_fencing(cluster: Cluster) -> None:
    controller_id, epoch = cluster.controller()
    _create_topic(cluster.bootstrap(), "fenced", 1, 3)
    before = cluster.state("fenced", 0)
    other = next(b for b in cluster.brokers if b != controller_id)
    target = cluster.brokers[other]
    host, port = target.bootstrap.rsplit(":", 1)

    async def send_forged() -> list[int]:
        codes = []
        broker_epoch = cluster.zk.get(f"/brokers/ids/{other}")[1].czxid
        async with open_connection(host, int(port)) as conn:
            for forged_id, forged_epoch, forged_broker_epoch in (
                (controller_id, epoch - 1, broker_epoch),        # a deposed controller's epoch
                (controller_id, epoch + 5, broker_epoch),        # an epoch ZooKeeper never gave
                (other, epoch, broker_epoch),                    # not the controller
                (controller_id, epoch, broker_epoch + 1000),     # another life of the broker
            ):
                answer = await conn.request(LeaderAndIsrRequest(
                    controller_id=forged_id, controller_epoch=forged_epoch, broker_epoch=forged_broker_epoch,
                    topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                        topic_name="fenced", topic_id=uuid.uuid4(), partition_states=[
                            LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                                topic_name="fenced", partition_index=0, controller_epoch=forged_epoch,
                                leader=other, leader_epoch=99, isr=[other], partition_epoch=99,
                                replicas=[other])])]))
                codes.append(answer.error_code)
            update = await conn.request(UpdateMetadataRequest(
                controller_id=controller_id, controller_epoch=epoch - 1, broker_epoch=broker_epoch))
            codes.append(update.error_code)
        return codes

    codes = trio.run(send_forged)
    assert codes == [ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_CONTROLLER_EPOCH,
                     ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_BROKER_EPOCH,
                     ErrorCode.STALE_CONTROLLER_EPOCH]

    # AlterPartition (KIP-497) is checked by the controller: broker epoch, leader epoch, partition epoch.
    leader = int(before["leader"])  # type: ignore[call-overload]
    topic_id = topic_id_from_string(json.loads(cluster.zk.get("/brokers/topics/fenced")[0])["topic_id"])
    leader_epoch, partition_epoch = int(before["leader_epoch"]), int(before["zk_version"])  # type: ignore[call-overload]
    leader_broker_epoch = cluster.zk.get(f"/brokers/ids/{leader}")[1].czxid

    async def alter(at: str, broker_epoch: int, epoch: int, version: int) -> tuple[int, int]:
        host, port = at.rsplit(":", 1)
        request = AlterPartitionRequest(broker_id=leader, broker_epoch=broker_epoch, topics=[
            AlterPartitionRequest.TopicData(topic_id=topic_id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=epoch, partition_epoch=version,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=leader)])])])
        async with open_connection(host, int(port)) as conn:
            answer = await conn.request(request)
        inner = answer.topics[0].partitions[0].error_code if answer.topics else 0
        return answer.error_code, inner

    at_controller = cluster.brokers[controller_id].bootstrap
    assert trio.run(alter, at_controller, leader_broker_epoch + 7, leader_epoch, partition_epoch) == (
        ErrorCode.STALE_BROKER_EPOCH, 0)
    assert trio.run(alter, at_controller, leader_broker_epoch, leader_epoch - 1, partition_epoch) == (
        0, ErrorCode.FENCED_LEADER_EPOCH)
    assert trio.run(alter, at_controller, leader_broker_epoch, leader_epoch, partition_epoch + 3) == (
        0, ErrorCode.INVALID_UPDATE_VERSION)
    assert trio.run(alter, target.bootstrap if other != controller_id else at_controller, leader_broker_epoch,
                    leader_epoch, partition_epoch)[0] == ErrorCode.NOT_CONTROLLER
    # Every refused request asked for an ISR of the leader alone: none was written.
    assert cluster.state("fenced", 0)["isr"] != [leader], "a refused AlterPartition wrote"
    assert target.proc is not None and target.proc.poll() is None, "the broker died of a forged request"
    _, parts = _metadata(target.bootstrap, "fenced")
    assert parts[0][0] == before["leader"], "a forged LeaderAndIsr changed the partition's leader"

    # SIGKILL the controller: another broker takes over with a higher epoch.
    cluster.brokers[controller_id].kill()
    wait_until(lambda: cluster.controller()[0] not in (-1, controller_id),
               what="a new controller", timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    new_id, new_epoch = cluster.controller()
    assert new_epoch > epoch
    # The new controller is in charge: the partitions the old one led get leaders again.
    wait_until(lambda: cluster.state("fenced", 0)["leader"] not in (controller_id, -1),
               what="fenced-0 led by a live broker", timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    assert int(cluster.state("fenced", 0)["controller_epoch"]) <= new_epoch  # type: ignore[call-overload]

    # A second broker with a taken id is refused, naming the id.
    duplicate = BrokerProcess(cluster.root / "duplicate",
                              overrides=(f"zookeeper.connect={cluster.zookeeper.connect}", f"node.id={new_id}",
                                         "zookeeper.session.timeout.ms=1000"))
    with pytest.raises(RuntimeError) as info:
        duplicate.start()
    assert f"broker id {new_id} is already registered in ZooKeeper" in str(info.value)


def test_topic_lifecycle_through_zookeeper_and_a_controlled_shutdown(cluster: Cluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    zk = cluster.zk
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    _create_topic(cluster.bootstrap(), "shaped", 2, 2)
    assert json.loads(zk.get("/brokers/topics/shaped")[0])["version"] == 3

    # A config change goes to /config/topics/<t> with a notification every broker applies.
    resource = ConfigResource("topic", "shaped", incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    assert json.loads(zk.get("/config/topics/shaped")[0]) == {"version": 1, "config": {"retention.ms": "123456"}}
    assert any(c.startswith("config_change_") for c in zk.get_children("/config/changes"))

    def retention_on(bootstrap: str) -> str | None:
        other = AdminClient({"bootstrap.servers": bootstrap})
        described = other.describe_configs([ConfigResource("topic", "shaped")])
        entries = next(iter(described.values())).result(timeout=15)
        return entries["retention.ms"].value

    for process in cluster.brokers.values():
        wait_until(lambda p=process: retention_on(p.bootstrap) == "123456",
                   what=f"retention.ms on {process.bootstrap}", timeout_s=30)

    # Partition growth: the assignment znode grows and the new partition gets a leader.
    admin.create_partitions([NewPartitions("shaped", 3)])["shaped"].result(timeout=60)
    assert sorted(json.loads(zk.get("/brokers/topics/shaped")[0])["partitions"]) == ["0", "1", "2"]
    assert cluster.state("shaped", 2)["leader"] in (1, 2, 3)
    for process in cluster.brokers.values():
        wait_until(lambda p=process: len(_metadata(p.bootstrap, "shaped")[1]) == 3,
                   what=f"3 partitions in the metadata of {process.bootstrap}", timeout_s=30)

    # A topic znode holding garbage: named in the controller's log and in the answer, nothing stops.
    zk.create("/brokers/topics/garbage", b"{not json")
    controller = cluster.brokers[cluster.controller()[0]]
    wait_until(lambda: "znode /brokers/topics/garbage" in controller.log_tail(200),
               what="the controller naming the garbage znode", timeout_s=30)
    with pytest.raises(Exception, match="znode /brokers/topics/garbage"):
        admin.create_partitions([NewPartitions("garbage", 2)])["garbage"].result(timeout=30)
    assert all(p.proc is not None and p.proc.poll() is None for p in cluster.brokers.values())

    # Explicit replica assignments, on creation and growth, checked as Kafka checks them.
    created = admin.create_topics([NewTopic("placed", 2, replica_assignment=[[3, 1], [2, 3]])])
    created["placed"].result(timeout=60)
    assert json.loads(zk.get("/brokers/topics/placed")[0])["partitions"] == {"0": [3, 1], "1": [2, 3]}
    assert [cluster.state("placed", p)["leader"] for p in (0, 1)] == [3, 2]
    admin.create_partitions([NewPartitions("placed", 3, [[1, 2]])])["placed"].result(timeout=60)
    assert json.loads(zk.get("/brokers/topics/placed")[0])["partitions"]["2"] == [1, 2]
    refused = admin.create_topics([NewTopic("misplaced", 1, replica_assignment=[[1, 1]])])
    with pytest.raises(Exception, match="Duplicate replica assignment found"):
        refused["misplaced"].result(timeout=30)
    refused = admin.create_topics([NewTopic("nowhere", 1, replica_assignment=[[1, 9]])])
    with pytest.raises(Exception, match=r"Unknown broker\(s\) in replica assignment: 9"):
        refused["nowhere"].result(timeout=30)

    # Deletion: replicas stopped and deleted on every broker, znodes removed.
    admin.delete_topics(["shaped"], operation_timeout=30)["shaped"].result(timeout=60)
    # The controller removes them in Kafka's order (TopicDeletionManager.completeDeleteTopic), one
    # ZooKeeper operation each: the topic, its config, then the deletion request. Seeing the first
    # go says nothing of the others yet: wait for all three.
    gone = ("/brokers/topics/shaped", "/config/topics/shaped", "/admin/delete_topics/shaped")
    wait_until(lambda: all(zk.exists(path) is None for path in gone), what=f"{', '.join(gone)} removed",
               timeout_s=30)
    for process in cluster.brokers.values():
        wait_until(lambda p=process: not any(d.name.startswith("shaped-") for d in p.data_dir.iterdir()),
                   what=f"shaped's logs gone from {process.data_dir}", timeout_s=30)
        md = AdminClient({"bootstrap.servers": process.bootstrap}).list_topics(timeout=15)
        assert "shaped" not in md.topics

    # A deletion while a replica's broker is down completes when it comes back, with its log gone.
    _create_topic(cluster.bootstrap(), "doomed", 1, 3)
    absent = next(b for b in cluster.brokers if b != cluster.controller()[0])
    port = cluster.brokers[absent].port
    # The topic is created once its znodes are written; each broker makes its replica's log when
    # the controller's LeaderAndIsr reaches it, which a loaded machine may delay past the kill.
    replica_log = cluster.brokers[absent].data_dir / "doomed-0"
    wait_until(replica_log.exists, what=f"{replica_log} made", timeout_s=30)
    cluster.brokers[absent].kill()
    wait_until(lambda: zk.exists(f"/brokers/ids/{absent}") is None, what=f"broker {absent}'s session to expire",
               timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    survivor = next(p for b, p in cluster.brokers.items() if b != absent)
    survivor_admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    survivor_admin.delete_topics(["doomed"], operation_timeout=5)["doomed"].result(timeout=60)
    assert zk.exists("/admin/delete_topics/doomed") is not None, "deleted before every replica was"
    assert (cluster.brokers[absent].data_dir / "doomed-0").exists()
    cluster.brokers[absent].start(port=port)
    wait_until(lambda: zk.exists("/brokers/topics/doomed") is None and zk.exists("/admin/delete_topics/doomed") is None,
               what="the deletion of doomed to complete", timeout_s=30)
    assert not (cluster.brokers[absent].data_dir / "doomed-0").exists()

    # Last (it leaves two brokers): SIGTERM moves leaderships before the broker exits.
    _sigterm_moves_leaderships_before_the_broker_exits(cluster)


def test_a_frozen_broker_is_fenced_and_registers_again(cluster: Cluster) -> None:
    import os
    import signal

    zk = cluster.zk
    _create_topic(cluster.bootstrap(), "frozen", 3, 3)
    leaders = {p: int(cluster.state("frozen", p)["leader"]) for p in range(3)}  # type: ignore[call-overload]
    victim = leaders[0]
    if victim == cluster.controller()[0]:
        victim = leaders[1] if leaders[1] != victim else leaders[2]
    partition = next(p for p, leader in leaders.items() if leader == victim)
    before = zk.get(f"/brokers/ids/{victim}")[1].czxid
    acked: list[bytes] = []
    first = [f"f-{i}".encode() for i in range(100)]
    _produce(cluster.bootstrap(), "frozen", first, acked)

    process = cluster.brokers[victim].proc
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        # Past the session timeout: its registration goes and its partition another leader.
        wait_until(lambda: zk.exists(f"/brokers/ids/{victim}") is None, what=f"broker {victim}'s session to expire",
                   timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
        wait_until(lambda: cluster.state("frozen", partition)["leader"] not in (victim, -1),
                   what=f"a new leader of frozen-{partition}", timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    # Thawed: it registers again with a new broker epoch, and no longer leads what it led.
    wait_until(lambda: (stat := zk.exists(f"/brokers/ids/{victim}")) is not None and stat.czxid != before,
               what=f"broker {victim} registered again", timeout_s=3 * SESSION_TIMEOUT_MS / 1000)
    assert process.poll() is None, f"broker {victim} died:\n{cluster.brokers[victim].log_tail()}"
    assert "fencing its leaderships" in cluster.brokers[victim].log_tail(400)
    second = [f"g-{i}".encode() for i in range(100)]
    _produce(cluster.bootstrap(), "frozen", second, acked)
    got = _consume_all(cluster.bootstrap(), "frozen", 0, len(first) + len(second))
    assert got == first + second
    # Back in the ISR, the preferred replica takes its partition back (auto.leader.rebalance.enable).
    wait_until(lambda: cluster.state("frozen", partition)["leader"] == victim,
               what=f"broker {victim} leading frozen-{partition} again", timeout_s=30)


def _sigterm_moves_leaderships_before_the_broker_exits(cluster: Cluster) -> None:
    # Leaders are spread over the three brokers: one partition is led by a broker that is not
    # the controller (the controller's own shutdown is a plain resignation, as in Kafka).
    _create_topic(cluster.bootstrap(), "calm", 3, 3)
    controller_id, _ = cluster.controller()
    partition, leader = next((p, int(cluster.state("calm", p)["leader"]))  # type: ignore[call-overload]
                             for p in range(3) if cluster.state("calm", p)["leader"] != controller_id)
    acked: list[bytes] = []
    first = [f"c-{i}".encode() for i in range(100)]
    _produce_to(cluster.bootstrap(), "calm", partition, first, acked)

    assert cluster.brokers[leader].stop() == 0
    assert f"controlled shutdown of broker {leader} done" in cluster.brokers[leader].log_tail(200)
    state = cluster.state("calm", partition)
    assert state["leader"] not in (leader, -1) and leader not in state["isr"]  # type: ignore[operator]

    second = [f"d-{i}".encode() for i in range(100)]
    _produce_to(cluster.bootstrap(), "calm", partition, second, acked)
    assert _consume_all(cluster.bootstrap(), "calm", partition, 200) == first + second


def test_unreachable_zookeeper_is_a_clear_start_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as reserved:  # a port nobody listens on
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        process = BrokerProcess(tmp_path / "broker", overrides=(f"zookeeper.connect=127.0.0.1:{port}",
                                                               "zookeeper.connection.timeout.ms=1500"))
        with pytest.raises(RuntimeError) as info:
            process.start()
    text = str(info.value)
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port} (attempt 1" in text
    assert f"causeway: cannot start: cannot connect to ZooKeeper at 127.0.0.1:{port} within 1500 ms" in text


def test_a_standalone_broker_refuses_controller_requests(broker: BrokerProcess) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)

    async def forge() -> tuple[int, int]:
        async with open_connection(host, int(port)) as conn:
            lai = await conn.request(LeaderAndIsrRequest(
                controller_id=0, controller_epoch=1, broker_epoch=0,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name="x", topic_id=uuid.uuid4(), partition_states=[
                        LeaderAndIsrRequest.LeaderAndIsrPartitionState(partition_index=0, leader=0, replicas=[0],
                                                                       isr=[0])])]))
            update = await conn.request(UpdateMetadataRequest(controller_id=0, controller_epoch=1, broker_epoch=0))
            return lai.error_code, update.error_code

    assert trio.run(forge) == (ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_CONTROLLER_EPOCH)
    assert broker.proc is not None and broker.proc.poll() is None
    assert not (broker.data_dir / "x-0").exists()
