"""Records cut into batches of a bounded size, for a producer that sends many at once.

A batch must stay under the broker's `max.message.bytes` (Kafka's default 1 MiB) or the whole
batch is refused; a producer that sends whatever its input has delivered cuts it here first.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.protocol.records import Record

__all__ = ["DEFAULT_BATCH_BYTES", "RECORD_OVERHEAD", "size_batches"]

DEFAULT_BATCH_BYTES = 512 * 1024  # under Kafka's default max.message.bytes (1 MiB) with room to spare
RECORD_OVERHEAD = 24  # a record's framing, roughly, for sizing batches


def size_batches(records: Iterable[Record], max_bytes: int) -> list[list[Record]]:
    """Consecutive runs of `records`, in order, of at most `max_bytes` each (keys and values
    plus a rough framing, before compression); a record larger than that is a batch alone."""
    out: list[list[Record]] = [[]]
    size = 0
    for r in records:
        n = len(r.key or b"") + len(r.value or b"") + RECORD_OVERHEAD
        if out[-1] and size + n > max_bytes:
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return [b for b in out if b]
