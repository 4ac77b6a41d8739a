"""Issue 10, items 3 and 4 together: a fetch of hundreds of partitions under a low open-file limit.

A fetch answer holds each partition's segment descriptor pinned until it is sent (so retention or
compaction cannot close or swap the file under a length already encoded). One fetch of 300
partitions used to pin 300 descriptors: under RLIMIT_NOFILE=256 the broker hit EMFILE, closed the
fetching connection after an internal-error traceback, and refused connections for minutes. Now
the pins come from a broker-wide budget: a partition that gets none is answered without records
this time, and clients fetch it again.

The attack: several raw clients fetch all partitions at once in a bounded loop while a librdkafka
consumer reads everything; every record arrives, descriptors stay under the limit, the broker
keeps accepting connections and logs no traceback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import ApiVersionsRequest, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from broker.protocol.records import Record, build_batch, split_batches
from deploy.broker_process import BrokerProcess
from deploy.child_process import fd_count
from deploy.kafka_socket import call, connect

TOPIC = "wide"
PARTITIONS = 300
NOFILE = 256
ROUNDS = 3  # produce requests, each one batch per partition
PER_BATCH = 4  # records per batch
RAW_FETCHERS = 4
MAX_FETCHES = 400  # per raw fetcher: the loop always ends
FETCH_VERSION = 11  # topic names, and a response header of just the correlation id


def _produce(broker: BrokerProcess) -> dict[int, int]:
    """ROUNDS batches of PER_BATCH records in every partition; the end offset of each."""
    ends = dict.fromkeys(range(PARTITIONS), 0)
    with connect(broker.bootstrap) as sock:
        for r in range(ROUNDS):
            request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
                name=TOPIC, partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=build_batch(
                        [Record(None, b"p%d-r%d-%d" % (p, r, i)) for i in range(PER_BATCH)]))
                    for p in range(PARTITIONS)])])
            response: ProduceResponse = call(sock, request, 8, r)
            for topic in response.responses:
                for part in topic.partition_responses:
                    assert part.error_code == 0, (part.index, part.error_code)
                    ends[part.index] = part.base_offset + PER_BATCH
    return ends


def _fetch_everything(broker: BrokerProcess, ends: dict[int, int]) -> tuple[int, int]:
    """Fetch all partitions in every request until each is read to its end: (records, fetches).

    The request lists the partitions in the same order every time, as a client that does not
    rotate would; every answer must be a well-formed fetch response without errors.
    """
    positions = dict.fromkeys(ends, 0)
    records = 0
    with connect(broker.bootstrap) as sock:
        for n in range(MAX_FETCHES):
            if all(positions[p] >= ends[p] for p in ends):
                return records, n
            request = FetchRequest(replica_id=-1, max_wait_ms=200, min_bytes=1, max_bytes=50 << 20, topics=[
                FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                    FetchRequest.FetchPartition(partition=p, fetch_offset=positions[p], partition_max_bytes=1 << 20)
                    for p in sorted(ends)])])
            response: FetchResponse = call(sock, request, FETCH_VERSION, n)
            assert response.error_code == 0
            for topic in response.responses:
                for part in topic.partitions:
                    assert part.error_code == ErrorCode.NONE, (part.partition_index, ErrorCode(part.error_code))
                    assert part.high_watermark == ends[part.partition_index]
                    for _, header in split_batches(part.records or b""):
                        if header.last_offset >= positions[part.partition_index]:
                            records += header.last_offset + 1 - max(header.base_offset,
                                                                    positions[part.partition_index])
                            positions[part.partition_index] = header.last_offset + 1
    missing = {p: ends[p] - positions[p] for p in ends if positions[p] < ends[p]}
    raise AssertionError(f"not read after {MAX_FETCHES} fetches: {len(missing)} partitions")


def _consume_everything(broker: BrokerProcess, total: int) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fd-check",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 90
        while len(seen) < total and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen.add(msg.value() or b"")
    finally:
        consumer.close()
    return seen


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", topics=(f"{TOPIC}:{PARTITIONS}",), nofile=NOFILE).start()
    try:
        yield process
    finally:
        process.stop()


def test_fetching_hundreds_of_partitions_at_once_stays_under_the_open_file_limit(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    pid = broker.proc.pid
    ends = _produce(broker)
    total = sum(ends.values())
    assert total == PARTITIONS * ROUNDS * PER_BATCH

    peak = [fd_count(pid)]
    done = threading.Event()

    def sample() -> None:  # the broker's descriptors, from /proc, for as long as the attack runs
        while not done.is_set():
            try:
                peak[0] = max(peak[0], fd_count(pid))
            except FileNotFoundError:
                return  # the broker died: the assertions below say so
            done.wait(0.01)

    with ThreadPoolExecutor(RAW_FETCHERS + 2) as pool:
        sampler = pool.submit(sample)
        try:
            fetchers = [pool.submit(_fetch_everything, broker, ends) for _ in range(RAW_FETCHERS)]
            consumer = pool.submit(_consume_everything, broker, total)
            results = [f.result(timeout=180) for f in fetchers]
            seen = consumer.result(timeout=180)
        finally:
            done.set()
            sampler.result()

    expected = {b"p%d-r%d-%d" % (p, r, i) for p in range(PARTITIONS) for r in range(ROUNDS) for i in range(PER_BATCH)}
    assert seen == expected, f"the consumer read {len(seen)} of {len(expected)} records"
    for records, _fetches in results:
        assert records == total
    assert broker.proc.poll() is None, "the broker died"
    assert peak[0] < NOFILE, f"the broker reached {peak[0]} descriptors under a limit of {NOFILE}"
    # It still accepts and answers connections.
    with connect(broker.bootstrap) as sock:
        call(sock, ApiVersionsRequest(), 0, 99)  # answers correlation id 99
    log = broker.log_path.read_text()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
