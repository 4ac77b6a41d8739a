"""KIP-890's server-side defence, over the raw protocol against a real broker: a transactional
produce to a partition the producer did not add to its open transaction is refused (Kafka's
INVALID_TXN_STATE, TRANSACTION_ABORTABLE from Produce v11) and nothing is appended; and
AddPartitionsToTxn v4/v5, the brokers' verify-only request, answers as Kafka's coordinator.
On a 3-broker ZooKeeper cluster, leaders that are not the coordinator ask it over the
inter-broker listener: Kafka's Java and confluent-kafka's transactional producers commit (and
abort) over partitions led by every broker, and a raw write to an unadded partition led
elsewhere is refused there too. EndTxn v5 (KIP-890 part 2) bumps the epoch at every end: the
ended transaction's late write is fenced, a retried EndTxn is answered the bumped epoch, and the
next transaction runs at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
import trio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import run_tool
from broker.client import TopicPartition, admin, open_client
from broker.client.cluster import Client
from broker.client.transactions import TransactionalProducer, init_transactional_producer
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ProduceRequest,
    ProduceResponse,
)
from broker.protocol.records import Record, build_batch
from deploy.broker_process import BrokerProcess
from tests.support.cluster import ZkCluster
from tests.support.consume import read_values
from tests.support.metrics import metrics_url, scrape
from tests.support.polling import wait_for
from tests.support.zookeeper import ZooKeeperServer

TIMEOUT_S = 20.0
PartitionResponse = ProduceResponse.PartitionProduceResponse


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    return module_broker


async def _produce(client: Client, producer: TransactionalProducer, topic: str, partition: int, value: bytes,
                   sequence: int, *, version: int, node_id: int | None = None) -> PartitionResponse:
    batch = build_batch([Record(None, value)], producer_id=producer.producer_id,
                        producer_epoch=producer.producer_epoch, base_sequence=sequence, is_transactional=True)
    request = ProduceRequest(transactional_id=producer.transactional_id, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    response: ProduceResponse = (await client.request_any(request, max_version=version, idempotent=False)
                                 if node_id is None else
                                 await client.request(node_id, request, max_version=version, idempotent=False))
    return response.responses[0].partition_responses[0]


async def _log_ends(client: Client, topic: str, count: int) -> list[int]:
    listed = await admin.list_offsets(client, {TopicPartition(topic, p): -1 for p in range(count)})
    return [listed[TopicPartition(topic, p)].offset for p in range(count)]


@pytest.mark.parametrize(("version", "code"), [(9, ErrorCode.INVALID_TXN_STATE),
                                               (11, ErrorCode.TRANSACTION_ABORTABLE)])
def test_a_write_to_a_partition_not_in_the_transaction_is_refused_and_not_appended(
        broker: BrokerProcess, version: int, code: ErrorCode) -> None:
    topic = f"txn-verify-{version}"

    async def main() -> None:
        async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
            await admin.create_topics(client, {topic: 2})
            producer = await init_transactional_producer(client, f"verify-{version}")
            await producer.add_partitions([TopicPartition(topic, 0)])
            added = await _produce(client, producer, topic, 0, b"added", 0, version=version)
            assert added.error_code == ErrorCode.NONE
            stray = await _produce(client, producer, topic, 1, b"stray", 0, version=version)
            assert (stray.error_code, stray.error_message) == (code, "Partition was not added to the transaction")
            assert await _log_ends(client, topic, 2) == [1, 0]
            await producer.end(commit=True)
            # The transaction ended: partition 0 is no longer in one, its next write is refused too.
            # Until the coordinator has written the markers (EndTxn answers at PrepareCommit), it
            # answers the verification CONCURRENT_TRANSACTIONS, which the leader passes on as the
            # retriable NOT_ENOUGH_REPLICAS: asked again, as a client retries.
            answers: list[PartitionResponse] = []

            async def late_write_answered() -> bool:
                answers.append(await _produce(client, producer, topic, 0, b"late", 1, version=version))
                return answers[-1].error_code != ErrorCode.NOT_ENOUGH_REPLICAS

            await wait_for(late_write_answered, what="the late write's answer after the transaction completed",
                           timeout_s=TIMEOUT_S)
            assert answers[-1].error_code == code
            # The first write, then its COMMIT marker; the late write is not there.
            assert await _log_ends(client, topic, 2) == [2, 0]
            # Added to the next transaction, the write goes in.
            await producer.add_partitions([TopicPartition(topic, 1)])
            again = await _produce(client, producer, topic, 1, b"now-added", 0, version=version)
            assert again.error_code == ErrorCode.NONE
            await producer.end(commit=False)

    trio.run(main)


def _verify_request(producer: TransactionalProducer, topic: str, partitions: list[int], *, epoch: int | None = None,
                    verify_only: bool = True) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id=producer.transactional_id, producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch if epoch is None else epoch, verify_only=verify_only,
        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])])


def _codes(response: AddPartitionsToTxnResponse) -> dict[tuple[str, int], int]:
    assert response.error_code == ErrorCode.NONE
    (result,) = response.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code for t in result.topic_results
            for p in t.results_by_partition}


def test_add_partitions_to_txn_v4_and_v5_verify_and_add_as_kafkas_coordinator(broker: BrokerProcess) -> None:
    topic = "txn-verify-only"

    async def main() -> None:
        async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
            await admin.create_topics(client, {topic: 3})
            producer = await init_transactional_producer(client, "verify-only")
            await producer.add_partitions([TopicPartition(topic, 0)])

            async def ask(request: AddPartitionsToTxnRequest, version: int) -> AddPartitionsToTxnResponse:
                response: AddPartitionsToTxnResponse = await client.request_any(request, max_version=version,
                                                                                idempotent=False)
                return response

            verify = _verify_request(producer, topic, [0, 1])
            assert _codes(await ask(verify, 5)) == {(topic, 0): ErrorCode.NONE,
                                                    (topic, 1): ErrorCode.TRANSACTION_ABORTABLE}
            # v4 does not know TRANSACTION_ABORTABLE.
            assert _codes(await ask(verify, 4)) == {(topic, 0): ErrorCode.NONE,
                                                    (topic, 1): ErrorCode.INVALID_TXN_STATE}
            # Verifying adds nothing; another epoch is fenced; an unknown partition is named.
            assert _codes(await ask(_verify_request(producer, topic, [1]), 5)) == {
                (topic, 1): ErrorCode.TRANSACTION_ABORTABLE}
            assert _codes(await ask(_verify_request(producer, topic, [0], epoch=producer.producer_epoch + 1), 5)) == {
                (topic, 0): ErrorCode.PRODUCER_FENCED}
            assert _codes(await ask(_verify_request(producer, topic, [0, 7]), 5)) == {
                (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED, (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            # Without VerifyOnly, the partitions are added.
            assert _codes(await ask(_verify_request(producer, topic, [2], verify_only=False), 5)) == {
                (topic, 2): ErrorCode.NONE}
            assert _codes(await ask(_verify_request(producer, topic, [0, 2]), 5)) == {
                (topic, 0): ErrorCode.NONE, (topic, 2): ErrorCode.NONE}
            await producer.end(commit=False)

    trio.run(main)


def test_end_txn_v5_bumps_the_epoch_at_every_end(broker: BrokerProcess) -> None:
    topic = "txn-end-v5"

    async def main() -> None:
        async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
            await admin.create_topics(client, {topic: 1})
            producer = await init_transactional_producer(client, "end-v5")
            pid, epoch = producer.producer_id, producer.producer_epoch

            async def end(commit: bool, at: int) -> EndTxnResponse:
                """EndTxn v5, asked again while the coordinator answers CONCURRENT_TRANSACTIONS."""
                answers: list[EndTxnResponse] = []

                async def answered() -> bool:
                    answers.append(await client.request_any(EndTxnRequest(
                        transactional_id="end-v5", producer_id=pid, producer_epoch=at, committed=commit),
                        max_version=5, idempotent=False))
                    return answers[-1].error_code != ErrorCode.CONCURRENT_TRANSACTIONS

                await wait_for(answered, what="EndTxn answered")
                return answers[-1]

            await producer.add_partitions([TopicPartition(topic, 0)])
            assert (await _produce(client, producer, topic, 0, b"committed", 0, version=11)).error_code == 0
            committed = await end(True, epoch)
            assert (committed.error_code, committed.producer_id, committed.producer_epoch) == (0, pid, epoch + 1)
            # Its COMMIT marker carries the new epoch: once it is in, a late write of the ended
            # transaction (the old epoch) is fenced, and nothing of it is appended.
            async def marker_in() -> bool:
                listed = await admin.list_offsets(client, {TopicPartition(topic, 0): -1}, isolation_level=1)
                return listed[TopicPartition(topic, 0)].offset == 2  # the record and its marker are stable

            await wait_for(marker_in, what="the COMMIT marker")
            late = await _produce(client, producer, topic, 0, b"late", 1, version=11)
            assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
            assert await _log_ends(client, topic, 1) == [2]
            # A retried EndTxn names the epoch before the bump and is answered the one after.
            retried = await end(True, epoch)
            assert (retried.error_code, retried.producer_epoch) == (0, epoch + 1)
            # The next transaction runs at the new epoch, its sequences from 0; abort bumps again.
            producer.producer_epoch = epoch + 1
            await producer.add_partitions([TopicPartition(topic, 0)])
            assert (await _produce(client, producer, topic, 0, b"aborted", 0, version=11)).error_code == 0
            aborted = await end(False, epoch + 1)
            assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 2)

    trio.run(main)
    assert read_values(broker.bootstrap, topic, 1, config={"isolation.level": "read_committed"}) == [b"committed"]


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    running = ZkCluster(zookeeper, tmp_path, ("transaction.state.log.num.partitions=1",
                                              "transaction.state.log.min.isr=1",
                                              "causeway.metrics.listener=127.0.0.1:0"))
    try:
        yield running.start()
    finally:
        running.close()


def _count_committed(bootstrap: str, topic: str, partitions: int, count: int) -> int:
    """Records a read_committed confluent-kafka reader sees in `topic`, until `count` have come,
    then one more bounded poll."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    try:
        for _ in range(120):
            if seen >= count:
                break
            seen += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
        seen += sum(1 for m in consumer.consume(100, 1.0) if m.error() is None)
    finally:
        consumer.close()
    return seen


def test_leaders_ask_a_coordinator_on_another_broker(cluster: ZkCluster, kafka_jars: None) -> None:
    bootstrap = cluster.bootstrap()
    # One partition led by each broker: two of them are not the coordinator's.
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    admin_client.create_topics([NewTopic("spread", 3, replica_assignment=[[1], [2], [3]])])["spread"].result(30)
    run = run_tool("kafka-producer-perf-test", "--topic", "spread", "--num-records", "30", "--record-size", "10",
                   "--throughput", "-1", "--transactional-id", "java-spread", "--transaction-duration-ms", "100",
                   "--command-property", f"bootstrap.servers={bootstrap}", "linger.ms=0",
                   "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
    assert run.returncode == 0, run.stdout + run.stderr
    # confluent-kafka's transactional producer too: a committed and an aborted transaction over
    # all three leaders.
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "librdkafka-spread"})
    producer.init_transactions(TIMEOUT_S)
    for commit in (True, False):
        producer.begin_transaction()
        for i in range(30):
            producer.produce("spread", b"c%d" % i, partition=i % 3)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    assert _count_committed(bootstrap, "spread", 3, 60) == 60
    # The leaders that are not the coordinator asked it over the inter-broker listener, and it
    # vouched for every write.
    before = [scrape(metrics_url(cluster.broker(b))) for b in (1, 2, 3)]
    assert sum(m.get('causeway_txn_verifications_total{coordinator="remote"}', 0) for m in before) > 0
    assert sum(m.get("kafka_server_addpartitionstotxnmanager_verificationfailure_total", 0) for m in before) == 0

    async def main() -> None:
        async with open_client(bootstrap, request_timeout_s=TIMEOUT_S) as client:
            producer = await init_transactional_producer(client, "raw-spread")
            found: FindCoordinatorResponse = await client.request_any(
                FindCoordinatorRequest(key_type=1, key="raw-spread", coordinator_keys=["raw-spread"]), max_version=3)
            assert found.error_code == ErrorCode.NONE
            leaders = {p: (await client.leader_for(TopicPartition("spread", p))).node_id for p in range(3)}
            (local,) = [p for p, leader in leaders.items() if leader == found.node_id]
            await producer.add_partitions([TopicPartition("spread", local)])
            ends = await _log_ends(client, "spread", 3)
            for partition in sorted(set(leaders) - {local}):
                refused = await _produce(client, producer, "spread", partition, b"stray", 0, version=11,
                                         node_id=leaders[partition])
                assert refused.error_code == ErrorCode.TRANSACTION_ABORTABLE, refused
            assert await _log_ends(client, "spread", 3) == ends
            added = await _produce(client, producer, "spread", local, b"added", 0, version=11,
                                   node_id=leaders[local])
            assert added.error_code == ErrorCode.NONE
            await producer.end(commit=False)

    trio.run(main)
    after = [scrape(metrics_url(cluster.broker(b))) for b in (1, 2, 3)]
    assert sum(m.get("kafka_server_addpartitionstotxnmanager_verificationfailure_total", 0) for m in after) == 2
