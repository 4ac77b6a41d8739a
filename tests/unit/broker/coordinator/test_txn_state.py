"""The transaction state machine (Kafka's TransactionState) and `__transaction_state` records."""

from __future__ import annotations

import pytest

from broker.coordinator.txn_records import TxnLogKey, TxnLogValue, decode_key, decode_value
from broker.coordinator.txn_state import VALID_PREVIOUS_STATES, TxnMetadata, TxnState, check_transition
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.primitives import Writer

S = TxnState

# Every transition Kafka's validPreviousStates allows; every other pair is refused.
ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transitions_are_kafkas(current: TxnState, target: TxnState) -> None:
    assert (current in VALID_PREVIOUS_STATES[target]) == ((current, target) in ALLOWED)
    if (current, target) in ALLOWED:
        check_transition(current, target)
    else:
        with pytest.raises(KafkaError) as caught:
            check_transition(current, target)
        assert caught.value.code == ErrorCode.INVALID_TXN_STATE


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.title) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_id(3) is S.PREPARE_ABORT
    with pytest.raises(KafkaError):
        S.from_id(8)


def test_metadata_keeps_start_time_and_forgets_partitions_on_completion() -> None:
    txn = TxnMetadata("t", producer_id=7, producer_epoch=0, timeout_ms=60000)
    txn.transition(S.ONGOING, 100)
    txn.partitions.add(("a", 0))
    txn.transition(S.ONGOING, 200)
    assert txn.txn_start_ms == 100 and txn.last_update_ms == 200
    txn.transition(S.PREPARE_COMMIT, 300)
    assert txn.partitions == {("a", 0)}
    txn.transition(S.COMPLETE_COMMIT, 400)
    assert txn.partitions == set() and txn.txn_start_ms == -1
    with pytest.raises(KafkaError):
        txn.transition(S.PREPARE_ABORT, 500)
    assert txn.state == S.COMPLETE_COMMIT


def test_records_round_trip_in_kafkas_layout() -> None:
    key = TxnLogKey("my-txn")
    assert key.encode() == b"\x00\x00\x00\x06my-txn"
    assert decode_key(key.encode()) == key
    value = TxnLogValue(producer_id=5, producer_epoch=2, timeout_ms=60000, state_id=S.ONGOING.id,
                        partitions=TxnLogValue.group({("b", 1), ("a", 3), ("a", 0)}),
                        last_update_ms=11, txn_start_ms=10)
    assert value.partitions == (("a", (0, 3)), ("b", (1,)))
    data = value.encode()
    assert data[:2] == b"\x00\x00" and data[2:10] == (5).to_bytes(8, "big")
    assert decode_value(data) == value


def _flexible_value(tags: list[tuple[int, bytes]]) -> bytes:
    """A value version 1 as Kafka writes it: producer 9, epoch 4, PrepareCommit of t-0 and t-2."""
    w = Writer()
    w.int16(1)
    w.int64(9)
    w.int16(4)
    w.int32(1000)
    w.int8(S.PREPARE_COMMIT.id)
    w.array_length(1, compact=True)
    w.compact_string("t")
    w.array_length(2, compact=True)
    w.int32(0)
    w.int32(2)
    w.unsigned_varint(0)
    w.int64(5)
    w.int64(4)
    w.tagged_fields(list(tags))
    return bytes(w.buf)


def test_flexible_value_version_1_is_read() -> None:
    assert decode_value(_flexible_value([])) == TxnLogValue(9, 4, 1000, 2, (("t", (0, 2)),), 5, 4)


def test_a_bumping_ids_value_is_version_1_with_kafkas_tagged_fields() -> None:
    """EndTxn v5's ids (transaction version 2) are written as Kafka 4.x writes them: value
    version 1, PreviousProducerId (tag 0), NextProducerId (tag 1), ClientTransactionVersion (tag 2)."""
    value = TxnLogValue(9, 4, 1000, S.PREPARE_COMMIT.id, (("t", (0, 2)),), 5, 4, previous_producer_id=-1,
                        next_producer_id=12, client_transaction_version=2)
    assert value.encode() == _flexible_value([(1, (12).to_bytes(8, "big")), (2, (2).to_bytes(2, "big"))])
    assert decode_value(value.encode()) == value


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00", b"\x00\x07" + bytes(40),
                                  TxnLogValue(1, 0, 1, 1, (), 0, 0).encode()[:-3]])
def test_bad_values_are_corrupt_message(data: bytes) -> None:
    with pytest.raises(KafkaError) as caught:
        decode_value(data)
    assert caught.value.code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_key_version_is_skipped() -> None:
    assert decode_key(b"\x00\x05\x00\x01x") is None
    with pytest.raises(KafkaError):
        decode_key(b"\x00\x00\x00\x09ab")
