"""What a drill's records became, counted one by one: which acknowledged records the DR site
holds (RPO), which it holds twice, what the moved group read again and what it never read."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from deploy.drill.workload import QUIET, TopicPartition

__all__ = ["NO_OFFSET", "EndsProbe", "Lost", "Outcome", "committed_offsets", "log_ends", "offset_ranges", "outcome",
           "read_logs", "wait_copied"]

NO_OFFSET = -1  # OffsetFetch's committed_offset where the group has none


def log_ends(bootstrap: str, partitions: list[TopicPartition], timeout_s: float = 10.0) -> dict[TopicPartition, int]:
    """Each partition's high watermark at `bootstrap`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "causeway-drill-probe", **QUIET})
    try:
        return {(t, p): consumer.get_watermark_offsets(KafkaTopicPartition(t, p), timeout=timeout_s)[1]
                for t, p in partitions}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, partitions: list[TopicPartition],
                      timeout_s: float = 10.0) -> dict[TopicPartition, int]:
    """Group `group`'s committed offsets on `partitions` at `bootstrap`, from one OffsetFetch to
    its coordinator (a consumer with the group's id that never subscribes, so never joins it):
    NO_OFFSET where it has none. Raises KafkaException when the coordinator does not answer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        found = consumer.committed([KafkaTopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else NO_OFFSET for tp in found}


class EndsProbe:
    """The DR site's log ends, asked again and again from one consumer (the chart's sampler
    thread asks it every half second): opened at the first question, closed by `close`."""

    def __init__(self, bootstrap: str, partitions: list[TopicPartition]) -> None:
        self._bootstrap, self._partitions = bootstrap, partitions
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def ends(self) -> dict[TopicPartition, int]:
        with self._lock:
            if self._consumer is None:
                self._consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "causeway-drill-probe",
                                           **QUIET})
            return {(t, p): self._consumer.get_watermark_offsets(KafkaTopicPartition(t, p), timeout=1.0)[1]
                    for t, p in self._partitions}

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


def wait_copied(bootstrap: str, partitions: list[TopicPartition], names: set[str], run: str, *, timeout_s: float,
                stop: threading.Event) -> int:
    """Wait until the logs at `bootstrap` (the DR site's copies) hold every record named in
    `names`; return how many of this run's records they hold. Raises TimeoutError naming how many
    are missing, KeyboardInterrupt once `stop` is set."""
    deadline = time.monotonic() + timeout_s
    while True:
        copy = read_logs(bootstrap, log_ends(bootstrap, partitions), timeout_s=timeout_s)
        held = {name for records in copy.values() for name in records.values() if name.startswith(f"{run}:")}
        missing = len(names - held)
        if not missing:
            return len(held)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{missing} acknowledged record(s) still not copied after {timeout_s:.0f} s")
        if stop.wait(0.5):
            raise KeyboardInterrupt


def read_logs(bootstrap: str, ends: dict[TopicPartition, int],
              timeout_s: float = 60.0) -> dict[TopicPartition, dict[int, str]]:
    """Every record below `ends` at `bootstrap`: by partition, offset -> value (no group)."""
    found: dict[TopicPartition, dict[int, str]] = {tp: {} for tp in ends}
    wanted = {tp: end for tp, end in ends.items() if end > 0}
    if not wanted:
        return found
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "causeway-drill-probe",
                         "enable.auto.commit": False, **QUIET})
    consumer.assign([KafkaTopicPartition(t, p, 0) for t, p in wanted])
    deadline = time.monotonic() + timeout_s
    try:
        while wanted:
            if time.monotonic() > deadline:
                left = ", ".join(f"{t}-{p}" for t, p in sorted(wanted))
                raise TimeoutError(f"the DR site's records could not all be read in {timeout_s:.0f} s ({left})")
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    continue
                tp, offset = (message.topic() or "", message.partition() or 0), message.offset() or 0
                if tp in wanted and offset < wanted[tp]:
                    found[tp][offset] = (message.value() or b"").decode(errors="replace")
                    if offset + 1 >= wanted[tp]:
                        del wanted[tp]
    finally:
        consumer.close()
    return found


def offset_ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as inclusive (first, last) ranges of consecutive offsets."""
    ranges: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if ranges and offset == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return ranges


@dataclass
class Lost:
    topic: str
    partition: int
    count: int
    ranges: list[tuple[int, int]]  # the primary's offsets of the records lost


@dataclass
class Outcome:
    acknowledged: int  # at the primary
    reached: int  # of those, held by the DR site
    lost: list[Lost] = field(default_factory=list)
    duplicates: int = 0  # acknowledged records the DR site holds more than once
    reread: int = 0  # records the moved group read at the DR site after reading them at the primary
    skipped: int = 0  # records at the DR site (mirrored or produced there) the group never read
    # The baseline of the re-reads: the group's committed offsets at the DR site right after the
    # promotion (NO_OFFSET: none; it then starts at the log start, auto.offset.reset=earliest)
    # and the log end offsets the copies had then.
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    log_end: dict[TopicPartition, int] = field(default_factory=dict)
    # The re-reads that baseline accounts for: records the copies held at or past the committed
    # offsets that the group had read at the primary (read there after the DR site's last copy of
    # its offsets). A group that resumed at its committed offsets re-reads exactly these.
    reread_expected: int = 0
    reread_below_committed: int = 0  # records the group read at the DR site below its committed offsets there

    @property
    def rpo(self) -> int:
        return sum(lost.count for lost in self.lost)


def outcome(acked_primary: dict[TopicPartition, dict[int, str]], dr_copy: dict[TopicPartition, dict[int, str]],
            acked_dr: set[str], read_primary: list[str], read_dr: list[str], run: str,
            committed: dict[TopicPartition, int] | None = None, log_end: dict[TopicPartition, int] | None = None,
            read_dr_at: dict[TopicPartition, dict[int, str]] | None = None) -> Outcome:
    """The drill's counts from what was acknowledged at each site, what the DR site held at the
    promotion (`dr_copy`, by the copies' partitions and offsets), the names the group read at
    each site in the order read, and, for the re-reads' baseline, the group's committed offsets
    at the DR site at the promotion (`committed`, by the copies' partitions, with their
    `log_end` offsets then) and the offsets of what it read there (`read_dr_at`)."""
    held = Counter(name for records in dr_copy.values() for name in records.values() if name.startswith(f"{run}:"))
    acknowledged = {name for records in acked_primary.values() for name in records.values()}
    lost = []
    for (topic, partition), records in sorted(acked_primary.items()):
        missing = [offset for offset, name in records.items() if name not in held]
        if missing:
            lost.append(Lost(topic, partition, len(missing), offset_ranges(missing)))
    seen_primary = set(read_primary)
    should_read = set(held) | acked_dr
    committed = committed or {}
    # Where the group's reads at the DR site begin by its committed offsets (none: the log start,
    # these copies' first offset), record by record, so a record the copy holds twice counts twice.
    start = {tp: committed.get(tp, NO_OFFSET) for tp in dr_copy}
    return Outcome(acknowledged=len(acknowledged), reached=len(acknowledged & set(held)), lost=lost,
                   duplicates=sum(n - 1 for name, n in held.items() if n > 1 and name in acknowledged),
                   reread=sum(1 for name in read_dr if name in seen_primary),
                   skipped=len(should_read - seen_primary - set(read_dr)),
                   committed=dict(committed), log_end=dict(log_end or {}),
                   reread_expected=sum(1 for tp, records in dr_copy.items() for offset, name in records.items()
                                       if offset >= start[tp] and name in seen_primary),
                   reread_below_committed=sum(1 for tp, records in (read_dr_at or {}).items()
                                              for offset in records if offset < committed.get(tp, NO_OFFSET)))
