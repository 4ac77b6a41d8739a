"""Where a link-mode mirror's copied batches may land in a mirror topic's log (LinkAppend).

A copy's offsets are the source's, so a batch past the copy's log end leaves a gap, and a gap is
right only where the source has one (compaction, retention, DeleteRecords). Before, any gap was
taken: one batch at the log end + 1,000,000 (or at 2**62), and the real mirror's next batches all
ended below the new log end, were skipped as "already here", and nothing the source wrote after
ever arrived, while the mirror said "lag 0". A log start claimed past the copy's end moved it to
the high watermark and deleted every record.

So each LinkAppend (version 1) says where the source's batch before its first one ended
(``PreviousEndOffset``), which the mirror knows from its own fetches, and before anything is
written (``check_copied_offsets``):

- a batch below the log end is skipped as already here only when the log holds that very batch
  (its offsets and CRC, ``holds_batch``): otherwise the copy is not the source's log any more
  (someone else wrote to it, or it was moved ahead), OFFSET_OUT_OF_RANGE;
- the first batch appended must follow the log end: past it only when the source holds nothing
  from ``PreviousEndOffset`` up to it and that is at or below the log end (nothing is missing) or
  at or below the source's log start the request claims (the source deleted what lies between;
  the copy's log start then follows it). Else OFFSET_OUT_OF_RANGE naming the missing offsets;
- a claimed source log start is refused past the copy's log end after the append
  (``check_log_start``): it would delete records the copy holds for offsets it never had;
- at most one batch of a request may start further past the one before it (or the log end) than
  a segment's 32-bit relative offsets reach: each such gap opens a new segment (three files),
  and a request of tiny batches 2**32 apart would open thousands. A real source has a segment
  per such gap too, each after 2**31 records compacted away: RECORD_LIST_TOO_LARGE, which a
  mirror answers by sending the batches one by one.

What a sender with cluster rights can still do with claims that look honest (the source has
nothing from the copy's end up to its batch; the source's log starts at the copy's end): write
batches of its own, and delete a prefix of the copy; in a compacted topic, whose batches either
cleaner rewrites, replace a batch by another over the same offsets. It cannot make the real mirror skip records
silently: the real mirror's batches at those offsets are not the ones held (refused), and a log
end past the source's high watermark is caught by the mirror itself (mirror/link.py); either
way that partition stops, FAILED.

Kafka's follower has the same two rules in another form: it appends only at its log end
(UnexpectedAppendOffsetException) and takes its leader's log start from each fetch response;
it can trust its leader, a mirror topic cannot trust a sender, so the sender shows its claims.
"""

from __future__ import annotations

from itertools import pairwise

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BATCH_HEADER_SIZE, BatchHeader, read_batch_header, split_batches
from broker.storage.link_copy import is_promotion_marker
from broker.storage.log import Log
from broker.storage.segment import MAX_RELATIVE_OFFSET

__all__ = ["check_copied_offsets", "check_log_start", "holds_batch"]


def check_copied_offsets(log: Log, records: bytes | bytearray | memoryview, *, previous_end: int,
                         source_log_start: int) -> None:
    """Whether a link-mode mirror's batches may go where ``Log.append_copied`` would put them (see
    the module): `previous_end` is where the source's batch before the first one ended,
    `source_log_start` the source's log start offset (-1: not given). Reads batch headers only;
    the caller appends right after, with no await between (the log end cannot move meanwhile).

    Raises KafkaError: INVALID_REQUEST for a `previous_end` missing or past the first batch;
    OFFSET_OUT_OF_RANGE naming the offsets for batches that would skip ahead of the log end,
    straddle it or differ from those held, or a log start past the log end. Batches out of order
    or malformed are left to ``append_copied``, which refuses them (INVALID_RECORD, ...).
    """
    batches = split_batches(records)
    if not batches or any(b.base_offset <= a.last_offset for (_, a), (_, b) in pairwise(batches)):
        return  # append_copied refuses them
    where = log.directory.name
    end = log.log_end_offset
    _check_previous_end(where, previous_end, batches[0][1])
    follows = previous_end  # the source holds nothing from here up to the next batch
    first: BatchHeader | None = None
    for pos, header in batches:
        if is_promotion_marker(records, pos, header):
            continue  # the source's own: append_copied leaves it out (a gap), so it is never held
        if header.last_offset >= end:
            first = header
            break
        if not holds_batch(log, header):
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"{where}: the batch at offsets [{header.base_offset}, {header.last_offset}] is below "
                             f"the log end offset {end} but is not the batch held there: the copy is not the "
                             f"source's log (written by someone else, or moved ahead)")
        follows = header.last_offset + 1
    if source_log_start >= 0:
        check_log_start(where, source_log_start, max(end, batches[-1][1].last_offset + 1))
    if first is None:
        return
    if first.base_offset < end and log.log_start_offset < end:  # an empty log starts over (append_copied)
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{where}: the batch at offsets [{first.base_offset}, {first.last_offset}] straddles the "
                         f"log end offset {end}: the source's log is not the one copied here")
    if first.base_offset > end and follows > end and follows > source_log_start:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{where}: the copy ends at offset {end} and the batch at offset {first.base_offset} follows "
                         f"the source's offset {follows}: offsets {end}..{follows - 1} would be missing (the "
                         f"source's log start is {source_log_start}); a copy never skips ahead")
    _check_wide_gaps(where, end, [header for _, header in batches if header.last_offset >= end])


def _check_wide_gaps(where: str, end: int, appended: list[BatchHeader]) -> None:
    wide = 0
    for header in appended:
        if header.base_offset - end > MAX_RELATIVE_OFFSET:
            wide += 1
            if wide > 1:
                raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                 f"{where}: the batch at offset {header.base_offset} is the second of the request "
                                 f"after a gap wider than a segment's offsets ({MAX_RELATIVE_OFFSET}): one such "
                                 f"gap per request; send the batches one by one")
        end = header.last_offset + 1


def check_log_start(where: str, source_log_start: int, log_end: int) -> None:
    """A copy's log start follows the source's, never past the copy's own log end (that would
    delete every record it holds, for offsets it never had). Raises KafkaError OFFSET_OUT_OF_RANGE."""
    if source_log_start > log_end:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"{where}: the source's log start offset {source_log_start} is past the copy's log end "
                         f"offset {log_end}: the copy's log start never moves past what it holds")


def holds_batch(log: Log, header: BatchHeader) -> bool:
    """Whether `log` holds the batch `header` describes as it is: the same offsets and CRC (which
    covers every byte but the base offset, length, partition leader epoch and magic). Offsets
    below the log start count as held (retention and DeleteRecords remove them here as at the
    source). In a compacted log either cleaner may have rewritten the batch since it was copied
    (the source's, this one's), so a batch of this log over some of its offsets is all that can
    be asked: a copy moved ahead still has none there. One header read."""
    if header.last_offset < log.log_start_offset:
        return True
    if log.config.compacts and header.last_offset < log.cleaned_up_to:
        return True  # may be gone whole: every record of it had a later one
    data = log.read(header.base_offset, BATCH_HEADER_SIZE, min_one_batch=False).data
    if len(data) < BATCH_HEADER_SIZE:
        return False
    held = read_batch_header(data)
    if log.config.compacts:
        return held.base_offset <= header.last_offset
    return (held.base_offset, held.last_offset, held.crc, held.size) == (
        header.base_offset, header.last_offset, header.crc, header.size)


def _check_previous_end(where: str, previous_end: int, first: BatchHeader) -> None:
    if previous_end < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"{where}: the request does not say where the source's batch before offset "
                         f"{first.base_offset} ended (PreviousEndOffset): a gap the source has cannot be told "
                         f"from one that skips ahead of the copy")
    if previous_end > first.base_offset:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"{where}: PreviousEndOffset {previous_end} lies past the first batch, at offset "
                         f"{first.base_offset}")
