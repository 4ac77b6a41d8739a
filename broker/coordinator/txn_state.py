"""A transactional id's state and the transitions between states, as Kafka's TransactionState.

One table holds every transition the coordinator may make, with the reason beside it; the
coordinator asks :func:`check_transition` before it writes a state to `__transaction_state`, so
a transition Kafka would never make is a bug caught where it happens, not a corrupt log.

    Empty ─AddPartitions─▶ Ongoing ─EndTxn(commit)─▶ PrepareCommit ─markers written─▶ CompleteCommit
      ▲                    │  │ └──EndTxn(abort), timeout──▶ PrepareAbort ─markers─▶ CompleteAbort
      │                    │  └──InitProducerId of a new producer──▶ PrepareEpochFence ─▶ PrepareAbort
      └──────── Complete* ─┴─ (the next transaction starts from Complete* or Empty)
    Empty / Complete* ─transactional.id.expiration.ms─▶ Dead
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["VALID_PREVIOUS_STATES", "TxnMetadata", "TxnState", "check_transition"]


class TxnState(enum.Enum):
    """The states, with the id Kafka writes in a TransactionLogValue's TransactionStatus and the
    name DescribeTransactions and ListTransactions show."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def title(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        """The state a TransactionStatus names; KafkaError(CORRUPT_MESSAGE) for an unknown id
        (a peer's log is not trusted)."""
        for state in cls:
            if state.id == state_id:
                return state
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unknown transaction status {state_id}")

    @property
    def is_complete(self) -> bool:
        """No transaction is open: a new one may start (from Empty or a completed one)."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_preparing(self) -> bool:
        """Decided, markers not all written yet: the client retries with CONCURRENT_TRANSACTIONS."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)


S = TxnState
# state -> the states it may be entered from (Kafka's validPreviousStates), and why.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    # A fresh id, or a producer re-initialised after its last transaction ended.
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    # The first AddPartitionsToTxn/AddOffsetsToTxn of a transaction, or more partitions added.
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    # EndTxn(commit) decides an open transaction, and only an open one.
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # EndTxn(abort), a timeout, or a new producer fencing the old one's open transaction.
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    # Every partition's leader wrote its marker.
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    # A transactional id unused for transactional.id.expiration.ms, with nothing open.
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    # InitProducerId (or a timeout) bumps the epoch of an open transaction before aborting it.
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def check_transition(current: TxnState, target: TxnState) -> None:
    """Raise KafkaError(INVALID_TXN_STATE) unless `target` may follow `current`."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                         f"a transaction cannot go from {current.title} to {target.title}")


@dataclass(slots=True)
class TxnMetadata:
    """What the coordinator knows of one transactional id (Kafka's TransactionMetadata).

    ``partitions`` are the (topic, partition) pairs of the open (or deciding) transaction;
    ``txn_start_ms`` is -1 when none is open. ``pending`` is the state being written to
    `__transaction_state` right now: while set, other requests for this id get
    CONCURRENT_TRANSACTIONS, as Kafka's pendingState does."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    # The epoch before the coordinator bumped it to abort a timed-out transaction: the producer
    # may still re-initialise from it (KIP-360; kept in memory only, as Kafka's).
    last_producer_epoch: int = -1
    # KIP-890 part 2 (EndTxn v5): the client transaction version of the id's last EndTxn (2:
    # every EndTxn bumps the epoch), the producer id a bump past the last epoch moves to once the
    # markers are written, and the one it moved from (a retried EndTxn still names that one).
    client_transaction_version: int = 0
    next_producer_id: int = -1
    previous_producer_id: int = -1

    def transition(self, target: TxnState, now_ms: int) -> None:
        """Enter `target` (checked against the table); a transaction that starts records its
        start time, one that completes forgets its partitions."""
        check_transition(self.state, target)
        if target == TxnState.ONGOING and self.state != TxnState.ONGOING:
            self.txn_start_ms = now_ms
        if target in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY, TxnState.DEAD):
            self.partitions = set()
            self.txn_start_ms = -1
        self.state = target
        self.last_update_ms = now_ms
