"""broker.client against a real `causeway broker` process (and confluent-kafka as a cross-check)."""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path

import confluent_kafka
import pytest
import trio

from broker.client import (
    Backoff,
    ConnectionFailed,
    ErrorCode,
    KafkaError,
    RequestTimeout,
    TopicPartition,
    admin,
    decode_records,
    fetch,
    init_idempotent_producer,
    open_client,
    open_connection,
    produce,
    produce_batches,
    whole_batches,
)
from broker.clock import now_ms
from broker.protocol.api import ApiKey
from broker.protocol.messages import MetadataRequest
from broker.protocol.records import Compression, Record, build_batch, split_batches
from deploy.broker_process import BrokerProcess
from tests.support.standalone import standalone_broker

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: each test has its topics
    (the two restart tests restart it; it keeps its data and port)."""
    return module_broker


def host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


async def test_connection_negotiates_with_the_broker(broker: BrokerProcess) -> None:
    host, port = host_port(broker.bootstrap)
    async with open_connection(host, port, client_id="itest") as conn:
        assert conn.version_for(ApiKey.METADATA) >= 9
        response = await conn.request(MetadataRequest(topics=None), max_version=1)
        assert [b.port for b in response.brokers] == [port]


async def test_metadata(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        metadata = await client.refresh_metadata()
        assert metadata.cluster_id
        assert [b.address for b in metadata.brokers.values()] == [broker.bootstrap]
        assert metadata.controller_id in metadata.brokers
        with pytest.raises(KafkaError) as info:
            await client.leader_for(TopicPartition("no-such-topic", 0))
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_create_describe_delete_topics(tmp_path: Path) -> None:
    # A broker of its own: the test lists every topic (the module's broker holds the others').
    with standalone_broker(tmp_path / "broker") as broker:
        await _create_describe_delete_topics(broker)


async def _create_describe_delete_topics(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"a": 3, "b": admin.NewTopic(1, configs={"cleanup.policy": "compact"})})
        assert (await admin.list_topics(client)) == {"a": 3, "b": 1}
        assert "__consumer_offsets" in await admin.list_topics(client, include_internal=True)
        described = await admin.describe_topics(client, ["a"])
        assert sorted(described["a"].partitions) == [0, 1, 2]
        assert all(p.leader == 0 and p.isr == (0,) for p in described["a"].partitions.values())

        with pytest.raises(KafkaError) as info:
            await admin.create_topics(client, {"a": 3})
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and "'a'" in str(info.value)
        await admin.create_topics(client, {"a": 3}, exist_ok=True)
        with pytest.raises(KafkaError) as info:
            await admin.create_topics(client, {"bad": 0})
        assert info.value.code == ErrorCode.INVALID_PARTITIONS

        await admin.create_partitions(client, {"a": 5})
        assert (await admin.list_topics(client))["a"] == 5
        with pytest.raises(KafkaError) as info:
            await admin.create_partitions(client, {"a": 2})
        assert info.value.code == ErrorCode.INVALID_PARTITIONS

        await admin.delete_topics(client, ["a", "b"])
        assert await admin.list_topics(client) == {}
        with pytest.raises(KafkaError) as info:
            await admin.delete_topics(client, ["a"])
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await admin.delete_topics(client, ["a"], missing_ok=True)


def batches_for(partition: int, first_offset: int, count: int, *, leader_epoch: int) -> list[bytes]:
    """Batches exactly as the broker will store them: base offset and leader epoch preset, so
    that what a fetch returns can be compared byte for byte."""
    out = []
    offset = first_offset
    codecs = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY]
    for i in range(count):
        records = [
            Record(f"k{partition}-{i}-{j}".encode(), f"value {i} {j}".encode() * 10, (("h", b"x"),), 1_700_000_000 + j)
            for j in range(i + 1)
        ]
        out.append(
            build_batch(
                records, base_offset=offset, partition_leader_epoch=leader_epoch, compression=codecs[i % len(codecs)]
            )
        )
        offset += len(records)
    return out


async def test_produce_raw_then_fetch_byte_identical(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"raw": 2})
        epoch = (await admin.describe_topics(client, ["raw"]))["raw"].partitions[0].leader_epoch
        sent: dict[TopicPartition, list[bytes]] = {}
        for partition in (0, 1):
            tp = TopicPartition("raw", partition)
            sent[tp] = batches_for(partition, 0, 6, leader_epoch=epoch)
            offset = 0
            for batch in sent[tp]:
                # Sent as a producer sends it, from base offset 0 (the broker refuses others, as
                # Kafka does); the broker writes the offset it assigns into those first 8 bytes.
                result = await produce(client, "raw", partition, bytes(8) + batch[8:], acks=1)
                assert result.base_offset == offset
                offset += split_batches(batch)[0][1].last_offset_delta + 1

        fetched = await fetch(client, {tp: 0 for tp in sent}, max_wait_ms=0)
        for tp, batches in sent.items():
            part = fetched[tp]
            assert part.error == ErrorCode.NONE
            assert part.high_watermark == 21 and part.log_start_offset == 0
            assert bytes(part.records) == b"".join(batches)
            assert part.next_offset == 21
            values = [r.value for r in decode_records(part.records)]
            assert len(values) == 21 and values[0] == b"value 0 0" * 10

        # A fetch from the middle starts at the batch holding the offset; decode can skip ahead.
        middle = (await fetch(client, {TopicPartition("raw", 0): 4}, max_wait_ms=0))[TopicPartition("raw", 0)]
        assert [r.offset for r in decode_records(middle.records, from_offset=4)] == list(range(4, 21))

        # A small size limit cuts the answer; whole_batches drops the partial tail.
        small = await fetch(
            client, {TopicPartition("raw", 1): 0}, max_wait_ms=0, max_bytes=1, partition_max_bytes=1
        )
        part = small[TopicPartition("raw", 1)]
        whole = bytes(whole_batches(part.records))
        assert whole and b"".join(sent[TopicPartition("raw", 1)]).startswith(whole)


async def test_produce_many_partitions_acks_zero_and_errors(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"multi": 3})
        batch = build_batch([Record(b"k", b"v")])
        results = await produce_batches(
            client, {TopicPartition("multi", p): batch for p in range(3)} | {TopicPartition("nope", 0): batch}, acks=-1
        )
        assert [results[TopicPartition("multi", p)].base_offset for p in range(3)] == [0, 0, 0]
        assert results[TopicPartition("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        zero = await produce_batches(client, {TopicPartition("multi", 0): batch}, acks=0)
        assert zero[TopicPartition("multi", 0)].base_offset == -1
        # acks=0 gets no answer; the next fetch shows the record arrived all the same.
        with trio.fail_after(TIMEOUT_S):
            fetched = await fetch(client, {TopicPartition("multi", 0): 1}, max_wait_ms=5000, min_bytes=1)
        assert fetched[TopicPartition("multi", 0)].high_watermark == 2
        corrupt = bytearray(build_batch([Record(b"k", b"some value")]))
        corrupt[-1] ^= 0xFF  # the CRC no longer matches
        with pytest.raises(KafkaError) as info:
            await produce(client, "multi", 0, corrupt)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


async def test_fetch_errors_are_per_partition(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"f": 1})
        await produce(client, "f", 0, build_batch([Record(None, b"x")]))
        got = await fetch(
            client,
            {TopicPartition("f", 0): 0, TopicPartition("f", 0 + 7): 0, TopicPartition("missing", 0): 0},
            max_wait_ms=0,
        )
        assert got[TopicPartition("f", 0)].error == ErrorCode.NONE
        assert got[TopicPartition("f", 7)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[TopicPartition("missing", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        out_of_range = await fetch(client, {TopicPartition("f", 0): 99}, max_wait_ms=0)
        assert out_of_range[TopicPartition("f", 0)].error == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_idempotent_producer_offsets_and_duplicates(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"idem": 2})
        producer = await init_idempotent_producer(client)
        assert producer.producer_id >= 0 and producer.producer_epoch >= 0
        offsets = []
        for i in range(5):
            result = await producer.send("idem", 0, [Record(b"k", f"v{i}-{j}".encode()) for j in range(3)])
            offsets.append(result.base_offset)
        assert offsets == [0, 3, 6, 9, 12]
        assert producer.next_sequence("idem", 0) == 15
        assert producer.next_sequence("idem", 1) == 0

        # A resend of an already written batch (same producer, epoch, sequence) is not written
        # again: the broker answers with the original offset.
        again = build_batch(
            [Record(b"k", f"v4-{j}".encode()) for j in range(3)],
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            base_sequence=12,
        )
        duplicate = await produce(client, "idem", 0, again)
        assert duplicate.base_offset == 12
        # A sequence gap is refused.
        gap = build_batch(
            [Record(b"k", b"late")],
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            base_sequence=40,
        )
        with pytest.raises(KafkaError) as info:
            await produce(client, "idem", 0, gap)
        assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

        # An existing batch (say, fetched elsewhere) is restamped with this producer's fields.
        foreign = build_batch([Record(b"x", b"1"), Record(b"x", b"2")], producer_id=999, base_sequence=77)
        stamped = await producer.send_batch("idem", 1, foreign)
        assert stamped.base_offset == 0 and producer.next_sequence("idem", 1) == 2
        fetched = (await fetch(client, {TopicPartition("idem", 0): 0}, max_wait_ms=0))[TopicPartition("idem", 0)]
        assert fetched.high_watermark == 15
        assert [r.value for r in decode_records(fetched.records)][-1] == b"v4-2"


async def test_the_producer_stamps_records_without_a_timestamp_with_the_current_time(broker: BrokerProcess) -> None:
    """As Kafka's producers do: a record given no timestamp is read back with the time it was
    sent, not 0 (1970, which retention would take as ancient); a given one is kept."""
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"stamped": 1})
        producer = await init_idempotent_producer(client)
        before = now_ms()
        await producer.send("stamped", 0, [Record(None, b"no time"), Record(None, b"given", timestamp=before - 5000)])
        await producer.send("stamped", 0, [Record(None, b"none either")])
        after = now_ms()
        fetched = (await fetch(client, {TopicPartition("stamped", 0): 0}, max_wait_ms=0))[TopicPartition("stamped", 0)]
        stamps = {r.value: r.timestamp for r in decode_records(fetched.records)}
    assert before <= stamps[b"no time"] <= after, stamps
    assert stamps[b"given"] == before - 5000
    assert before <= stamps[b"none either"] <= after, stamps


async def test_list_offsets_and_delete_records(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"lo": 1})
        tp = TopicPartition("lo", 0)
        for ts in (1000, 2000, 3000):
            batch = build_batch([Record(None, b"a", timestamp=ts), Record(None, b"b", timestamp=ts + 1)])
            await produce(client, "lo", 0, batch)
        listed = await admin.list_offsets(client, {tp: admin.EARLIEST})
        assert listed[tp].offset == 0
        assert (await admin.list_offsets(client, {tp: admin.LATEST}))[tp].offset == 6
        by_time = await admin.list_offsets(client, {tp: 1500})
        assert by_time[tp].offset == 2 and by_time[tp].timestamp == 2000
        assert (await admin.list_offsets(client, {tp: 10_000}))[tp].offset == -1

        assert await admin.delete_records(client, {tp: 4}) == {tp: 4}
        assert (await admin.list_offsets(client, {tp: admin.EARLIEST}))[tp].offset == 4
        with pytest.raises(KafkaError) as info:
            await admin.delete_records(client, {tp: 99})
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        with pytest.raises(KafkaError) as info:
            await admin.list_offsets(client, {TopicPartition("nope", 0): admin.LATEST})
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_describe_and_alter_configs(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"cfg": admin.NewTopic(1, configs={"retention.ms": "3600000"})})
        configs = await admin.describe_configs(client, "cfg")
        assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
        assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default

        await admin.alter_configs(client, "cfg", {"cleanup.policy": "compact", "retention.ms": None})
        after = await admin.describe_configs(client, "cfg", keys=["cleanup.policy", "retention.ms"])
        assert after["cleanup.policy"].value == "compact"
        assert after["retention.ms"].value == "604800000" and after["retention.ms"].is_default

        with pytest.raises(KafkaError) as info:
            await admin.alter_configs(client, "cfg", {"no.such.config": "1"})
        assert info.value.code == ErrorCode.INVALID_CONFIG
        with pytest.raises(KafkaError) as info:
            await admin.describe_configs(client, "missing-topic")
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        broker_configs = await admin.describe_configs(client, "0", resource=admin.ConfigResource.BROKER)
        assert "log.retention.ms" in broker_configs or broker_configs


async def test_reconnects_after_broker_restart(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"r": 1})
        await produce(client, "r", 0, build_batch([Record(None, b"before")]))
        assert client.statistics().connect_attempts == 1
        broker.restart()  # same port; the client's socket is now dead
        # A fetch is a read: if it is lost with the old socket, the client sends it again.
        fetched = await fetch(client, {TopicPartition("r", 0): 0}, max_wait_ms=0)
        part = fetched[TopicPartition("r", 0)]
        assert part.error == ErrorCode.NONE
        assert [r.value for r in decode_records(part.records)] == [b"before"]
        await produce(client, "r", 0, build_batch([Record(None, b"after")]))
        tp = TopicPartition("r", 0)
        assert (await admin.list_offsets(client, {tp: admin.LATEST}))[tp].offset == 2
        assert client.statistics().connect_attempts >= 2


async def test_metadata_requests_ride_out_a_restart(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await client.refresh_metadata()
        broker.restart()
        # Metadata is idempotent: a request lost with the old socket is sent again.
        metadata = await client.refresh_metadata()
        assert metadata.brokers


async def test_request_timeout_when_the_peer_never_answers() -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(RequestTimeout):
            async with open_connection("127.0.0.1", port, request_timeout_s=0.3):
                pass
        async with open_client(f"127.0.0.1:{port}", request_timeout_s=0.3) as client:
            with pytest.raises(ConnectionFailed):
                await client.refresh_metadata()
        nursery.cancel_scope.cancel()


async def test_backoff_against_a_port_nothing_listens_on() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with open_client(f"127.0.0.1:{port}", backoff=Backoff(initial_s=0.05, max_s=1.0)) as client:
        with pytest.raises(ConnectionFailed), trio.fail_after(1.5):  # a window, not a duration under test
            await admin.list_topics(client)
        attempts = client.statistics().connect_attempts
    # Backoff 0.05, 0.1, 0.2, 0.4, 0.8 (+-20%): about six attempts fit; a spin makes thousands.
    assert 2 <= attempts <= 12, attempts


@pytest.mark.compat
async def test_fetch_what_confluent_kafka_produced(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"ck": 1})
        expected = []
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            producer = confluent_kafka.Producer(
                {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "enable.idempotence": True}
            )
            for i in range(20):
                key, value = f"{codec}-{i}".encode(), f"value {codec} {i}".encode() * 5
                producer.produce("ck", key=key, value=value, partition=0, headers=[("codec", codec.encode())])
                expected.append((key, value, (("codec", codec.encode()),)))
            assert producer.flush(TIMEOUT_S) == 0
        records = []
        offset = 0
        for _ in range(100):  # bounded: each round returns at least one batch
            fetched = (await fetch(client, {TopicPartition("ck", 0): offset}, max_wait_ms=0))[TopicPartition("ck", 0)]
            assert fetched.error == ErrorCode.NONE
            batch = decode_records(fetched.records, from_offset=offset)
            records += batch
            if fetched.next_offset is None or fetched.next_offset >= fetched.high_watermark:
                break
            offset = fetched.next_offset
        assert [(r.key, r.value, r.headers) for r in records] == expected
        assert [r.offset for r in records] == list(range(100))


@pytest.mark.compat
async def test_confluent_kafka_reads_what_we_produced(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"ours": 1})
        producer = await init_idempotent_producer(client)
        for i in range(3):
            await producer.send("ours", 0, [Record(b"k", f"v{i}".encode(), (("n", str(i).encode()),))],
                                compression=Compression.ZSTD)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g-ours", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition("ours", 0, 0)])
        got = []
        for _ in range(60):  # bounded; each poll waits up to a second for data
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value(), msg.headers()))
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [(i, f"v{i}".encode(), [("n", str(i).encode())]) for i in range(3)]
