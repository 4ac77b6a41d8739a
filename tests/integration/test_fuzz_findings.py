"""Defects the fuzzer (deploy/fuzz) found, each replayed against a real broker process.

OffsetCommit v2-v4 carry a retention time the peer picks; the broker added it to the clock and
wrote the sum as an int64, so a retention near 2**63 overflowed: an internal error, a traceback
in the log and a closed connection (`python -m deploy.fuzz --seed 5 --frames 100000` found it).

Metadata v10-11 name topics by id too, but their answer cannot carry a null name: a request by id
made the broker fail while encoding its answer (an internal error; the 1,000,000-frame run of
seed 1 found it). Kafka refuses such a request; so does Causeway, as a request it cannot parse.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.protocol.messages import ApiVersionsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest
from deploy.broker_process import BrokerProcess
from deploy.fuzz.run import ERROR_RECORD
from deploy.kafka_socket import ask, connect, exchange

LONG_MAX = 2**63 - 1


def commit(retention_ms: int, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id="retained", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=retention_ms,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])])


def fetched_offset(broker: BrokerProcess) -> int:
    reply = ask(broker.bootstrap, OffsetFetchRequest(group_id="retained", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 3, timeout_s=30)
    return int(reply.topics[0].partitions[0].committed_offset)


def test_a_retention_time_near_the_int64_limit_is_committed_not_an_internal_error(tmp_path: Any) -> None:
    broker = BrokerProcess(tmp_path / "broker", topics=("t:1",)).start()
    try:
        with connect(broker.bootstrap, timeout_s=30) as sock:
            for i, retention in enumerate((LONG_MAX, LONG_MAX - 1, 2**62)):
                for version in (2, 3, 4):
                    reply = exchange(sock, commit(retention, 100 + i), version, 10 * i + version)
                    assert reply is not None, f"connection closed on retention {retention} v{version}"
                    assert reply.topics[0].partitions[0].error_code == 0
            # The same connection still serves.
            assert exchange(sock, ApiVersionsRequest(), 0, 99) is not None
        assert fetched_offset(broker) == 102
        broker.restart()  # the commit records, with their far expiry, load again
        assert fetched_offset(broker) == 102
        errors = [line for line in broker.log_path.read_text().splitlines() if ERROR_RECORD.match(line)]
        assert not errors, errors
    finally:
        assert broker.stop() == 0, broker.log_tail()


def test_metadata_by_topic_id_before_v12_is_refused_without_an_internal_error(broker: BrokerProcess) -> None:
    by_id = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)],
                            allow_auto_topic_creation=False)
    for version in (10, 11):
        with connect(broker.bootstrap, timeout_s=30) as sock:
            assert exchange(sock, by_id, version, 1) is None  # refused: the connection is closed
    with connect(broker.bootstrap, timeout_s=30) as sock:
        reply = exchange(sock, by_id, 12, 2)  # v12 answers by id: unknown here
    assert reply is not None and reply.topics[0].error_code == 100  # UNKNOWN_TOPIC_ID
    errors = [line for line in broker.log_path.read_text().splitlines() if ERROR_RECORD.match(line)]
    assert not errors, errors
