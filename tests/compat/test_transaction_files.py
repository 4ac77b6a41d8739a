"""Kafka's own DumpLogSegments (kafka-dump-log) reads the transaction files a Causeway log writes:
the markers in the segment, the aborted transaction index (``.txnindex``) and the producer state
snapshot (``.snapshot``), field for field; and the coordinator's ``__transaction_state`` records
(value version 1 with KIP-890's tagged fields) through its transaction log decoder."""

from __future__ import annotations

from pathlib import Path

from bench.peers import run_tool
from broker.coordinator.txn_records import TxnLogKey, TxnLogValue
from broker.coordinator.txn_state import TxnState
from broker.protocol.control_records import ControlType
from broker.protocol.records import Record, build_batch
from broker.storage.config import LogConfig
from broker.storage.log import Log

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log


def test_kafka_dump_log_reads_markers_txnindex_and_snapshot(tmp_path: Path, kafka_jars: None) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())

    def produce(pid: int, *values: bytes) -> None:
        batch = build_batch([Record(None, v, timestamp=1) for v in values], producer_id=pid, producer_epoch=3,
                            base_sequence=0, is_transactional=True)
        log.append_as_leader(batch, leader_epoch=0, now_ms=0, transactional=True)

    produce(7, b"a", b"b")
    produce(8, b"c")
    log.high_watermark = log.log_end_offset
    log.append_marker(ControlType.ABORT, producer_id=7, producer_epoch=3, coordinator_epoch=2, leader_epoch=0,
                      now_ms=0)
    log.close()
    directory = tmp_path / "t-0"
    files = [directory / "00000000000000000000.log", directory / "00000000000000000000.txnindex",
             directory / "00000000000000000004.snapshot"]
    run = run_tool(DUMP_LOG, "--files", ",".join(str(f) for f in files), "--print-data-log")
    run.check()
    out = run.stdout
    assert "endTxnMarker: ABORT coordinatorEpoch: 2" in out
    assert "isTransactional: true isControl: true" in out
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 3 lastStableOffset: 2" in out
    assert ("producerId: 7 producerEpoch: 3 coordinatorEpoch: 2 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 1 firstSequence: 0 lastSequence: 1 lastOffset: 1 offsetDelta: 1") in out
    assert "producerId: 8 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[2]" in out


def test_kafka_dump_log_decodes_a_bumping_ids_transaction_state_record(tmp_path: Path, kafka_jars: None) -> None:
    """What an EndTxn v5 past the last epoch writes (PrepareCommit at epoch 32767, the next
    producer id, client transaction version 2) is what Kafka 4.x's decoder reads, field for field."""
    directory = tmp_path / "__transaction_state-0"
    log = Log.open(directory, LogConfig())
    value = TxnLogValue(1000, 32767, 60000, TxnState.PREPARE_COMMIT.id, (("t", (0, 2)),), 5, 4,
                        next_producer_id=1001, client_transaction_version=2)
    log.append_as_leader(build_batch([Record(TxnLogKey("tv2").encode(), value.encode(), timestamp=1)]),
                         leader_epoch=0, now_ms=0)
    log.close()
    run = run_tool(DUMP_LOG, "--files", str(directory / "00000000000000000000.log"), "--print-data-log",
                   "--transaction-log-decoder")
    run.check()
    assert 'key: {"type":"0","data":{"transactionalId":"tv2"}}' in run.stdout
    assert ('payload: {"version":"1","data":{"producerId":1000,"nextProducerId":1001,"producerEpoch":32767,'
            '"transactionTimeoutMs":60000,"transactionStatus":2,"transactionPartitions":[{"topic":"t",'
            '"partitionIds":[0,2]}],"transactionLastUpdateTimestampMs":5,"transactionStartTimestampMs":4,'
            '"clientTransactionVersion":2}}') in run.stdout
