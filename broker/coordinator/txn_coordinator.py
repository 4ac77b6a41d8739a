"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase end of each transaction, as Kafka's TransactionCoordinator.

A transactional id lives in one partition of `__transaction_state` (Kafka's abs(hashCode) of
the id modulo the partition count), and the broker leading that partition coordinates it; the
partition's leader epoch is the coordinator epoch the markers carry, so a marker from a deposed
coordinator is refused by the partition leaders (TRANSACTION_COORDINATOR_FENCED). Every state
change is written to that partition (Kafka's TransactionLogKey/Value, broker.coordinator.
txn_records) and acknowledged by its ISR before the client hears of it; a broker that becomes
a partition's leader replays it and finishes every transaction it finds decided but not complete
(PrepareCommit / PrepareAbort): its markers are written again, which partition leaders accept
as a no-op when they had them already.

Ending a transaction (EndTxn), as Kafka's: PrepareCommit or PrepareAbort is written, the client
is answered, then each partition's leader is sent its COMMIT or ABORT marker (WriteTxnMarkers,
retried until written, or until the coordinator stops leading), then CompleteCommit or
CompleteAbort is written. While markers are under way the id answers CONCURRENT_TRANSACTIONS,
which clients retry.

Fencing: InitProducerId for an id with an open transaction aborts it with the epoch bumped
(PrepareEpochFence, then PrepareAbort), so the old producer's next request is PRODUCER_FENCED and
its next write to a partition INVALID_PRODUCER_EPOCH; the new producer, told
CONCURRENT_TRANSACTIONS meanwhile, retries and gets the epoch after. A transaction open longer
than its transaction.timeout.ms is aborted the same way by the coordinator itself.

The transport of markers is not this module's: the broker gives it `send_markers`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from broker.clock import now_ms
from broker.config import BrokerConfig
from broker.coordinator.loader import Records
from broker.coordinator.offsets_records import partition_for
from broker.coordinator.txn_records import TV2, TXN_STATE_TOPIC, TxnLogKey, TxnLogValue, decode_key, decode_value
from broker.coordinator.txn_state import TxnMetadata, TxnState
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["Markers", "TransactionCoordinator", "TxnLog"]

log = logging.getLogger(__name__)

# The largest epoch handed out before a producer gets a new producer id (Kafka's Short.MaxValue
# less one: the epoch after must still fit, for the bump a fencing abort makes).
_MAX_EPOCH = 32766
_MARKER_RETRY_S = 0.1
_MARKER_RETRY_MAX_S = 5.0
# How long AddPartitionsToTxn waits for the previous transaction's markers and completion before
# answering CONCURRENT_TRANSACTIONS. A producer sends it as soon as its commit is answered, while
# the markers are still under way; told CONCURRENT_TRANSACTIONS it retries ~20 ms later
# (librdkafka, Kafka's producer), where on a replicated __transaction_state the markers and the
# Complete record take a few ms: waiting here saves the rest of the client's backoff.
_COMPLETION_WAIT_S = 0.1


@dataclass(frozen=True, slots=True)
class Markers:
    """One transaction's markers: what `send_markers` writes to each partition's leader."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]


@dataclass(slots=True, eq=False)
class _Led:
    """A `__transaction_state` partition this broker leads, in `epoch` (the coordinator epoch
    its markers carry; it may grow while this broker stays leader). Compared by identity: a
    load or completion started under one leadership stops when that leadership ends, even if
    the broker leads the partition again later."""

    epoch: int


# Writes the markers; returns the partitions still to do (their leader failed or was unknown).
SendMarkers = Callable[[Markers], Awaitable[set[tuple[str, int]]]]


class TxnLog(Protocol):
    """What the coordinator needs of `__transaction_state` (broker.coordinator.offsets_store's
    OffsetsStore over that topic)."""

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None: ...

    async def replay_partition(self, partition: int, sink: Callable[[Records], None],
                               still_wanted: Callable[[], bool]) -> None: ...

    def partition_count(self) -> int | None: ...

    async def ensure_topic(self) -> None: ...

    def led_partitions(self) -> list[tuple[int, int]]: ...


# What a failed write to __transaction_state becomes for the client (Kafka's
# TransactionStateManager.appendTransactionToLog mapping): find the coordinator again, or retry.
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class TransactionCoordinator:
    """The transactional ids of the `__transaction_state` partitions this broker leads.

    All methods run on the broker's trio thread. Requests raise KafkaError with the code Kafka
    answers (before a handler maps PRODUCER_FENCED down for old request versions)."""

    def __init__(self, config: BrokerConfig, store: TxnLog, allocate_producer_id: Callable[[], Awaitable[int]],
                 send_markers: SendMarkers) -> None:
        self._config = config
        self._store = store
        self._allocate = allocate_producer_id
        self._send_markers = send_markers
        self.txns: dict[str, TxnMetadata] = {}  # the ids of loaded partitions only
        self._led: dict[int, _Led] = {}
        self._loading: set[int] = set()
        self._nursery: trio.Nursery | None = None
        self._queued: list[tuple[int, _Led]] = []  # elections before run() started
        self._completing: dict[str, trio.Event] = {}  # ids whose markers are under way: set when done

    def reconfigure(self, config: BrokerConfig) -> None:
        self._config = config

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` if it does not exist (the first FindCoordinator for a
        transactional id does, as Kafka's); raises KafkaError. Standalone, the replica manager
        does not announce a new topic's leaders, so the partitions led now are taken here (in
        ZooKeeper mode LeaderAndIsr announces them, and this finds none new or the same)."""
        await self._store.ensure_topic()
        for partition, leader_epoch in self._store.led_partitions():
            self.on_became_leader(TXN_STATE_TOPIC, partition, leader_epoch)

    # -- where an id lives ------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        count = self._store.partition_count() or self._config.transaction_state_log_num_partitions
        return partition_for(transactional_id, count)

    def _check_coordinator(self, transactional_id: str) -> int:
        """The coordinator epoch of the id's partition; NOT_COORDINATOR when led elsewhere,
        COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        partition = self.partition_of(transactional_id)
        if partition not in self._led:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"this broker does not lead {TXN_STATE_TOPIC}-{partition}")
        if partition in self._loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return self._led[partition].epoch

    # -- leadership (a LeadershipListener) --------------------------------------------------

    def on_became_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        """Lead `partition` of `__transaction_state`: load its ids, then finish the transactions
        a previous coordinator decided but did not complete."""
        if topic != TXN_STATE_TOPIC:
            return
        led = self._led.get(partition)
        if led is not None:
            led.epoch = max(led.epoch, leader_epoch)
            return
        led = self._led[partition] = _Led(leader_epoch)
        self._loading.add(partition)
        if self._nursery is None:
            self._queued.append((partition, led))
        else:
            self._nursery.start_soon(self._load, partition, led)

    def on_resigned(self, topic: str, partition: int, leader_epoch: int | None) -> None:
        if topic != TXN_STATE_TOPIC or partition not in self._led:
            return
        if leader_epoch is not None and leader_epoch < self._led[partition].epoch:
            return
        del self._led[partition]
        self._loading.discard(partition)
        for tid in [t for t in self.txns if self.partition_of(t) == partition]:
            del self.txns[tid]
        log.info("%s-%d: no longer leader; its transactional ids unloaded", TXN_STATE_TOPIC, partition)

    def _still_led(self, partition: int, led: _Led) -> bool:
        return self._led.get(partition) is led

    async def _load(self, partition: int, led: _Led) -> None:
        loaded: dict[str, TxnMetadata | None] = {}

        def apply(records: Records) -> None:  # in a worker thread: touches only `loaded`
            for key, value in records:
                if key is None:
                    continue
                try:
                    decoded = decode_key(key)
                    if decoded is None:
                        continue
                    if value is None:
                        loaded[decoded.transactional_id] = None
                        continue
                    v = decode_value(value)
                    loaded[decoded.transactional_id] = TxnMetadata(
                        decoded.transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms,
                        TxnState.from_id(v.state_id), {(t, p) for t, ids in v.partitions for p in ids},
                        v.txn_start_ms, v.last_update_ms, client_transaction_version=v.client_transaction_version,
                        next_producer_id=v.next_producer_id, previous_producer_id=v.previous_producer_id)
                except KafkaError as exc:
                    log.warning("%s-%d: skipping a record: %s", TXN_STATE_TOPIC, partition, exc)

        backoff = 1.0
        while self._still_led(partition, led):
            try:
                await self._store.replay_partition(partition, apply, lambda: self._still_led(partition, led))
                break
            except (KafkaError, OSError) as exc:
                log.error("%s-%d: loading failed (%s); retrying", TXN_STATE_TOPIC, partition, exc)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
        if not self._still_led(partition, led):
            return
        for tid, txn in loaded.items():
            if txn is not None and txn.state != TxnState.DEAD:
                self.txns[tid] = txn
        self._loading.discard(partition)
        resumed = 0
        for txn in [t for tid, t in self.txns.items() if self.partition_of(tid) == partition]:
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                resumed += 1
                txn.pending = TxnState.COMPLETE_COMMIT if txn.state == TxnState.PREPARE_COMMIT \
                    else TxnState.COMPLETE_ABORT
                self._start_completion(txn)
        log.info("%s-%d: leader in epoch %d; loaded %d transactional ids, completing %d decided transactions",
                 TXN_STATE_TOPIC, partition, led.epoch, len(loaded), resumed)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve loads, marker completions and the timeout of transactions until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for partition, led in self._queued:
                nursery.start_soon(self._load, partition, led)
            self._queued.clear()
            task_status.started()
            nursery.start_soon(self._expire_forever)
            while True:
                await trio.sleep(self._config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000)
                self._abort_timed_out(now_ms())

    async def _expire_forever(self) -> None:
        while True:
            await trio.sleep(self._config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000)
            await self.expire(now_ms())

    async def expire(self, now: int) -> None:
        """Forget the ids with no transaction open, unused for transactional.id.expiration.ms
        (Kafka's Dead): a tombstone replaces each one's record. One whose tombstone cannot be
        written now stays, for the next round."""
        for txn in list(self.txns.values()):
            if txn.pending is not None or not txn.state.is_complete \
                    or txn.last_update_ms + self._config.transactional_id_expiration_ms > now:
                continue
            partition = self.partition_of(txn.transactional_id)
            if partition not in self._led or partition in self._loading:
                continue
            txn.pending = TxnState.DEAD
            try:
                await self._store.append(partition, [(TxnLogKey(txn.transactional_id).encode(), None)])
            except (KafkaError, OSError) as exc:
                log.info("expiring transactional id %r: %s; trying again later", txn.transactional_id, exc)
                continue
            finally:
                txn.pending = None
            txn.transition(TxnState.DEAD, now)
            if self.txns.get(txn.transactional_id) is txn:
                del self.txns[txn.transactional_id]

    # -- persistence ------------------------------------------------------------------------

    async def _write(self, txn: TxnMetadata, state: TxnState, epoch: int, partitions: set[tuple[str, int]],
                     now: int, *, producer_id: int | None = None, next_producer_id: int | None = None,
                     previous_producer_id: int | None = None, client_transaction_version: int | None = None) -> None:
        """Write the id's next state (not yet applied in memory; the keywords are what else it
        changes); raises KafkaError as mapped."""
        start = txn.txn_start_ms if txn.state == TxnState.ONGOING or state != TxnState.ONGOING else now
        if state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            partitions, start = set(), -1
        value = TxnLogValue(
            txn.producer_id if producer_id is None else producer_id, epoch, txn.timeout_ms, state.id,
            TxnLogValue.group(partitions), now, start,
            txn.previous_producer_id if previous_producer_id is None else previous_producer_id,
            txn.next_producer_id if next_producer_id is None else next_producer_id,
            txn.client_transaction_version if client_transaction_version is None else client_transaction_version)
        try:
            await self._store.append(self.partition_of(txn.transactional_id),
                                     [(TxnLogKey(txn.transactional_id).encode(), value.encode())])
        except OSError as exc:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, str(exc)) from exc
        except KafkaError as exc:
            code = _WRITE_ERRORS.get(exc.code, exc.code)
            raise exc if code == exc.code else KafkaError(code, f"writing to {TXN_STATE_TOPIC}: {exc}") from exc

    # -- the APIs ---------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        """DescribeTransactions: the id's metadata; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        as the other requests, TRANSACTIONAL_ID_NOT_FOUND for an id nobody initialised."""
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {transactional_id!r}")
        return txn

    @property
    def is_loading(self) -> bool:
        """Some partition led here is still being read back (ListTransactions says so)."""
        return bool(self._loading)

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch). A new id gets a producer
        id from the block allocation; a known one the next epoch (a new producer id when the epoch
        runs out). An open transaction is aborted first, fencing its producer: this call then
        raises CONCURRENT_TRANSACTIONS and the client retries. `expected` (v3+, KIP-360: a
        producer bumping its own epoch) must be the id's producer and epoch, or the epoch before
        a timeout's abort, else PRODUCER_FENCED."""
        if not 0 < timeout_ms <= self._config.transaction_max_timeout_ms:
            raise KafkaError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                             f"transaction.timeout.ms={timeout_ms} is not within 1..transaction.max.timeout.ms="
                             f"{self._config.transaction_max_timeout_ms}")
        self._check_coordinator(transactional_id)
        now = now_ms()
        txn = self.txns.get(transactional_id)
        if txn is None:
            producer_id = await self._allocate()
            self._check_coordinator(transactional_id)
            if transactional_id in self.txns:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "another InitProducerId for this id")
            txn = TxnMetadata(transactional_id, producer_id, -1, timeout_ms, pending=TxnState.EMPTY)
            self.txns[transactional_id] = txn
            try:
                txn.producer_epoch = 0
                await self._write(txn, TxnState.EMPTY, 0, set(), now)
            except BaseException:
                self.txns.pop(transactional_id, None)
                raise
            txn.pending = None
            txn.last_update_ms = now
            return producer_id, 0
        if txn.pending is not None or txn.state.is_preparing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and (expected[0] != txn.producer_id
                                     or expected[1] not in (txn.producer_epoch, txn.last_producer_epoch)):
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"producer {expected[0]} epoch {expected[1]} is not the transactional id's "
                             f"(producer {txn.producer_id} epoch {txn.producer_epoch})")
        if txn.state == TxnState.ONGOING:
            self._fence_and_abort(txn, "a new producer initialised the transactional id")
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        producer_id, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch > _MAX_EPOCH:
            producer_id, epoch = await self._allocate(), 0
            self._check_coordinator(transactional_id)
            if txn.pending is not None or not txn.state.is_complete:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        txn.pending = TxnState.EMPTY
        try:
            previous_id, txn.producer_id = txn.producer_id, producer_id
            try:
                await self._write(txn, TxnState.EMPTY, epoch, set(), now)
            except BaseException:
                txn.producer_id = previous_id
                raise
        finally:
            txn.pending = None
        txn.producer_epoch = epoch
        txn.last_producer_epoch = -1
        txn.timeout_ms = timeout_ms
        txn.transition(TxnState.EMPTY, now)
        return producer_id, epoch

    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        """The id's metadata, checked against the producer that asks (Kafka's order of errors)."""
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"no producer for {transactional_id!r}")
        if producer_id == txn.next_producer_id >= 0:
            # Told its new producer id by EndTxn v5 while the old one's markers are under way.
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        if txn.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"producer id {producer_id} is not the transactional id's ({txn.producer_id})")
        if producer_epoch < txn.producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"epoch {producer_epoch} was fenced by epoch {txn.producer_epoch}")
        if producer_epoch > txn.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"epoch {producer_epoch} is newer than the coordinator's {txn.producer_epoch}")
        if txn.pending is not None or txn.state.is_preparing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        return txn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[tuple[str, int]]) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets`
        partition): the transaction is Ongoing with these partitions in it, in the log. Asked
        while the previous transaction's markers are under way, it waits for them a little
        before answering CONCURRENT_TRANSACTIONS."""
        self._check_coordinator(transactional_id)
        await self._wait_completion(transactional_id)
        txn = self._producer(transactional_id, producer_id, producer_epoch)
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return
        now = now_ms()
        wanted = txn.partitions | partitions if txn.state == TxnState.ONGOING else set(partitions)
        txn.pending = TxnState.ONGOING
        try:
            await self._write(txn, TxnState.ONGOING, txn.producer_epoch, wanted, now)
        finally:
            txn.pending = None
        txn.transition(TxnState.ONGOING, now)
        txn.partitions = wanted

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ with VerifyOnly, which a partition leader sends before a
        producer's first transactional write there (KIP-890, Kafka's
        handleVerifyPartitionsInTransaction): NONE for each partition in the open transaction,
        TRANSACTION_ABORTABLE for one that is not (the producer never added it, or the
        transaction it was added to ended). Raises KafkaError for the whole transaction:
        INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS
        (being decided), and NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS. Nothing is
        written: the markers' epochs and the leader's guard keep a stale answer harmless."""
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"producer {producer_id} is not the producer of {transactional_id!r}")
        if txn.producer_epoch != producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                             f"epoch {producer_epoch} is not the transactional id's ({txn.producer_epoch})")
        if txn.state.is_preparing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if txn.state == TxnState.ONGOING and tp in txn.partitions
                else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *,
                      bump_epoch: bool = False) -> tuple[int, int]:
        """EndTxn: write PrepareCommit or PrepareAbort and return the producer id and epoch the
        producer goes on with; the markers and the completion follow in the coordinator's tasks.

        `bump_epoch` (EndTxn v5, KIP-890 part 2, Kafka's transaction version 2): the decision
        and its markers carry the next epoch, which is answered (and past the last epoch, a new
        producer id with epoch 0, taken once the markers are written), so a write of the ended
        transaction arriving late is fenced by its epoch. A retried EndTxn is then recognised by
        the epoch before the bump: NONE for a transaction completed the same way, with the
        epoch after; CONCURRENT_TRANSACTIONS while its markers are under way; INVALID_TXN_STATE
        the other way. Without `bump_epoch`, as before KIP-890: the same epoch; a retry has it."""
        self._check_coordinator(transactional_id)
        txn = self.txns.get(transactional_id)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if txn is not None and self._retried_after_bump(txn, producer_id, producer_epoch):
            if txn.state == preparing:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
            if txn.pending is None and txn.state == done:
                return txn.producer_id, txn.producer_epoch
            if txn.pending is not None:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
            if txn.state in (TxnState.EMPTY, TxnState.ONGOING):
                raise KafkaError(ErrorCode.PRODUCER_FENCED,
                                 f"epoch {producer_epoch} is not the transactional id's ({txn.producer_epoch})")
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"{'commit' if commit else 'abort'} of a transaction in state {txn.state.title}")
        if txn is not None and txn.producer_id == producer_id and txn.producer_epoch == producer_epoch \
                and txn.pending is None:
            if txn.client_transaction_version >= TV2 and txn.state in (TxnState.COMPLETE_COMMIT,
                                                                        TxnState.COMPLETE_ABORT):
                # As Kafka's: after a bump, the epoch of a completed transaction ends nothing.
                raise KafkaError(ErrorCode.PRODUCER_FENCED, f"epoch {producer_epoch} already ended its transaction")
            if txn.state == done:
                return txn.producer_id, txn.producer_epoch
            if txn.state == preparing:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        txn = self._producer(transactional_id, producer_id, producer_epoch)
        if txn.state != TxnState.ONGOING:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"{'commit' if commit else 'abort'} of a transaction in state {txn.state.title}")
        if not bump_epoch:
            await self._prepare(txn, preparing, txn.producer_epoch, client_transaction_version=0)
            return txn.producer_id, txn.producer_epoch
        next_producer_id = -1
        if txn.producer_epoch >= _MAX_EPOCH:
            # The bump takes the last epoch: the producer goes on with a new producer id.
            next_producer_id = await self._allocate()
            txn = self._producer(transactional_id, producer_id, producer_epoch)
            if txn.state != TxnState.ONGOING:
                raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS)
        await self._prepare(txn, preparing, txn.producer_epoch + 1, client_transaction_version=TV2,
                            next_producer_id=next_producer_id)
        return (txn.producer_id, txn.producer_epoch) if next_producer_id < 0 else (next_producer_id, 0)

    def _retried_after_bump(self, txn: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
        """An EndTxn v5 asked again after its decision bumped the epoch (Kafka's endTxnEpochBumped
        and retryOnOverflow): the id's epoch is the one after the producer's, or the bump moved
        the id to a new producer id."""
        if txn.client_transaction_version < TV2 or txn.state == TxnState.PREPARE_EPOCH_FENCE:
            return False
        if txn.producer_id == producer_id and txn.producer_epoch == producer_epoch + 1:
            return True
        return (txn.previous_producer_id == producer_id and producer_epoch == _MAX_EPOCH
                and txn.producer_epoch == 0 and txn.state.is_complete)

    async def _prepare(self, txn: TxnMetadata, state: TxnState, epoch: int, *,
                       client_transaction_version: int | None = None, next_producer_id: int = -1) -> None:
        now = now_ms()
        txn.pending = state
        try:
            await self._write(txn, state, epoch, txn.partitions, now, next_producer_id=next_producer_id,
                              client_transaction_version=client_transaction_version)
        except BaseException:
            txn.pending = None
            raise
        if epoch != txn.producer_epoch and client_transaction_version == TV2:
            txn.last_producer_epoch = txn.producer_epoch  # as Kafka's: the producer may re-init from it
        txn.producer_epoch = epoch
        txn.next_producer_id = next_producer_id
        if client_transaction_version is not None:
            txn.client_transaction_version = client_transaction_version
        txn.transition(state, now)
        txn.pending = TxnState.COMPLETE_COMMIT if state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self._start_completion(txn)

    def _start_completion(self, txn: TxnMetadata) -> None:
        """Send the decided transaction's markers and complete it, in the coordinator's tasks."""
        done = self._completing.pop(txn.transactional_id, None)
        if done is not None:
            done.set()
        self._completing[txn.transactional_id] = done = trio.Event()

        async def complete() -> None:
            try:
                await self._complete(txn)
            finally:
                done.set()
                if self._completing.get(txn.transactional_id) is done:
                    del self._completing[txn.transactional_id]

        assert self._nursery is not None
        self._nursery.start_soon(complete)

    async def _wait_completion(self, transactional_id: str) -> None:
        """Wait a little (_COMPLETION_WAIT_S at most) for the id's previous transaction to be
        completed, if its markers are under way; the caller checks the state afterwards."""
        done = self._completing.get(transactional_id)
        if done is not None:
            with trio.move_on_after(_COMPLETION_WAIT_S):
                await done.wait()

    def _fence_and_abort(self, txn: TxnMetadata, why: str) -> None:
        """Abort the open transaction with the epoch bumped (Kafka's PrepareEpochFence), in the
        coordinator's tasks: the producer of the old epoch is fenced from here on."""
        log.info("aborting the transaction of %r (producer %d, epoch %d): %s", txn.transactional_id,
                 txn.producer_id, txn.producer_epoch, why)
        txn.transition(TxnState.PREPARE_EPOCH_FENCE, now_ms())
        txn.pending = TxnState.PREPARE_ABORT
        assert self._nursery is not None
        self._nursery.start_soon(self._abort_fenced, txn)

    async def _abort_fenced(self, txn: TxnMetadata) -> None:
        epoch = min(txn.producer_epoch + 1, _MAX_EPOCH + 1)
        try:
            await self._prepare(txn, TxnState.PREPARE_ABORT, epoch)
        except KafkaError as exc:
            # Still open in the log: the next timeout check (or InitProducerId) tries again.
            # Still open in the log: the next timeout check tries again (PrepareEpochFence
            # lives in memory only, as Kafka's; the id answers CONCURRENT_TRANSACTIONS meanwhile).
            log.warning("aborting the transaction of %r failed: %s; retrying", txn.transactional_id, exc)
            txn.pending = None

    def _abort_timed_out(self, now: int) -> None:
        for txn in list(self.txns.values()):
            if txn.state == TxnState.PREPARE_EPOCH_FENCE and txn.pending is None:
                partition = self.partition_of(txn.transactional_id)
                if partition in self._led and partition not in self._loading and self._nursery is not None:
                    txn.pending = TxnState.PREPARE_ABORT
                    self._nursery.start_soon(self._abort_fenced, txn)
                continue
            if txn.state == TxnState.ONGOING and txn.pending is None and txn.txn_start_ms >= 0 \
                    and txn.txn_start_ms + txn.timeout_ms < now:
                partition = self.partition_of(txn.transactional_id)
                if partition in self._led and partition not in self._loading:
                    txn.last_producer_epoch = txn.producer_epoch
                    self._fence_and_abort(txn, f"open longer than its transaction.timeout.ms={txn.timeout_ms}")

    async def _complete(self, txn: TxnMetadata) -> None:
        """Send the markers until every partition has them, then write Complete*; abandoned
        when this broker stops leading the id's partition (the next leader finishes it). The
        markers carry the coordinator epoch current at each attempt."""
        commit = txn.state == TxnState.PREPARE_COMMIT
        partition = self.partition_of(txn.transactional_id)
        led = self._led.get(partition)
        if led is None:
            return
        remaining = set(txn.partitions)
        delay = _MARKER_RETRY_S
        while remaining:
            if not self._still_led(partition, led) or self.txns.get(txn.transactional_id) is not txn:
                return
            markers = Markers(txn.producer_id, txn.producer_epoch, led.epoch, commit, frozenset(remaining))
            try:
                remaining = await self._send_markers(markers)
            except Exception:
                log.exception("sending the markers of %r failed; retrying", txn.transactional_id)
            if remaining:
                await trio.sleep(delay)
                delay = min(delay * 2, _MARKER_RETRY_MAX_S)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        # A bump past the last epoch (EndTxn v5) moves the id to its next producer id now that
        # every marker of the old one is written.
        moving = txn.next_producer_id >= 0
        producer_id = txn.next_producer_id if moving else txn.producer_id
        epoch = 0 if moving else txn.producer_epoch
        delay = _MARKER_RETRY_S
        while self._still_led(partition, led) and self.txns.get(txn.transactional_id) is txn:
            now = now_ms()
            try:
                await self._write(txn, done, epoch, set(), now, producer_id=producer_id, next_producer_id=-1,
                                  previous_producer_id=txn.producer_id if moving else None)
            except KafkaError as exc:
                log.warning("completing the transaction of %r: %s; retrying", txn.transactional_id, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _MARKER_RETRY_MAX_S)
                continue
            if moving:
                txn.previous_producer_id, txn.producer_id = txn.producer_id, producer_id
                txn.last_producer_epoch, txn.producer_epoch = txn.producer_epoch, epoch
                txn.next_producer_id = -1
            txn.transition(done, now)
            txn.pending = None
            return
