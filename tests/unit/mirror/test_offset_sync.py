"""MM2's offset-sync emission rule (per batch here) and translation that never skips a record."""

from __future__ import annotations

import random

import pytest

from mirror.offset_sync import SyncEmitter, SyncStore


def test_first_batch_is_synced_then_every_offset_lag_max() -> None:
    emitter = SyncEmitter(max_offset_lag=100)
    syncs = []
    for i in range(30):  # batches of 10 records, contiguous on both sides
        sync = emitter.on_batch(10 * i, 10 * i, 9)
        if sync:
            syncs.append(sync)
    # MM2: a sync once the translation would be offset.lag.max or more behind (it adds one).
    assert syncs == [(0, 0), (110, 110), (220, 220)]


def test_upstream_gap_and_downstream_discontinuity_are_synced() -> None:
    emitter = SyncEmitter(max_offset_lag=1000)
    assert emitter.on_batch(0, 0, 9) == (0, 0)
    assert emitter.on_batch(10, 10, 9) is None
    assert emitter.on_batch(25, 20, 4) == (25, 20)  # upstream skipped 20..24 (compaction, markers)
    assert emitter.on_batch(30, 40, 4) == (30, 40)  # someone else wrote downstream
    assert emitter.on_batch(35, 10, 4) == (35, 10)  # downstream went back


def test_idle_syncs_the_last_record_once() -> None:
    emitter = SyncEmitter(max_offset_lag=1000)
    assert emitter.on_idle() is None  # nothing written yet
    emitter.on_batch(0, 0, 9)
    emitter.on_batch(10, 10, 9)
    assert emitter.on_idle() == (19, 19)
    assert emitter.on_idle() is None


def test_translation_takes_the_newest_sync_at_or_below() -> None:
    store = SyncStore()
    store.add("t", 0, 100, 50)
    store.add("t", 0, 200, 160)
    assert store.translate("t", 0, 99) is None
    assert store.translate("t", 0, 100) == 50
    assert store.translate("t", 0, 150) == 51
    assert store.translate("t", 0, 200) == 160
    assert store.translate("t", 0, 10_000) == 161
    assert store.translate("t", 1, 100) is None


def test_an_upstream_rewind_forgets_later_syncs() -> None:
    store = SyncStore()
    store.add("t", 0, 100, 100)
    store.add("t", 0, 200, 200)
    store.add("t", 0, 0, 300)  # topic re-created upstream, mirrored again
    assert store.translate("t", 0, 150) == 301
    assert store.count("t", 0) == 1


@pytest.mark.parametrize("seed", range(5))
def test_translation_never_skips_a_record(seed: int) -> None:
    """Mirror a random upstream (gaps) to a random downstream (foreign writes), emitting syncs by
    the rule; every group offset must translate at or before the record it points at."""
    rng = random.Random(seed)
    emitter, store = SyncEmitter(max_offset_lag=rng.choice([1, 10, 100])), SyncStore(capacity=16)
    truth: dict[int, int] = {}
    upstream, downstream = 0, 0
    for _ in range(500):
        upstream += rng.choice([0, 0, 0, 1, 5])
        downstream += rng.choice([0, 0, 0, 0, 3])
        last_delta = rng.randint(0, 20)
        sync = emitter.on_batch(upstream, downstream, last_delta)
        if sync:
            store.add("t", 0, *sync)
        for k in range(last_delta + 1):
            truth[upstream + k] = downstream + k
        upstream += last_delta + 1
        downstream += last_delta + 1
    for offset, true_downstream in truth.items():
        translated = store.translate("t", 0, offset)
        if translated is not None:
            assert translated <= true_downstream, (offset, translated, true_downstream)
    assert store.count("t", 0) <= 16
    assert store.translate("t", 0, upstream - 1) is not None
