"""LinkAppend and mirror topics against a real standalone broker process: the copy keeps the
source's offsets, bytes and timestamps; retries, gaps and a log starting above 0 are taken;
straddles, bad batches and hostile requests are refused with their codes; a producer (librdkafka)
is refused on a mirror topic until it is promoted by deleting causeway.mirror.name."""

from __future__ import annotations

import struct
from collections.abc import Mapping

import confluent_kafka
import crc32c
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from broker.client import (
    MIRROR_NAME_CONFIG,
    Client,
    ErrorCode,
    KafkaError,
    LinkAppendResult,
    TopicPartition,
    admin,
    fetch,
    link_append,
    open_client,
    supports_link_append,
    whole_batches,
)
from broker.client.admin import NewTopic
from broker.protocol.constants import ConfigSource
from broker.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    LinkAppendRequest,
    LinkAppendResponse,
    MetadataRequest,
    MetadataResponse,
)
from broker.protocol.records import Record, build_batch, read_batch_header, split_batches
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask, connect, exchange, read_frame_or_none, request_frame
from tests.integration.partition_reads import read_whole_batches

TIMEOUT_S = 20.0
LINK = "dc1-to-dc2"


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: each test has its topics."""
    return module_broker


def batch(base: int, count: int, *, ts: int = 1_600_000_000_000, **kwargs: object) -> bytes:
    return build_batch([Record(f"k{base + i}".encode(), f"v{base + i}".encode()) for i in range(count)],
                       base_offset=base, base_timestamp=ts, **kwargs)  # type: ignore[arg-type]


async def make_mirror_topic(client: Client, name: str, link: str = LINK) -> None:
    await admin.create_topics(client, {name: NewTopic(1, configs={MIRROR_NAME_CONFIG: link})})


def same_but_epoch(a: bytes, b: bytes) -> bool:
    """Byte-identical batches but for the partition leader epoch (bytes 12..16, outside the CRC)."""
    ours, theirs = split_batches(a), split_batches(b)
    if not ours or len(ours) != len(theirs):
        return False
    for (pa, ha), (pb, hb) in zip(ours, theirs, strict=True):
        if ha.size != hb.size or ha.crc != hb.crc:
            return False
        if a[pa:pa + 12] != b[pb:pb + 12] or a[pa + 16:pa + ha.size] != b[pb + 16:pb + hb.size]:
            return False
    return True


async def append(client: Client, tp: TopicPartition, data: bytes, link: str = LINK, *, previous_end: int | None = None,
                 log_start: int | None = None) -> LinkAppendResult:
    """LinkAppend `data` to `tp`; `previous_end` (default: no gap claimed) and `log_start` as
    the source's claims."""
    return (await link_append(client, link, {tp: data},
                              previous_ends=None if previous_end is None else {tp: previous_end},
                              log_start_offsets=None if log_start is None else {tp: log_start}))[tp]


async def test_round_trip_keeps_offsets_bytes_and_timestamps_and_a_retry_is_skipped(broker: BrokerProcess) -> None:
    # The source: an idempotent librdkafka producer with lz4, as a real source topic holds.
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                         "compression.type": "lz4", "linger.ms": 5})
    for i in range(300):
        producer.produce("source", key=f"k{i}".encode(), value=f"value {i}".encode() * 3,
                         timestamp=1_700_000_000_000 + i)
        if i % 100 == 99:
            producer.flush(TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        assert await supports_link_append(client)
        await make_mirror_topic(client, "copy")
        source, copy = TopicPartition("source", 0), TopicPartition("copy", 0)
        original = await read_whole_batches(client, source)
        assert len(split_batches(original)) >= 3
        result = await append(client, copy, original)
        assert result.error == ErrorCode.NONE, result
        assert result.log_end_offset == result.high_watermark == 300 and result.log_start_offset == 0
        copied = await read_whole_batches(client, copy)
        assert same_but_epoch(original, copied)
        # A retried request: every batch is already there, nothing is written twice.
        again = await append(client, copy, original)
        assert again.error == ErrorCode.NONE and again.log_end_offset == 300, again
        assert await read_whole_batches(client, copy) == copied
        # Part of it again plus what follows: the present part is skipped, the rest appended.
        batches = split_batches(original)
        tail_start = batches[-1][0]
        more = batch(300, 5)
        result = await append(client, copy, original[tail_start:] + more)
        assert result.error == ErrorCode.NONE and result.log_end_offset == 305, result
    # What a consumer reads from the copy: every column as at the source.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                                         "enable.auto.commit": False})
    try:
        def read(topic: str, count: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
            consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
            rows: list[tuple[int, bytes | None, bytes | None, int]] = []
            for _ in range(200):
                for m in consumer.consume(500, timeout=1):
                    assert m.error() is None, m.error()
                    rows.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
                if len(rows) >= count:
                    break
            return rows

        assert read("copy", 300)[:300] == read("source", 300)
    finally:
        consumer.close()


async def test_gaps_and_a_source_log_that_starts_above_zero(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "gappy")
        tp = TopicPartition("gappy", 0)
        # The source's log starts at 1000: the empty copy starts there too.
        result = await append(client, tp, batch(1000, 3) + batch(1010, 2), previous_end=1000, log_start=1000)
        assert result.error == ErrorCode.NONE, result
        assert (result.log_start_offset, result.log_end_offset, result.high_watermark) == (1000, 1012, 1012)
        # A compacted source batch: fewer records than its offset range, its last offset kept;
        # the source holds nothing from 1012 (where its previous batch ended) up to it.
        compacted = build_batch([Record(b"a", b"1"), Record(b"b", b"2")], base_offset=5000,
                                offset_deltas=[0, 9], base_timestamp=1_600_000_000_000)
        result = await append(client, tp, compacted, previous_end=1012)
        assert result.error == ErrorCode.NONE and result.log_end_offset == 5010, result
        assert (await admin.list_offsets(client, {tp: -2}))[tp].offset == 1000
        assert (await admin.list_offsets(client, {tp: -1}))[tp].offset == 5010
        got = (await fetch(client, {tp: 2000}, max_wait_ms=0))[tp]  # inside the gap: the next batch
        assert got.error == ErrorCode.NONE and split_batches(whole_batches(got.records))[0][1].base_offset == 5000
        below = (await fetch(client, {tp: 10}, max_wait_ms=0))[tp]
        assert below.error == ErrorCode.OFFSET_OUT_OF_RANGE and below.log_start_offset == 1000


async def test_straddles_disorder_and_bad_batches_are_refused_and_write_nothing(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "strict")
        tp = TopicPartition("strict", 0)
        assert (await append(client, tp, batch(0, 10))).log_end_offset == 10
        straddle = await append(client, tp, batch(5, 10))
        assert straddle.error == ErrorCode.OFFSET_OUT_OF_RANGE, straddle
        assert "[5, 14]" in (straddle.error_message or "") and "10" in (straddle.error_message or "")
        assert straddle.log_end_offset == 10  # where the copy stands, even after a refusal
        disorder = await append(client, tp, batch(20, 2) + batch(15, 2))
        assert disorder.error == ErrorCode.INVALID_RECORD, disorder
        bad = bytearray(batch(10, 3))
        bad[-1] ^= 0xFF  # a record byte: the CRC no longer matches
        corrupt = await append(client, tp, bytes(bad))
        assert corrupt.error == ErrorCode.CORRUPT_MESSAGE, corrupt
        # A good batch before a bad one is not written either: all or nothing.
        bad_after = bytearray(batch(12, 3))
        bad_after[-1] ^= 0xFF
        mixed = await append(client, tp, batch(10, 2) + bytes(bad_after))
        assert mixed.error == ErrorCode.CORRUPT_MESSAGE and mixed.log_end_offset == 10, mixed
        assert len(split_batches(await read_whole_batches(client, tp))) == 1


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # the legacy API, on purpose
async def test_mirror_name_mismatch_config_changes_and_promotion(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "owned")
        await admin.create_topics(client, {"plain": 1})
        tp = TopicPartition("owned", 0)
        other = await append(client, tp, batch(0, 1), link="someone-else")
        assert other.error == ErrorCode.INVALID_REQUEST and "mirror " + LINK in (other.error_message or ""), other
        plain = await append(client, TopicPartition("plain", 0), batch(0, 1))
        assert plain.error == ErrorCode.INVALID_REQUEST and "not a mirror topic" in (plain.error_message or "")
        unknown = await append(client, TopicPartition("nowhere", 0), batch(0, 1))
        assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown
        described = await admin.describe_configs(client, "owned")
        entry = described[MIRROR_NAME_CONFIG]
        assert entry.value == LINK and entry.source == ConfigSource.TOPIC_CONFIG  # DYNAMIC_TOPIC_CONFIG
        assert MIRROR_NAME_CONFIG not in await admin.describe_configs(client, "plain")
        # Another mirror's name, or making a normal topic a mirror topic later: refused.
        for topic, value in (("owned", "someone-else"), ("plain", LINK)):
            with pytest.raises(KafkaError) as info:
                await admin.alter_configs(client, topic, {MIRROR_NAME_CONFIG: value})
            assert info.value.code == ErrorCode.INVALID_CONFIG
            assert "only when" in str(info.value) and "failback" in str(info.value)
        # Another config of the mirror topic may change; it stays a mirror topic, also through a
        # legacy AlterConfigs (which replaces every override) that leaves the key out.
        await admin.alter_configs(client, "owned", {"retention.ms": "86400000"})
        legacy = ConfigResource("TOPIC", "owned", set_config={"retention.ms": "3600000"})
        kafka_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        kafka_admin.alter_configs([legacy])[legacy].result(TIMEOUT_S)
        described = await admin.describe_configs(client, "owned")
        assert described[MIRROR_NAME_CONFIG].value == LINK and described["retention.ms"].value == "3600000"
        assert (await append(client, tp, batch(0, 2))).error == ErrorCode.NONE

    # A producer (librdkafka) is refused with the message, and nothing is written.
    reports: list[confluent_kafka.KafkaError | None] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    producer.produce("owned", b"nope", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(TIMEOUT_S)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST, reports[0]
    # DeleteRecords cannot cut the copy either.
    deleted: DeleteRecordsResponse = ask(broker.bootstrap, DeleteRecordsRequest(topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name="owned", partitions=[
            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=1)])], timeout_ms=5000), 2)
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST

    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        assert (await fetch(client, {tp: 0}, max_wait_ms=0))[tp].high_watermark == 2
        # Promotion: kafka-configs --delete-config causeway.mirror.name (IncrementalAlterConfigs DELETE).
        kafka_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource("TOPIC", "owned", incremental_configs=[
            confluent_kafka.admin.ConfigEntry(MIRROR_NAME_CONFIG, None,
                                              incremental_operation=confluent_kafka.admin.AlterConfigOpType.DELETE)])
        for future in kafka_admin.incremental_alter_configs([resource]).values():
            future.result(TIMEOUT_S)
        assert MIRROR_NAME_CONFIG not in await admin.describe_configs(client, "owned")
        promoted = await append(client, tp, batch(2, 1))
        assert promoted.error == ErrorCode.INVALID_REQUEST and "promoted" in (promoted.error_message or "")
    reports.clear()
    producer.produce("owned", b"now writable", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(TIMEOUT_S)
    assert reports == [None]


def _link_request(topic: str, records: bytes | None, *, index: int = 0, link: str = LINK, previous_end: int = 0,
                  log_start: int = -1) -> LinkAppendRequest:
    return LinkAppendRequest(link_name=link, timeout_ms=5000, topics=[LinkAppendRequest.LinkAppendTopic(
        name=topic, partitions=[LinkAppendRequest.LinkAppendPartition(
            index=index, records=records, previous_end_offset=previous_end, log_start_offset=log_start)])])


def _metadata_works(broker: BrokerProcess) -> bool:
    metadata: MetadataResponse = ask(broker.bootstrap, MetadataRequest(topics=None), 1, timeout_s=30)
    return bool(metadata.brokers)


async def test_hostile_link_appends_get_error_codes_and_the_broker_lives(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "target")
    huge_count = bytearray(batch(0, 1))
    struct.pack_into(">i", huge_count, 57, 2**31 - 1)  # recordsCount, then the CRC fixed up below
    struct.pack_into(">I", huge_count, 17, crc32c.crc32c(bytes(huge_count[21:])))
    assert read_batch_header(huge_count).records_count == 2**31 - 1
    garbage_records = bytearray(batch(0, 2))
    garbage_records[61:] = b"\xff" * (len(garbage_records) - 61)
    struct.pack_into(">I", garbage_records, 17, crc32c.crc32c(bytes(garbage_records[21:])))
    cases: Mapping[str, tuple[str, bytes | None, set[int]]] = {
        "huge count": ("target", bytes(huge_count), {ErrorCode.INVALID_RECORD}),
        "garbage records": ("target", bytes(garbage_records), {ErrorCode.INVALID_RECORD}),
        "not a batch": ("target", b"\xff" * 70, {ErrorCode.CORRUPT_MESSAGE}),
        "no records": ("target", None, {ErrorCode.CORRUPT_MESSAGE}),
        "negative offset": ("target", batch(-5, 2), {ErrorCode.INVALID_RECORD, ErrorCode.INVALID_REQUEST}),
        "unknown topic": ("no-such-topic", batch(0, 1), {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
        "internal topic": ("__consumer_offsets", batch(0, 1), {ErrorCode.INVALID_TOPIC_EXCEPTION}),
        "partition not there": ("target#7", batch(0, 1), {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}),
    }
    with connect(broker.bootstrap, timeout_s=30) as sock:
        for i, (why, (topic, records, codes)) in enumerate(cases.items()):
            name, _, index = topic.partition("#")
            request = _link_request(name, records, index=int(index or 0))
            answer: LinkAppendResponse | None = exchange(sock, request, 1, correlation_id=i)
            assert answer is not None, why
            code = answer.topics[0].partitions[0].error_code
            assert code in codes, (why, ErrorCode(code), answer.topics[0].partitions[0].error_message)
    # A frame claiming 2**31 - 1 topics: a decode error closes that connection only.
    with connect(broker.bootstrap, timeout_s=30) as sock:
        body = b"\x02a" + struct.pack(">i", 5000) + b"\xff\xff\xff\xff\x07"
        sock.sendall(request_frame(10000, 0, body))
        read_frame_or_none(sock)
    assert _metadata_works(broker)
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        assert (await fetch(client, {TopicPartition("target", 0): 0}, max_wait_ms=0))[
            TopicPartition("target", 0)].high_watermark == 0


async def test_fewer_in_sync_replicas_than_min_insync_replicas_write_nothing(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await admin.create_topics(client, {"guarded": NewTopic(1, configs={MIRROR_NAME_CONFIG: LINK,
                                                                          "min.insync.replicas": "2"})})
        tp = TopicPartition("guarded", 0)
        result = await append(client, tp, batch(0, 3))
        assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS and "min.insync.replicas is 2" in (
            result.error_message or ""), result
        assert result.log_end_offset == 0
        assert (await admin.list_offsets(client, {tp: -1}))[tp].offset == 0


async def _copy_state(client: Client, tp: TopicPartition) -> tuple[int, int, int]:
    """(log start, high watermark, records readable from the log start) of `tp`."""
    start = (await admin.list_offsets(client, {tp: -2}))[tp].offset
    end = (await admin.list_offsets(client, {tp: -1}))[tp].offset
    data = await read_whole_batches(client, tp, start) if end > start else b""
    return start, end, sum(header.records_count for _, header in split_batches(data))


async def test_a_copy_is_never_skipped_ahead_or_wiped(broker: BrokerProcess) -> None:
    """Issue 19 item 2: a LinkAppend past the copy's end, or a log start past it, was taken; the
    real mirror's next batches were then "already here" and every later record was dropped."""
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "dr")
        tp = TopicPartition("dr", 0)
        assert (await append(client, tp, batch(0, 10))).log_end_offset == 10
        # Skipping ahead: at the log end + 1,000,000 or at 2**62, claimed to follow the batch
        # before it (no gap) or claiming the gap with nothing to show for it.
        for base, previous_end in ((1_000_010, None), (2**62, None), (2**62, 2**62), (1_000_010, 11)):
            ahead = await append(client, tp, batch(base, 3), previous_end=previous_end)
            assert ahead.error == ErrorCode.OFFSET_OUT_OF_RANGE, (base, ahead)
            assert "10.." in (ahead.error_message or "") and ahead.log_end_offset == 10, ahead
        assert await _copy_state(client, tp) == (0, 10, 10)
        # A log start past the copy's end, with records or alone (the "2**63 - 1" wipe); nothing moves.
        for records, log_start in ((b"", 2**63 - 1), (b"", 11), (batch(10, 2), 13)):
            wipe = await append(client, tp, records, previous_end=-1 if not records else None, log_start=log_start)
            assert wipe.error == ErrorCode.OFFSET_OUT_OF_RANGE and "log start" in (wipe.error_message or ""), wipe
        assert await _copy_state(client, tp) == (0, 10, 10)
        # A gap the source really has: its log starts past the copy's end (retention, DeleteRecords):
        # the copy follows it there.
        follow = await append(client, tp, batch(40, 2), previous_end=40, log_start=40)
        assert follow.error == ErrorCode.NONE and (follow.log_start_offset, follow.log_end_offset) == (40, 42), follow
        # Claims that look honest (the source has nothing from the copy's end up to the batch) are
        # taken, but the real mirror's batches at those offsets are then refused, not skipped.
        assert (await append(client, tp, batch(1_000_042, 1), previous_end=42)).error == ErrorCode.NONE
        real = await append(client, tp, batch(42, 5))
        assert real.error == ErrorCode.OFFSET_OUT_OF_RANGE and "not the batch held there" in (
            real.error_message or ""), real

        # The variation: someone else's batch at the very log end, then the real one there.
        await make_mirror_topic(client, "dr2")
        tp2 = TopicPartition("dr2", 0)
        assert (await append(client, tp2, batch(0, 5))).error == ErrorCode.NONE
        foreign = build_batch([Record(b"x", b"not the source's")] * 3, base_offset=5, base_timestamp=1)
        assert (await append(client, tp2, foreign)).error == ErrorCode.NONE
        for data in (batch(5, 3), batch(5, 3) + batch(8, 2), batch(0, 5) + batch(5, 3)):
            refused = await append(client, tp2, data, previous_end=0 if data.startswith(batch(0, 5)) else None)
            assert refused.error == ErrorCode.OFFSET_OUT_OF_RANGE, refused
        assert await _copy_state(client, tp2) == (0, 8, 8)
        # What the copy holds is still taken again as it is (a retried request).
        assert (await append(client, tp2, batch(0, 5) + foreign, previous_end=0)).error == ErrorCode.NONE

        # A compacted topic: the source's cleaner may rewrite a batch after it was copied. Sent
        # again, it is taken (the copy holds a batch over its offsets); a copy moved ahead holds
        # none there, and is still caught.
        await admin.create_topics(client, {"dr-compact": NewTopic(1, configs={
            MIRROR_NAME_CONFIG: LINK, "cleanup.policy": "compact"})})
        tp3 = TopicPartition("dr-compact", 0)
        assert (await append(client, tp3, batch(0, 5))).error == ErrorCode.NONE
        cleaned = build_batch([Record(b"k4", b"v4")], base_offset=0, offset_deltas=[4], base_timestamp=1)
        assert (await append(client, tp3, cleaned + batch(5, 2), previous_end=0)).log_end_offset == 7
        assert (await append(client, tp3, batch(1_000_007, 1), previous_end=7)).error == ErrorCode.NONE
        assert (await append(client, tp3, batch(7, 2))).error == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_link_append_v0_and_a_missing_previous_end_are_refused(broker: BrokerProcess) -> None:
    """Version 0 cannot say where the source's previous batch ended: refused with a message that
    says so, per partition; version 1 without PreviousEndOffset, or one past its first batch, too."""
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "strict-v1")
    cases = [(0, 0, ErrorCode.UNSUPPORTED_VERSION, "PreviousEndOffset"),
             (1, -1, ErrorCode.INVALID_REQUEST, "PreviousEndOffset"),
             (1, 5, ErrorCode.INVALID_REQUEST, "past the first batch")]
    with connect(broker.bootstrap, timeout_s=30) as sock:
        for i, (version, previous_end, code, says) in enumerate(cases):
            answer: LinkAppendResponse | None = exchange(
                sock, _link_request("strict-v1", batch(0, 2), previous_end=previous_end), version, correlation_id=i)
            assert answer is not None
            part = answer.topics[0].partitions[0]
            assert (part.error_code, says in (part.error_message or "")) == (code, True), (version, part)
        ok: LinkAppendResponse | None = exchange(sock, _link_request("strict-v1", batch(0, 2)), 1, correlation_id=9)
        assert ok is not None and ok.topics[0].partitions[0].error_code == ErrorCode.NONE


async def test_one_gap_wider_than_a_segment_per_request(broker: BrokerProcess) -> None:
    """Claims that look honest may put gaps between batches; one wider than a segment's 32-bit
    relative offsets opens a segment (three files). Tiny batches 2**32 apart in one request would
    open thousands: one such gap per request (RECORD_LIST_TOO_LARGE), the batches one by one are
    taken."""
    async with open_client(broker.bootstrap, request_timeout_s=TIMEOUT_S) as client:
        await make_mirror_topic(client, "wide")
        tp = TopicPartition("wide", 0)
        assert (await append(client, tp, batch(0, 1))).error == ErrorCode.NONE
        step = 2**32
        wide = b"".join(batch(i * step, 1) for i in range(1, 4))
        refused = await append(client, tp, wide, previous_end=1)
        assert refused.error == ErrorCode.RECORD_LIST_TOO_LARGE and refused.log_end_offset == 1, refused
        for i in range(1, 4):
            taken = await append(client, tp, batch(i * step, 1), previous_end=(i - 1) * step + 1)
            assert taken.error == ErrorCode.NONE and taken.log_end_offset == i * step + 1, taken
    assert len(list((broker.data_dir / "wide-0").glob("*.log"))) == 4
