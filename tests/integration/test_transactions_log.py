"""Transactions in the log (issue 23, the log's slice) against a real broker process.

The test plays the transaction coordinator itself (tests/compat/test_transactions.py drives the
real one), with raw requests of the repo's codec: Produce with transactional batches (built by
the repo's record-batch encoder) and WriteTxnMarkers. Real read_committed consumers (librdkafka,
kafka-python, aiokafka, Kafka's Java consumer) see the committed records only, in order, and the
aborted ones never; read_uncommitted ones see all. The last stable offset and the aborted
transaction index survive a restart; bad input gets Kafka's errors. With no coordinator to ask,
its brokers run without KIP-890's verification (`transaction.partition.verification.enable=false`,
as Kafka's own log tests run), which tests/integration/test_txn_verification.py covers.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka.admin import AclOperation, NewTopic, ResourceType
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from bench.peers import run_tool
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from broker.protocol.records import Record, build_batch
from broker.storage.txn_index import read_entries
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import call, connect, message_frame, read_frame_or_none
from tests.support.consume import read_values
from tests.support.secured import TIMEOUT_S, acl_broker, admin, allow, grant

TOPIC = "txn"
MARKERS_VERSION = 1
# This test is the coordinator: no broker-side verification to ask one (see the module).
UNVERIFIED = "transaction.partition.verification.enable=false"
# Producer ids no InitProducerId of this broker hands out during the test.
A, B, C = 10_001, 10_002, 10_003


class Coordinator:
    """What a transaction coordinator would send, over one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation = 0
        self.sequences: dict[int, int] = {}

    def _call(self, request: object, version: int) -> object:
        self.correlation += 1
        return call(self.sock, request, version, self.correlation)

    def produce(self, pid: int | None, *values: bytes) -> int:
        """A batch of ``values``: transactional from producer ``pid``, plain when None."""
        now = int(time.time() * 1000)
        if pid is None:
            batch = build_batch([Record(None, v, timestamp=now) for v in values])
        else:
            seq = self.sequences.get(pid, 0)
            self.sequences[pid] = seq + len(values)
            batch = build_batch([Record(None, v, timestamp=now) for v in values], producer_id=pid, producer_epoch=0,
                                base_sequence=seq, is_transactional=True)
        response = self._call(ProduceRequest(transactional_id=None if pid is None else f"tx-{pid}", acks=-1,
                                             timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
                                                 name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
                                                     index=0, records=batch)])]), 9)
        assert isinstance(response, ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.NONE, part.error_message
        return part.base_offset

    def markers(self, pid: int, commit: bool, topics: dict[str, list[int]] | None = None,
                coordinator_epoch: int = 0) -> dict[tuple[str, int], int]:
        """WriteTxnMarkers for one producer; each partition's error code."""
        response = self._call(WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=0, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                    for name, indexes in (topics or {TOPIC: [0]}).items()])]), MARKERS_VERSION)
        assert isinstance(response, WriteTxnMarkersResponse)
        assert [m.producer_id for m in response.markers] == [pid]
        return {(t.name, p.partition_index): p.error_code for t in response.markers[0].topics for p in t.partitions}

    def latest(self, *, read_committed: bool) -> int:
        response = self._call(ListOffsetsRequest(replica_id=-1, isolation_level=int(read_committed), topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 7)
        assert isinstance(response, ListOffsetsResponse)
        part = response.topics[0].partitions[0]
        assert part.error_code == ErrorCode.NONE
        return int(part.offset)

    def fetch(self, offset: int, *, read_committed: bool) -> FetchResponse.PartitionData:
        response = self._call(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                           isolation_level=int(read_committed), session_epoch=-1, topics=[
                                               FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                                                   FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                                               partition_max_bytes=1 << 20)])]), 11)
        assert isinstance(response, FetchResponse)
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NONE
        return part


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", topics=(f"{TOPIC}:1",), overrides=(UNVERIFIED,)).start()
    try:
        yield process
    finally:
        if process.proc is not None:
            assert process.stop() == 0, process.log_tail()


def read_confluent(bootstrap: str, isolation: str, count: int) -> list[bytes]:
    """Values of partition 0 from the start as librdkafka reads them, until ``count`` have come,
    then one more bounded poll that must bring nothing more."""
    return read_values(bootstrap, TOPIC, count, config={"isolation.level": isolation})


def read_kafka_python(bootstrap: str, isolation: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    partition = KafkaPythonPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values: list[bytes] = []
    try:
        for _ in range(60):
            batches = consumer.poll(timeout_ms=500)
            values += [r.value for records in batches.values() for r in records]
            if len(values) >= count:
                break
        values += [r.value for records in consumer.poll(timeout_ms=1000).values() for r in records]
    finally:
        consumer.close()
    return values


def test_read_committed_consumers_see_committed_records_only_in_order_across_a_restart(
        broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        coordinator = Coordinator(sock)
        assert coordinator.produce(A, b"a1", b"a2") == 0
        assert coordinator.produce(B, b"b1") == 2
        coordinator.produce(None, b"c1")
        coordinator.produce(A, b"a3")
        assert coordinator.markers(A, commit=True) == {(TOPIC, 0): ErrorCode.NONE}
        assert coordinator.produce(B, b"b2") == 6
        assert coordinator.markers(B, commit=False) == {(TOPIC, 0): ErrorCode.NONE}
        coordinator.produce(None, b"c2")
        open_at = coordinator.produce(C, b"open")
        coordinator.produce(None, b"d1")
        assert open_at == 9
        # The last stable offset stops at C's open transaction; the high watermark does not.
        assert coordinator.latest(read_committed=True) == open_at
        assert coordinator.latest(read_committed=False) == 11
        committed = coordinator.fetch(0, read_committed=True)
        assert committed.last_stable_offset == open_at and committed.high_watermark == 11
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions or []] == [(B, 2)]
        uncommitted = coordinator.fetch(0, read_committed=False)
        assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == open_at
        # Past the abort's marker nothing is aborted any more.
        assert coordinator.fetch(8, read_committed=True).aborted_transactions == []

    visible = [b"a1", b"a2", b"c1", b"a3", b"c2"]
    everything = [b"a1", b"a2", b"b1", b"c1", b"a3", b"b2", b"c2", b"open", b"d1"]
    assert read_confluent(broker.bootstrap, "read_committed", len(visible)) == visible
    assert read_kafka_python(broker.bootstrap, "read_committed", len(visible)) == visible
    assert read_confluent(broker.bootstrap, "read_uncommitted", len(everything)) == everything
    assert read_kafka_python(broker.bootstrap, "read_uncommitted", len(everything)) == everything

    # A restart rebuilds C's open transaction and B's abort from the log.
    partition_dir = broker.data_dir / f"{TOPIC}-0"
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in
            read_entries(partition_dir / "00000000000000000000.txnindex")] == [(B, 2, 7)]
    broker.restart()
    with connect(broker.bootstrap, timeout_s=30) as sock:
        coordinator = Coordinator(sock)
        coordinator.sequences[C] = 1
        assert coordinator.latest(read_committed=True) == open_at
        assert [(t.producer_id, t.first_offset)
                for t in coordinator.fetch(0, read_committed=True).aborted_transactions or []] == [(B, 2)]
        assert read_confluent(broker.bootstrap, "read_committed", len(visible)) == visible
        # The marker after the restart ends the transaction the log remembered.
        assert coordinator.markers(C, commit=True) == {(TOPIC, 0): ErrorCode.NONE}
        assert coordinator.latest(read_committed=True) == coordinator.latest(read_committed=False) == 12
    assert read_confluent(broker.bootstrap, "read_committed", 7) == [*visible, b"open", b"d1"]
    assert read_kafka_python(broker.bootstrap, "read_committed", 7) == [*visible, b"open", b"d1"]


def test_bad_markers_get_kafkas_errors_and_the_broker_stays_up(broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        coordinator = Coordinator(sock)
        # Unknown topics and partitions; a producer with no transaction here ends an empty one.
        assert coordinator.markers(A, commit=True, topics={"nope": [0], TOPIC: [5, 0]}) == {
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (TOPIC, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (TOPIC, 0): ErrorCode.NONE}
        assert coordinator.latest(read_committed=True) == coordinator.latest(read_committed=False) == 1
        # A coordinator epoch older than the last marker's is fenced.
        assert coordinator.markers(A, commit=False, coordinator_epoch=5) == {(TOPIC, 0): ErrorCode.NONE}
        assert coordinator.markers(A, commit=False, coordinator_epoch=4) == {
            (TOPIC, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    # A markers array that claims 2**31 - 1 entries: the connection is closed, nothing allocated.
    with connect(broker.bootstrap, timeout_s=30) as sock:
        frame = bytearray(message_frame(WriteTxnMarkersRequest(markers=[]), 0))
        struct.pack_into(">i", frame, len(frame) - 4, 2**31 - 1)
        sock.sendall(frame)
        assert read_frame_or_none(sock) is None
    with connect(broker.bootstrap, timeout_s=30) as sock:
        assert Coordinator(sock).latest(read_committed=False) == 2
    assert broker.proc is not None and broker.proc.poll() is None


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    """ACLs on; topics without ACLs open to everyone; ClusterAction granted to bob alone."""
    process = acl_broker(tmp_path / "secured", "allow.everyone.if.no.acl.found=true", UNVERIFIED).start()
    try:
        client = admin(process)
        client.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=TIMEOUT_S)
        grant(process, [allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION)])
        yield process
    finally:
        process.stop()


def _logged_in(broker: BrokerProcess, user: str) -> socket.socket:
    host, port = broker.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    assert call(sock, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
    token = f"\0{user}\0{user}-secret".encode()
    assert call(sock, SaslAuthenticateRequest(auth_bytes=token), 2, correlation_id=2).error_code == ErrorCode.NONE
    return sock


def test_markers_need_cluster_action(secured: BrokerProcess) -> None:
    """Anyone may produce to the topic (it has no ACLs), but only a principal with ClusterAction
    on the cluster (a broker's: bob here) may end a transaction: alice's markers are refused and
    write nothing."""
    with _logged_in(secured, "alice") as sock:
        client = Coordinator(sock)
        client.correlation = 2
        client.produce(A, b"x")
        assert client.markers(A, commit=False) == {(TOPIC, 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        assert client.latest(read_committed=True) == 0
        assert client.latest(read_committed=False) == 1
    with _logged_in(secured, "bob") as sock:
        broker_principal = Coordinator(sock)
        broker_principal.correlation = 2
        assert broker_principal.markers(A, commit=False) == {(TOPIC, 0): ErrorCode.NONE}
        assert broker_principal.latest(read_committed=True) == 2


def test_kafkas_java_consumer_reads_committed_records_only(broker: BrokerProcess, kafka_jars: None) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        coordinator = Coordinator(sock)
        coordinator.produce(A, b"kept-1", b"kept-2")
        coordinator.produce(B, b"aborted")
        assert coordinator.markers(B, commit=False) == {(TOPIC, 0): ErrorCode.NONE}
        coordinator.produce(None, b"plain")
        assert coordinator.markers(A, commit=True) == {(TOPIC, 0): ErrorCode.NONE}
        coordinator.produce(C, b"open")

    def consume(isolation: str, count: int) -> list[str]:
        run = run_tool("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
                       "--partition", "0", "--offset", "earliest", "--max-messages", str(count),
                       "--timeout-ms", "15000", "--command-property", f"isolation.level={isolation}")
        return run.lines

    # read_committed: the two committed records and the plain one, in offset order; nothing of B
    # (aborted) nor of C (open): the tool times out waiting for a fourth.
    assert consume("read_committed", 4) == ["kept-1", "kept-2", "plain"]
    assert consume("read_uncommitted", 5) == ["kept-1", "kept-2", "aborted", "plain", "open"]


def test_aiokafka_reads_committed_records_only(broker: BrokerProcess) -> None:
    with connect(broker.bootstrap, timeout_s=30) as sock:
        coordinator = Coordinator(sock)
        coordinator.produce(A, b"kept")
        coordinator.produce(B, b"aborted")
        assert coordinator.markers(B, commit=False) == {(TOPIC, 0): ErrorCode.NONE}
        assert coordinator.markers(A, commit=True) == {(TOPIC, 0): ErrorCode.NONE}
        coordinator.produce(C, b"open")

    async def consume(isolation: str, count: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioPartition(TOPIC, 0)])
            values: list[bytes] = []
            for _ in range(20):  # bounded: each poll waits at most half a second
                batches = await consumer.getmany(timeout_ms=500)
                values += [r.value for records in batches.values() for r in records if r.value is not None]
                if len(values) >= count:
                    break
            batches = await consumer.getmany(timeout_ms=1000)  # nothing more comes
            values += [r.value for records in batches.values() for r in records if r.value is not None]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(consume("read_committed", 1)) == [b"kept"]
    assert asyncio.run(consume("read_uncommitted", 3)) == [b"kept", b"aborted", b"open"]
