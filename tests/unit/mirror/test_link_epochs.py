"""How a link-mode partition follows the source's leader epochs (KIP-1279's invariant): batches
go to the target in runs of one source epoch (the target's epoch is raised to it before the run
is copied), and the epoch it should at least be at is the copied batches', the source metadata's
only once nothing fetched waits (a lagging copy is never raised ahead of what it still copies)."""

from __future__ import annotations

from broker.client import TopicPartition
from broker.protocol.records import BatchHeader, Record, build_batch, read_batch_header
from mirror.link import LinkPartition, pieces_of_one_epoch
from mirror.partition import Chunk

TP = TopicPartition("orders", 0)


def header(base: int, epoch: int, size: int = 1) -> BatchHeader:
    return read_batch_header(build_batch([Record(b"k", b"v" * size)], base_offset=base, partition_leader_epoch=epoch))


def test_pieces_hold_one_source_epoch_each_and_a_size_at_most() -> None:
    spans = [(0, header(i, epoch)) for i, epoch in enumerate([0, 0, 2, 2, 2, 3, 0])]
    pieces = pieces_of_one_epoch(spans, 1 << 20)
    assert [[h.partition_leader_epoch for _, h in piece] for piece in pieces] == [[0, 0], [2, 2, 2], [3], [0]]
    big = [(0, header(i, 5, size=600)) for i in range(4)]
    assert [len(piece) for piece in pieces_of_one_epoch(big, big[0][1].size * 2)] == [2, 2]


def test_the_wanted_epoch_is_the_sources_only_once_the_copy_caught_up() -> None:
    pm = LinkPartition(TP, TP, 0, 1000, 1 << 20, written_through=-1)
    pm.source_leader_epoch = 4
    assert pm.wanted_epoch() == -1  # nothing fetched yet: not known to be caught up
    pm.high_watermark, pm.copied_epoch = 10, 2
    assert pm.wanted_epoch() == 2  # 10 records to copy, some perhaps of epochs below 4
    pm.written_through = 9
    data = build_batch([Record(b"k", b"v")], base_offset=10, partition_leader_epoch=4)
    pm.put(Chunk(memoryview(data), [(0, read_batch_header(data))]))
    assert pm.wanted_epoch() == 2  # fetched and queued: still waiting to be copied
    pm._done_with(pm._chunks[0])
    assert pm.wanted_epoch() == 4  # caught up: the source's epoch, as its metadata says
