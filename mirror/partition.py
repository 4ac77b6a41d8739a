"""One mirrored partition: the queue between its fetches and its writes, and the writer.

The fetcher (mirror/fetcher.py) appends whole batches as they came off the wire; the writer sends
them to the same partition of the remote topic one batch per request (Apache Kafka takes one batch
per partition per produce request), re-stamped with the mirror's idempotent producer id so a
resent batch is never written twice. A batch is never decoded: its CRC is checked before the
restamp (which computes a new CRC) so damaged bytes are refused, not laundered.

Errors are the partition's own: retriable ones are retried with backoff; the others (too large
for the target, refused by an ACL, ...) park the partition, which retries slowly and says why in
the status, while every other partition keeps flowing (mirror/write_retry.py, the loop link
mode's writer uses too).

Poison is parked the same way, before it is written: a batch Kafka's LogValidator would refuse
(a record count that lies, an unknown codec, records that do not decompress or do not tile the
batch; broker/protocol/validation.py) can sit in a source that does not validate, and copied on,
it would wedge the target's consumers too. So is a batch the target refuses as invalid.

The remote partition can also lose records under the mirror (deleted and re-created at the target,
truncated): a write landing below the log end the mirror knows it made there tells the writer,
which hands the partition to `on_target_went_back` (mirror/recopy.py re-copies it).

In exactly-once mode a partition writes inside the mirror's open transaction (mirror/exactly_once.py)
and waits to try again outside it, so a parked partition holds back no commit; unless an attempt
may have been written (it timed out): that is settled first, in the transaction it went into, so
the positions committed never leave a record written behind them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import trio

from broker.client import Backoff, Client, ClientError, TopicPartition, produce_batches
from broker.clock import now_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    Record,
    TimestampType,
    batch_crc_ok,
    build_batch,
    decode_batch,
    read_batch_header,
    stamp_producer,
)
from broker.protocol.validation import check_batch
from mirror.exactly_once import Slot, TransactionGate
from mirror.metrics import LatencyWindow
from mirror.offset_sync import SyncEmitter
from mirror.write_retry import PARK_BACKOFF, Failed, Handled, write_with_retries

__all__ = ["Chunk", "PartitionMirror", "ProducerIdentity"]

Buffer = bytes | bytearray | memoryview

log = logging.getLogger(__name__)

SEQUENCE_MODULUS = 1 << 31
# Errors after which the target no longer knows our producer (state lost or fenced): take a new
# producer id; the batch was not written, so nothing is duplicated.
_NEW_PRODUCER = frozenset({
    ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})
# What the target answers for a batch it will never take as it is (its LogValidator's verdicts):
# retrying cannot help, so the partition parks and says which batch and why.
REFUSED_AS_INVALID = frozenset({
    ErrorCode.CORRUPT_MESSAGE,  # the mirror checked the CRC: here it means the target's validation
    ErrorCode.INVALID_RECORD,
    ErrorCode.INVALID_TIMESTAMP,
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
})
# Answers after which the batch may or may not be at the target (no answer in time, or appended
# but not replicated): only sending it again (same sequence number) settles which.
MAYBE_WRITTEN = frozenset({
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})


@dataclass
class ProducerIdentity:
    """The mirror's producer id and epoch at the target; `generation` changes when renewed, so
    each partition knows to restart its sequence numbers."""

    producer_id: int = -1
    producer_epoch: int = -1
    generation: int = 0
    renew_requested: trio.Event = field(default_factory=trio.Event)
    renewed: trio.Event = field(default_factory=trio.Event)
    # Exactly-once mode: every write goes into the mirror's open transaction at the target.
    gate: TransactionGate | None = None

    @property
    def transactional_id(self) -> str | None:
        return None if self.gate is None or self.gate.producer is None else self.gate.producer.transactional_id

    async def wait_renewed(self, stopped: Callable[[], bool]) -> None:
        """Ask for a new producer id (epoch) and wait until it is there (or `stopped()`)."""
        generation = self.generation
        self.renew_requested.set()
        while self.generation == generation and not stopped():
            await self.renewed.wait()

    def set(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.generation += 1
        self.renew_requested = trio.Event()
        renewed, self.renewed = self.renewed, trio.Event()
        renewed.set()


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole batches fetched from the source, in offset order, with each batch's position and
    header as the fetcher parsed them (so the writer does not parse them again)."""

    data: memoryview
    spans: list[tuple[int, BatchHeader]]

    @property
    def size(self) -> int:
        return len(self.data)

    @classmethod
    def of(cls, records: Buffer) -> Chunk | None:
        """The whole batches at the start of a fetched record set (a partial last batch left
        out), or None when there is not one whole batch."""
        return cls.parse(records)[0]

    @classmethod
    def parse(cls, records: Buffer) -> tuple[Chunk | None, str | None]:
        """(the whole batches before anything damaged, or None; what is damaged after them, or
        None). A header that cannot be a batch (magic other than 2, a length below a header) is
        damage at the source: fetching again returns the same bytes."""
        spans: list[tuple[int, BatchHeader]] = []
        damage = None
        pos, end = 0, len(records)
        while end - pos >= BATCH_HEADER_SIZE:
            try:
                header = read_batch_header(records, pos)
            except KafkaError as exc:
                damage = f"{exc.code.name} at the source: {exc.message}"
                break
            if pos + header.size > end:
                break  # cut by the fetch size: the rest comes next time
            spans.append((pos, header))
            pos += header.size
        if not spans:
            return None, damage
        last = spans[-1][0] + spans[-1][1].size
        return cls(memoryview(records)[:last], spans), damage

    @property
    def next_offset(self) -> int:
        return self.spans[-1][1].last_offset + 1


@dataclass
class PartitionMirror:
    source: TopicPartition
    target: TopicPartition
    position: int  # next source offset to fetch
    max_offset_lag: int
    queue_max_bytes: int
    written_through: int = -1  # last source offset the target acknowledged
    high_watermark: int = -1
    log_start_offset: int = -1
    queued_bytes: int = 0
    records: int = 0  # records written in this run (by offset span)
    bytes: int = 0
    latency_ms: int | None = None  # source timestamp to arrival, of the newest batch written
    latencies: LatencyWindow = field(default_factory=LatencyWindow)  # of the last 30 s (metrics)
    error: str | None = None
    parked: bool = False
    gaps: list[str] = field(default_factory=list)
    duplicates_expected: int = 0
    _chunks: deque[Chunk] = field(default_factory=deque)
    _ready: trio.Event = field(default_factory=trio.Event)
    on_space: Callable[[], None] = lambda: None  # the fetch lane's wake-up
    emitter: SyncEmitter = field(init=False)
    sequence: int = 0
    generation: int = -1
    expected_next_downstream: int = -1
    stopped: bool = False
    # Bumped by every rewind: a fetch answer for an older epoch is dropped, since it was asked
    # for from a position that no longer holds.
    epoch: int = 0
    trim_below: int = -1  # the source's log start after a gap: records below it are not copied
    # The remote partition's log end is at least this (everything the mirror wrote there, as far
    # as it knows): an end below it means the target lost records under the mirror.
    min_target_end: int = -1
    copied_from: int | None = None  # lowest source offset known to be at the target, if known
    held: bool = False  # neither fetched nor written: a re-copy is being set up
    recopy: str | None = None  # while re-copying what the target lost: why, for the status
    recopy_until: int = -1  # the source end when the re-copy began: caught up past it, it is done
    lost: str | None = None  # records the target lost that the source no longer has, by offsets
    failed: str | None = None  # stopped for good, FAILED: the target's copy is not the source's (why)
    on_target_went_back: Callable[[PartitionMirror, int, str], None] = lambda pm, end, why: None
    fetch_failures: int = 0  # consecutive failed fetches of this partition
    retry_at: float = 0.0  # trio clock: not fetched again before this
    park_failures: int = 0  # consecutive parks on poison (their backoff)
    # A write whose outcome is unknown (MAYBE_WRITTEN) and not settled since by a write going
    # through or a new producer epoch: in exactly-once mode it keeps the partition's slot.
    maybe_written: bool = False
    partial_answers: int = 0  # consecutive fetch answers with bytes but no whole batch
    # Link mode: the target's high watermark as its last answer gave it (offsets are the
    # source's there); -1 when unknown, and always in mm2 mode.
    target_end: int = -1

    def __post_init__(self) -> None:
        self.emitter = SyncEmitter(self.max_offset_lag)

    @property
    def lag(self) -> int:
        """Source log end minus the mirrored position (records not yet at the target)."""
        if self.high_watermark < 0:
            return 0
        return max(0, self.high_watermark - (self.written_through + 1))

    def oldest_waiting_ms(self) -> int | None:
        """The first timestamp of the oldest fetched batch not yet written (the record that has
        waited longest), or None when nothing fetched waits (caught up, or not fetched yet)."""
        for chunk in self._chunks:
            for _pos, header in chunk.spans:
                if header.last_offset > self.written_through:
                    return header.base_timestamp
        return None

    @property
    def wants_data(self) -> bool:
        return not self.stopped and not self.held and self.queued_bytes < self.queue_max_bytes

    def put(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)
        self.queued_bytes += chunk.size
        self.position = chunk.next_offset
        self._ready.set()

    def stop(self) -> None:
        self.stopped = True
        self._ready.set()

    async def _take(self) -> Chunk | None:
        while not self._chunks:
            if self.stopped:
                return None
            self._ready = trio.Event()
            await self._ready.wait()
        return self._chunks[0]

    def _done_with(self, chunk: Chunk) -> None:
        self._chunks.popleft()
        self.queued_bytes -= chunk.size
        self.on_space()

    def rewind(self, position: int) -> None:
        """Drop everything queued and fetch again from `position` (a refused, damaged batch)."""
        self._chunks.clear()
        self.queued_bytes = 0
        self.position = position
        self.epoch += 1
        self.on_space()

    def hold(self) -> None:
        """Stop fetching and writing at once (a write in flight is abandoned when it returns)."""
        self.held = True
        self.rewind(self.position)

    def copy_again(self, position: int, *, log_start: int, target_end: int, lost_downstream: int,
                   why: str, until: int) -> None:
        """Mirror again from source `position` after the target lost records: the remote
        partition ends at `target_end`, `lost_downstream` records this run wrote are gone from it
        (no longer counted), the source's log starts at `log_start`."""
        if self.records:
            kept = max(0, self.records - lost_downstream)
            self.bytes = self.bytes * kept // self.records
            self.records = kept
        self.rewind(position)
        self.written_through = position - 1
        self.trim_below = log_start
        # The first write must land at the target's end; elsewhere is reported (someone else wrote).
        self.expected_next_downstream = target_end
        self.min_target_end = target_end
        if target_end <= 0:
            self.copied_from = position
        self.emitter = SyncEmitter(self.max_offset_lag)
        self.recopy, self.recopy_until = why, until
        self.held = False
        self.on_space()

    def park_at_source(self, reason: str, retry_in_s: float) -> None:
        """Fetched bytes at `position` that cannot be copied (damaged at the source, or a batch
        that never arrives whole): say so and ask again only after `retry_in_s`."""
        self.error = f"parked at source offset {self.position}: {reason}"
        if not self.parked:
            log.error("%s: %s", _name(self.source), self.error)
        self.parked = True
        self.retry_at = trio.current_time() + retry_in_s

    def source_went_back(self, start: int, end: int) -> str | None:
        """The source's log now ends at `end`, before `position` (truncated, or deleted and
        created again): copy it again from its log start `start`. Returns what to report (None:
        nothing new)."""
        message = (f"{_name(self.source)}: the source log ends at {end}, before the mirror's position "
                   f"{self.position} (truncated or re-created); mirroring it again from {start}")
        self.rewind(start)
        self.written_through = start - 1
        return message

    def note_gap(self, message: str) -> None:
        self.gaps.append(message)
        del self.gaps[:-10]

    async def run_writer(
        self,
        client: Client,
        producer: ProducerIdentity,
        on_sync: Callable[[PartitionMirror, int, int], None],
        *,
        backoff: Backoff,
    ) -> None:
        """Write queued batches to the target until stopped (then return, leaving what is still
        queued unwritten) or cancelled."""
        while True:
            chunk = await self._take()
            if chunk is None or self.stopped:
                # Stopped with batches still queued: they are not written (and looping on them
                # would spin without ever yielding to trio).
                return
            if producer.gate is None:
                rewound = await self._write_chunk(client, producer, on_sync, chunk, backoff)
            else:
                rewound = await self._write_chunk_in_transaction(client, producer, on_sync, chunk, backoff)
            if not rewound:
                self._done_with(chunk)

    async def _write_chunk_in_transaction(self, client: Client, producer: ProducerIdentity,
                                          on_sync: Callable[[PartitionMirror, int, int], None], chunk: Chunk,
                                          backoff: Backoff) -> bool:
        assert producer.gate is not None
        try:
            async with producer.gate.slot(self.target) as slot:
                return await self._write_chunk(client, producer, on_sync, chunk, backoff,
                                               pause=partial(self._pause_in_transaction, slot))
        except (KafkaError, ClientError) as exc:
            # Not added to the transaction: a new epoch, and the mirror rewinds every partition
            # to what the target committed.
            self.error = f"adding {_name(self.target)} to the mirror's transaction: {exc}"
            log.warning("%s: %s; taking a new producer epoch", _name(self.source), self.error)
            await producer.wait_renewed(lambda: self.stopped)
            return True

    async def _pause_in_transaction(self, slot: Slot, seconds: float) -> None:
        """Wait to try again: outside the transaction, so the mirror's commits go on (nothing
        of this partition's is in flight), unless a write may be at the target unsettled."""
        if self.maybe_written:
            await trio.sleep(seconds)
        else:
            await slot.sleep(seconds)

    async def _write_chunk(self, client: Client, producer: ProducerIdentity,
                           on_sync: Callable[[PartitionMirror, int, int], None], chunk: Chunk,
                           backoff: Backoff, *, pause: Callable[[float], Awaitable[None]] = trio.sleep) -> bool:
        """Write the batches of `chunk` not yet written; True when it stopped short (rewound,
        parked, stopped). `pause`: how it waits before trying again."""
        data = chunk.data
        epoch = self.epoch
        for pos, header in chunk.spans:
            if header.last_offset <= self.written_through:
                continue  # already written (a chunk fetched again after a rewind)
            if not batch_crc_ok(data, pos, header):
                self.error = f"corrupt batch at source offset {header.base_offset} (CRC mismatch); fetching it again"
                log.warning("%s: %s", _name(self.source), self.error)
                self.rewind(header.base_offset)
                await pause(backoff.delay(1))
                return True
            if header.is_control:
                # Transaction markers stay at the source; the gap they leave is synced below.
                self.written_through = header.last_offset
                continue
            try:
                if header.compression == Compression.NONE:
                    check_batch(data, pos, header)  # one walk over the record lengths: cheap
                else:
                    # Decompressing is the only proof, and a few KB can claim up to the validator's
                    # bound (128 MB): off the event loop.
                    await trio.to_thread.run_sync(check_batch, data, pos, header)
            except KafkaError as exc:
                await self._park_poison(header, f"{exc.code.name} at the source: {exc.message}", epoch, pause)
                return True
            if self.epoch != epoch:
                return True  # rewound (or held) while it was checked
            upstream_base, last_delta = header.base_offset, header.last_offset_delta
            if header.base_offset < self.trim_below:
                # The source's log now starts inside this batch (DeleteRecords): the records before
                # it are gone for consumers there, so they are not copied either. Rare: decode it.
                batch, upstream_base, last_delta = _trimmed(data, pos, self.trim_below)
            else:
                batch = bytearray(data[pos : pos + header.size])
            base = await self._send(client, producer, batch, last_delta, backoff, header, epoch, pause)
            if base is None or self.epoch != epoch:  # stopped, or rewound, while writing
                return True
            if 0 <= base < self.min_target_end:
                # The target's log end went back (re-created, truncated) since our last write.
                self.on_target_went_back(self, base, (
                    f"the remote partition {_name(self.target)} went back from offset {self.min_target_end} "
                    f"to {base} (deleted and re-created, or truncated); the batch of source offsets "
                    f"{header.base_offset}..{header.last_offset} just written there at {base} will appear "
                    f"again in the re-copy"))
                return True
            self.written_through = header.last_offset
            if self.recopy is not None and self.written_through + 1 >= self.recopy_until:
                log.info("%s: re-copied through source offset %d after: %s", _name(self.source),
                         self.written_through, self.recopy)
                self.recopy = None
            self.records += last_delta + 1
            self.bytes += len(batch)
            if header.timestamp_type == TimestampType.CREATE_TIME and header.max_timestamp >= 0:
                self.latency_ms = self.latencies.add(max(0, now_ms() - header.max_timestamp))
            if base >= 0:
                if self.expected_next_downstream >= 0 and base != self.expected_next_downstream:
                    self._note_foreign_writes(base)
                self.expected_next_downstream = base + last_delta + 1
                self.min_target_end = max(self.min_target_end, self.expected_next_downstream)
                sync = self.emitter.on_batch(upstream_base, base, last_delta)
                if sync is not None:
                    on_sync(self, *sync)
        return False

    def _note_foreign_writes(self, base: int) -> None:
        message = (f"the remote topic {_name(self.target)} has records the mirror did not write "
                   f"(expected the next at offset {self.expected_next_downstream}, got {base})")
        if base < self.expected_next_downstream:
            message = (f"the remote topic {_name(self.target)} went back from offset "
                       f"{self.expected_next_downstream} to {base} (truncated or re-created)")
        log.warning("%s", message)
        self.note_gap(message)

    async def _park_poison(self, header: BatchHeader, reason: str, epoch: int,
                           pause: Callable[[float], Awaitable[None]] = trio.sleep) -> None:
        """Park on a batch the target must not get: say which and why, fetch it again later (the
        source may be repaired, e.g. the batch removed by DeleteRecords)."""
        if self.epoch != epoch:
            return  # rewound meanwhile (a re-copy): this batch is not next any more
        self.error = (f"parked at source offset {header.base_offset} (batch {header.base_offset}.."
                      f"{header.last_offset}): {reason}; not copied, so the target's consumers are not "
                      f"wedged by it")
        if not self.parked:
            log.error("%s: %s", _name(self.source), self.error)
        self.parked = True
        self.park_failures += 1
        await pause(PARK_BACKOFF.delay(self.park_failures))
        if self.epoch == epoch:
            self.rewind(header.base_offset)

    async def _send(self, client: Client, producer: ProducerIdentity, batch: bytearray, last_delta: int,
                    backoff: Backoff, header: BatchHeader, epoch: int,
                    pause: Callable[[float], Awaitable[None]]) -> int | None:
        """Write one batch exactly once; returns its base offset at the target (-1 when the target
        only said it had it already), None when stopped or rewound (`epoch` passed) meanwhile."""

        async def send() -> int | Failed | Handled:
            if self.generation != producer.generation:
                # A new epoch: what the last one left unsettled was aborted (exactly-once) or
                # fenced, so it is not written.
                self.generation, self.sequence, self.maybe_written = producer.generation, 0, False
            in_transaction = producer.gate is not None
            stamp_producer(batch, 0, producer.producer_id, producer.producer_epoch, self.sequence,
                           clear_transactional=not in_transaction, set_transactional=in_transaction)
            result = (await produce_batches(client, {self.target: batch}, acks=-1,
                                            transactional_id=producer.transactional_id))[self.target]
            code = ErrorCode(result.error)
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self.sequence = (self.sequence + last_delta + 1) % SEQUENCE_MODULUS
                self.writing_again()
                return result.base_offset if code == ErrorCode.NONE else -1
            self.error = f"{code.name} writing to {_name(self.target)}" + (
                f": {result.error_message}" if result.error_message else "")
            self.maybe_written = self.maybe_written or code in MAYBE_WRITTEN
            if code in REFUSED_AS_INVALID:
                await self._park_poison(header, f"the target refused it with {self.error}", epoch, pause)
                return Handled.GIVE_UP
            if code in _NEW_PRODUCER:
                log.warning("%s: %s; taking a new producer id", _name(self.source), self.error)
                await producer.wait_renewed(lambda: self.stopped)
                return Handled.SEND_AGAIN
            return Failed(code)

        return await write_with_retries(self, epoch, send, backoff=backoff, at_offset=header.base_offset,
                                        sleep=pause)

    def writing_again(self) -> None:
        """A write went through: whatever parked the partition or made its writes fail is over."""
        if self.error is not None:
            log.info("%s: writing again after: %s", _name(self.source), self.error)
        self.error, self.parked, self.park_failures, self.maybe_written = None, False, 0, False


def _trimmed(data: memoryview, pos: int, first: int) -> tuple[bytearray, int, int]:
    """The batch at `pos` without its records below offset `first`, offsets kept relative to the
    first record kept: (batch, its upstream base offset, its last offset delta)."""
    header, records = decode_batch(data, pos)
    kept = [r for r in records if r.offset >= first]
    base = kept[0].offset
    batch = build_batch(
        [Record(r.key, r.value, r.headers, r.timestamp) for r in kept],
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        offset_deltas=[r.offset - base for r in kept],
    )
    return bytearray(batch), base, kept[-1].offset - base


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
