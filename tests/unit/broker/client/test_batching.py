"""A producer's records cut into batches of bounded size, in order, none lost."""

from __future__ import annotations

from broker.client.batching import RECORD_OVERHEAD, size_batches
from broker.protocol.records import Record


def _size(records: list[Record]) -> int:
    return sum(len(r.key or b"") + len(r.value or b"") + RECORD_OVERHEAD for r in records)


def test_batches_keep_order_and_stay_under_the_limit() -> None:
    records = [Record(b"k%d" % i, b"x" * (i % 50)) for i in range(500)]
    batches = size_batches(records, 1000)
    assert [r for batch in batches for r in batch] == records
    assert len(batches) > 1
    assert all(_size(batch) <= 1000 for batch in batches)


def test_a_record_larger_than_the_limit_goes_alone() -> None:
    small, big = Record(None, b"a"), Record(None, b"b" * 5000)
    assert size_batches([small, big, small], 100) == [[small], [big], [small]]


def test_nothing_in_nothing_out() -> None:
    assert size_batches([], 100) == []
