"""Fetch lanes: each reads its share of the mirrored partitions from the source across the WAN.

A lane keeps one large fetch in flight for all its partitions and hands whole batches to each
partition's queue, so a slow write never stalls the link and a slow link never stalls writes. A
partition whose queue is full is left out of the next fetch until its writer catches up (the
memory bound). Several lanes run side by side so a long link carries several answers at once.

Errors are per partition. Bytes that cannot be a batch (damaged at the source) park the
partition, by name and offset, as a batch the target would refuse does (mirror/partition.py). A
position the source no longer has (retention, DeleteRecords, a re-created topic) is reported by
name with the records that were lost, then the partition goes on from where the source's log
starts. A source that cannot be reached is retried with backoff.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import trio

from broker.client import Backoff, Client, ConnectionFailed, TopicPartition, admin, fetch
from broker.client.admin import EARLIEST, LATEST
from broker.protocol.errors import ErrorCode, KafkaError
from broker.retry import worth_reporting
from mirror.partition import Chunk, PartitionMirror
from mirror.write_retry import PARK_BACKOFF

__all__ = ["FETCH_RETRY", "FetchLane", "FetchSettings"]

log = logging.getLogger(__name__)

_UNREACHABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
# Consecutive answers with bytes but no whole batch before the partition is reported as stuck.
PARTIAL_ANSWERS_REPORTED = 5
#: How long a partition whose fetch failed waits before it is asked for again: Kafka's consumer
#: defaults (retry.backoff.ms 100, retry.backoff.max.ms 1000). Most failures are a leader that
#: moved or died: its partitions are served again as soon as the cluster elects another leader
#: (a Kafka source fences a dead broker after broker.session.timeout.ms, 9 s by default), and a
#: longer cap only adds to that; a source down for longer costs one fetch per lane per second at
#: most, since the client backs off connects to a dead broker on its own.
FETCH_RETRY = Backoff(initial_s=0.1, max_s=1.0)


@dataclass(frozen=True)
class FetchSettings:
    max_wait_ms: int = 500
    max_bytes: int = 52_428_800
    partition_max_bytes: int = 8_388_608


@dataclass
class FetchLane:
    client: Client
    settings: FetchSettings
    on_idle: Callable[[PartitionMirror], None]
    backoff: Backoff = FETCH_RETRY
    partitions: dict[TopicPartition, PartitionMirror] = field(default_factory=dict)
    _wake: trio.Event = field(default_factory=trio.Event)
    failures: int = 0
    last_error: str | None = None

    def add(self, pm: PartitionMirror) -> None:
        self.partitions[pm.source] = pm
        pm.on_space = self.wake
        self.wake()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            now = trio.current_time()
            wanting = [pm for pm in self.partitions.values() if pm.wants_data]
            active = {pm.source: pm for pm in wanting if pm.retry_at <= now}
            if not active:
                # Nothing to ask for: wait for queue space, a new partition, or a retry coming due.
                self._wake = trio.Event()
                with trio.move_on_at(min((pm.retry_at for pm in wanting), default=math.inf)):
                    await self._wake.wait()
                continue
            await self._fetch_once(active)

    async def _fetch_once(self, active: dict[TopicPartition, PartitionMirror]) -> None:
        positions = {tp: pm.position for tp, pm in active.items()}
        epochs = {tp: pm.epoch for tp, pm in active.items()}
        results = await fetch(
            self.client,
            positions,
            max_wait_ms=self.settings.max_wait_ms,
            max_bytes=self.settings.max_bytes,
            partition_max_bytes=self.settings.partition_max_bytes,
        )
        unreachable = 0
        for tp, part in results.items():
            pm = active[tp]
            if pm.stopped or pm.epoch != epochs[tp] or pm.position != positions[tp]:
                continue  # rewound or stopped while the answer was on its way
            code = part.error
            if code == ErrorCode.NONE:
                pm.high_watermark = part.high_watermark
                pm.log_start_offset = part.log_start_offset
                chunk, damage = Chunk.parse(part.records)
                if chunk is not None:
                    pm.put(chunk)  # what is whole before any damage; the damage is met next time
                    pm.partial_answers = 0
                elif damage is not None:
                    pm.fetch_failures += 1
                    pm.park_at_source(damage, PARK_BACKOFF.delay(pm.fetch_failures))
                    continue
                elif pm.position >= part.high_watermark:
                    self.on_idle(pm)
                elif len(part.records):
                    self._no_whole_batch(pm, part.records)
                    continue
                if pm.fetch_failures:
                    pm.fetch_failures, pm.error = 0, None
                continue
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                await self._out_of_range(pm)
                continue
            if code in _UNREACHABLE:
                unreachable += 1
            # This partition alone waits before it is asked for again; the others keep flowing.
            pm.fetch_failures += 1
            pm.retry_at = trio.current_time() + self.backoff.delay(pm.fetch_failures)
            pm.error = f"fetch from {tp.topic}-{tp.partition}: {ErrorCode(code).name}" + (
                f" ({part.error_message})" if part.error_message else "")
        if unreachable and unreachable == len(results):
            self.failures += 1
            message = next(iter(results.values())).error_message or "no answer"
            if worth_reporting(self.failures):
                # This lane's partitions only: the others may sit on brokers that answer.
                log.warning("source unreachable for %s (%s); attempt %d, retrying with backoff", _names(results),
                            message, self.failures)
            self.last_error = message
        elif unreachable == 0:
            if self.failures >= 1:
                log.info("source reachable again after %d failed fetches", self.failures)
            self.failures = 0
            self.last_error = None

    def _no_whole_batch(self, pm: PartitionMirror, records: bytes | bytearray | memoryview) -> None:
        """Bytes came, but not one whole batch. A broker sends the first batch whole even past
        the size limits (KIP-74), so this is a response cut short by its total size, or, when it
        happens again and again, a batch whose length field is wrong at the source."""
        pm.partial_answers += 1
        if pm.partial_answers < PARTIAL_ANSWERS_REPORTED:
            return
        declared = struct.unpack_from(">i", records, 8)[0] + 12 if len(records) >= 12 else None
        pm.fetch_failures += 1
        pm.park_at_source(f"no whole batch arrives: the batch there declares {declared} bytes and the source "
                          f"sent {len(records)} (max.partition.fetch.bytes {self.settings.partition_max_bytes}); "
                          f"damaged at the source?", PARK_BACKOFF.delay(pm.fetch_failures))

    async def _out_of_range(self, pm: PartitionMirror) -> None:
        tp = pm.source
        try:
            start = (await admin.list_offsets(self.client, {tp: EARLIEST}))[tp].offset
            end = (await admin.list_offsets(self.client, {tp: LATEST}))[tp].offset
        except (KafkaError, ConnectionFailed) as exc:
            pm.error = f"fetch from {tp.topic}-{tp.partition}: offset out of range, and the range is unknown: {exc}"
            return
        if pm.position < start:
            message = (f"{tp.topic}-{tp.partition}: source offsets {pm.position}..{start - 1} were removed "
                       f"(retention or DeleteRecords) before they were mirrored; continuing at {start}")
            pm.position = start  # what is queued (below the gap) is still written
            pm.trim_below = start
            pm.lost = message  # never at the target: a problem in the status until a restart
        elif pm.position > end:
            went_back = pm.source_went_back(start, end)
            if went_back is None:
                return  # already reported
            message = went_back
        else:
            return  # the range moved back while we asked: fetch again
        log.error("%s", message)
        pm.gaps.append(message)
        del pm.gaps[:-10]


def _names(tps: Collection[TopicPartition], shown: int = 5) -> str:
    """`orders-0, orders-1` (the first `shown`, then how many more)."""
    names = [f"{tp.topic}-{tp.partition}" for tp in list(tps)[:shown]]
    more = len(tps) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")
