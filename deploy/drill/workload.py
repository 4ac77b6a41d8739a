"""A drill's workload: idempotent acks=all producers at a steady rate over the mirror's topics,
and a consumer group reading and committing (confluent-kafka, each in a thread of its own).

Every record is keyed and carries its own name, `<run>:<site>:<sequence>`, so the records
acknowledged, the records each site holds and the records the group read can be matched one by
one: a loss, a duplicate, a re-read and a skip are counted, not estimated. Records of other runs
in the same topics are ignored.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

__all__ = ["GroupReader", "Ledger", "ProducerLoad", "TopicPartition", "record_name"]

TopicPartition = tuple[str, int]
# librdkafka's own log stays quiet: a drill's disaster makes every client log its lost
# connections, and the drill reports what they cost instead.
QUIET = {"log_level": 2}
KEYS = 64  # keyed records: the key spreads them over the partitions as an application's would
COMMIT_EVERY_S = 0.2
STOP_COMMIT_S = 5.0  # how long a consumer stopping tries to make its last commit


def record_name(run: str, site: str, seq: int) -> str:
    return f"{run}:{site}:{seq}"


@dataclass
class Ledger:
    """The records a producer had acknowledged: by partition, offset -> record name."""

    acked: dict[TopicPartition, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    sent: int = 0
    failed: int = 0
    payload_bytes: int = 0  # of the acknowledged records: their keys and values (the workload's progress)
    first_ack: float | None = None  # time.monotonic() of the first acknowledgement
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return sum(len(offsets) for offsets in self.acked.values())

    def acked_bytes(self) -> int:
        with self.lock:
            return self.payload_bytes

    def names(self) -> set[str]:
        with self.lock:
            return {name for offsets in self.acked.values() for name in offsets.values()}

    def ends(self) -> dict[TopicPartition, int]:
        """Per partition: one past the last acknowledged offset."""
        with self.lock:
            return {tp: max(offsets) + 1 for tp, offsets in self.acked.items() if offsets}


class ProducerLoad:
    """`rate` records/s over `topics`, from one idempotent acks=all producer, until `stop`."""

    def __init__(self, bootstrap: str, topics: list[str], rate: float, run: str, site: str,
                 extra: dict[str, object] | None = None) -> None:
        self.ledger = Ledger()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, **QUIET, **(extra or {})})
        self._topics, self._rate, self._run, self._site = topics, rate, run, site
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"drill-producer-{site}", daemon=True)

    def start(self) -> ProducerLoad:
        self._thread.start()
        return self

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        ledger = self.ledger
        with ledger.lock:
            if error is not None:
                ledger.failed += 1
                return
            value = message.value() or b""
            name = value.decode()
            ledger.payload_bytes += len(value) + len(message.key() or b"")
            ledger.acked[(message.topic() or "", message.partition() or 0)][message.offset() or 0] = name
            if ledger.first_ack is None:
                ledger.first_ack = time.monotonic()

    def _loop(self) -> None:
        start, seq = time.monotonic(), 0
        while not self._stopping.is_set():
            due = int((time.monotonic() - start) * self._rate)
            while seq < due and not self._stopping.is_set():
                topic = self._topics[seq % len(self._topics)]
                try:
                    self._producer.produce(topic, key=b"k%d" % (seq % KEYS),
                                           value=record_name(self._run, self._site, seq).encode(),
                                           on_delivery=self._delivered)
                except BufferError:  # the local queue is full: the cluster is slow or gone
                    break
                seq += 1
                self.ledger.sent = seq
            self._producer.poll(0.01)  # callbacks, and the pause between ticks

    def stop(self, grace_s: float) -> None:
        """Stop producing; wait up to `grace_s` for the records in flight to be acknowledged,
        then drop the rest (they were never acknowledged: not the application's to count)."""
        self._stopping.set()
        self._thread.join()
        self._producer.flush(grace_s)
        self._producer.purge()
        self._producer.flush(0)


class GroupReader:
    """Consumer group `group` reading `topics` and committing what it read every 0.2 s."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], run: str,
                 extra: dict[str, object] | None = None) -> None:
        self.read: dict[TopicPartition, dict[int, str]] = defaultdict(dict)  # this run's records
        self.names: list[str] = []  # in the order read (a record read twice is here twice)
        self.first_read: float | None = None
        self.lock = threading.Lock()
        # The consumer's own position per assigned partition, as of its last poll: where it
        # stands even in a partition it has nothing to read in (a group that resumes at the end).
        self._positions: dict[TopicPartition, int] = {}
        self._committed_asked = 0.0  # when the coordinator was last asked for committed offsets
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest", **QUIET, **(extra or {})})
        self._consumer.subscribe(topics)
        self._prefix = f"{run}:"
        self._stopping = threading.Event()
        self._commit_at_stop = True
        self.commits_refused = 0  # commits the coordinator did not take (each made again later)
        self.last_commit_taken = True  # False: the stop's last commit failed until STOP_COMMIT_S
        self._thread = threading.Thread(target=self._loop, name=f"drill-group-{group}", daemon=True)

    def start(self) -> GroupReader:
        self._thread.start()
        return self

    def _loop(self) -> None:
        last_commit = time.monotonic()
        unsaved = False  # read since the last commit the coordinator took
        while not self._stopping.is_set():
            for message in self._consumer.consume(500, 0.1):
                if message.error() is not None:
                    continue
                name = (message.value() or b"").decode(errors="replace")
                if not name.startswith(self._prefix):
                    continue
                with self.lock:
                    if self.first_read is None:
                        self.first_read = time.monotonic()
                    self.read[(message.topic() or "", message.partition() or 0)][message.offset() or 0] = name
                    self.names.append(name)
                unsaved = True
            self._note_positions()
            if unsaved and time.monotonic() - last_commit >= COMMIT_EVERY_S:
                # A commit that failed leaves `unsaved` set: the next one (or the last) makes it.
                unsaved = not self._commit()
                last_commit = time.monotonic()
        if self._commit_at_stop and unsaved:
            # The last commit is where a moved group resumes: one that fails (a coordinator busy
            # or moving) is tried again for a while rather than left to be re-read.
            deadline = time.monotonic() + STOP_COMMIT_S
            while not (taken := self._commit()) and time.monotonic() < deadline:
                time.sleep(COMMIT_EVERY_S)
            self.last_commit_taken = taken
        self._consumer.close()

    def _note_positions(self) -> None:
        try:
            assigned = self._consumer.assignment()
            found = self._consumer.position(assigned)
            # librdkafka knows a position only once it has returned a record of the partition:
            # where the group resumed at the end there is none, and its committed offset is where
            # it stands. Asked of the coordinator, so at most every COMMIT_EVERY_S.
            unknown = [tp for tp in found if tp.offset < 0]
            if unknown and time.monotonic() - self._committed_asked >= COMMIT_EVERY_S:
                self._committed_asked = time.monotonic()
                found = [tp for tp in found if tp.offset >= 0] + self._consumer.committed(unknown, timeout=2)
        except Exception:  # noqa: BLE001 - a rebalance under way: the next poll's will do
            return
        with self.lock:
            for tp in found:
                if tp.offset >= 0:
                    key = (tp.topic, tp.partition)
                    self._positions[key] = max(self._positions.get(key, 0), tp.offset)

    def _commit(self) -> bool:
        """Commit the consumer's position on every assigned partition it has one for, each named
        (not librdkafka's own choice of what changed since its last commit); whether the
        coordinator took every one (a refusal is counted in `commits_refused`; the caller
        commits again)."""
        try:
            positions = [tp for tp in self._consumer.position(self._consumer.assignment()) if tp.offset >= 0]
            if not positions:
                return True
            done = self._consumer.commit(offsets=positions, asynchronous=False)
            refused = [tp.error for tp in done or [] if tp.error is not None]
            if refused:
                raise KafkaException(refused[0])
        except Exception:  # noqa: BLE001 - KafkaException, or a rebalance under way
            self.commits_refused += 1
            return False
        return True

    def read_count(self) -> int:
        with self.lock:
            return len(self.names)

    def positions(self) -> dict[TopicPartition, int]:
        """Per partition: one past the last offset read, or the consumer's position when that is
        further (a group that resumed at a partition's end has read nothing there)."""
        with self.lock:
            read = {tp: max(offsets) + 1 for tp, offsets in self.read.items() if offsets}
            return {tp: max(read.get(tp, 0), self._positions.get(tp, 0)) for tp in {*read, *self._positions}}

    def stop(self, *, commit: bool, timeout_s: float = 10.0) -> None:
        """Stop reading (after a last commit when `commit`). A consumer whose cluster is gone may
        take long to close: it is left to finish in its thread after `timeout_s`."""
        self._commit_at_stop = commit
        self._stopping.set()
        self._thread.join(timeout_s)
