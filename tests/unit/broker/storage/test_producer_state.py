"""Idempotent-producer state: duplicates answered with the original offsets, gaps and fenced
epochs refused, sequences wrapping at 2**31 - 1."""

from __future__ import annotations

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader, Record, build_batch, read_batch_header
from broker.storage.producer_state import ProducerStateManager

PID = 4000


def header(seq: int, count: int = 1, *, epoch: int = 0, pid: int = PID, offset: int = 0) -> BatchHeader:
    data = build_batch([Record(None, b"x")] * count, base_offset=offset, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)
    return read_batch_header(data)


def appended(state: ProducerStateManager, h: BatchHeader, offset: int) -> None:
    assert state.check(h) is None
    state.update(h, offset, 0)


def code_of(state: ProducerStateManager, h: BatchHeader) -> ErrorCode:
    with pytest.raises(KafkaError) as exc:
        state.check(h)
    return exc.value.code


def test_any_of_the_last_five_batches_is_a_duplicate() -> None:
    state = ProducerStateManager()
    for i in range(7):
        appended(state, header(i * 2, 2), i * 2)
    for i in range(2, 7):
        original = state.check(header(i * 2, 2))
        assert original is not None and (original.first_offset, original.last_offset) == (i * 2, i * 2 + 1)
    # The oldest batches have left the window: their retry looks like a rewind.
    assert code_of(state, header(0, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gaps_and_rewinds_are_out_of_order() -> None:
    state = ProducerStateManager()
    appended(state, header(0, 3), 0)
    assert code_of(state, header(4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(state, header(1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(header(3)) is None


def test_epochs_fence_and_restart_at_zero() -> None:
    state = ProducerStateManager()
    appended(state, header(0, 5, epoch=2), 0)
    assert code_of(state, header(5, epoch=1)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(state, header(5, epoch=3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    appended(state, header(0, epoch=3), 5)
    assert code_of(state, header(1, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_an_unknown_producer_may_start_anywhere() -> None:
    state = ProducerStateManager()
    appended(state, header(123), 0)
    assert code_of(state, header(125)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(header(124)) is None


def test_sequences_wrap_after_int32_max() -> None:
    state = ProducerStateManager()
    appended(state, header(2**31 - 3, 2), 0)  # last sequence 2**31 - 2
    appended(state, header(2**31 - 1, 3), 2)  # 2**31 - 1, 0, 1
    assert read_batch_header(build_batch([Record(None, b"x")] * 3, producer_id=PID, producer_epoch=0,
                                         base_sequence=2**31 - 1)).last_sequence == 1
    assert state.check(header(2)) is None
    original = state.check(header(2**31 - 1, 3))
    assert original is not None and original.first_offset == 2


def test_batches_without_a_producer_id_are_not_tracked() -> None:
    state = ProducerStateManager()
    plain = read_batch_header(build_batch([Record(None, b"x")]))
    assert state.check(plain) is None
    state.update(plain, 0, 0)
    assert state.producers == {}


def test_batches_of_one_request_are_checked_in_order() -> None:
    state = ProducerStateManager()
    appended(state, header(0, 2), 0)
    pending: dict[int, tuple[int, int]] = {}
    assert state.check(header(2, 2), pending) is None
    assert state.check(header(4), pending) is None
    with pytest.raises(KafkaError) as exc:
        state.check(header(7), pending)
    assert exc.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_truncation_forgets_batches_past_the_cut() -> None:
    state = ProducerStateManager()
    appended(state, header(0, 2), 0)
    appended(state, header(2, 2), 2)
    state.truncate_after(2)
    assert state.check(header(2, 2)) is None  # no longer a duplicate: it must be written again


def _transactional(pid: int = PID) -> BatchHeader:
    return read_batch_header(build_batch([Record(None, b"x")], producer_id=pid, producer_epoch=0, base_sequence=0,
                                         is_transactional=True))


def test_a_verification_goes_stale_when_a_marker_ends_the_transaction_meanwhile() -> None:
    """KIP-890's guard: a batch that would open a transaction needs the producer's current
    guard; a marker between the coordinator's answer and the append makes the answer stale."""
    state = ProducerStateManager()
    guard = state.start_verification(PID)
    assert guard is not None and state.start_verification(PID) is guard  # shared by requests at once
    state.check_verified(_transactional(), guard)  # still current: the append may open it
    state.complete(PID, 0, 0, 5, aborted=True, high_watermark=0)  # a marker came meanwhile
    with pytest.raises(KafkaError) as stale:
        state.check_verified(_transactional(), guard)
    assert stale.value.code == ErrorCode.INVALID_TXN_STATE
    # A new verification, then the transaction opens: the guard goes, and its open transaction
    # needs none.
    fresh = state.start_verification(PID)
    assert fresh is not None and fresh is not guard
    state.begin(PID, 7)
    assert state.start_verification(PID) is None
    state.check_verified(_transactional(), guard)
    # A failed verification drops its own guard only.
    other = state.start_verification(PID + 1)
    assert other is not None
    state.drop_verification(PID + 1, guard)
    assert state.verifying[PID + 1] is other
    state.drop_verification(PID + 1, other)
    assert PID + 1 not in state.verifying
