"""LogManager keeps the logs of each dir counted as they come and go (issue 19 item 12: ``place``
counted every existing log for each new partition, quadratic over N creations). The count must
follow every way a log arrives (found at start, created, adopted) and leaves (detached, deleted),
or placement drifts from "the dir holding the fewest"."""

from __future__ import annotations

from pathlib import Path

from broker.storage import Log, LogConfig, LogManager

NOW = 1_700_000_000_000


def test_placement_follows_logs_found_created_adopted_detached_and_deleted(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "old-0").mkdir(parents=True)
    (a / "old-1").mkdir()
    manager = LogManager([a, b], LogConfig())
    manager.load_all(NOW)
    assert manager.place(3) == [b, b, a]  # a holds the two found at start
    manager.get_or_create("new", 0, LogConfig())  # to b
    manager.get_or_create("new", 1, LogConfig())  # to b: 2 and 2
    assert manager.place(1) == [a]
    root = manager.place(1)[0]
    opened = Log.open(root / "adopted-0", LogConfig(), recovery_point=0)
    assert manager.adopt("adopted", 0, root, opened) is opened  # a: 3, b: 2
    assert manager.adopt("adopted", 0, b, opened) is opened  # already there: counted once
    assert manager.place(1) == [b]
    detached = manager.detach("old", 0)
    assert detached is not None
    detached.close()
    manager.delete("old", 1)  # a: 1, b: 2
    assert manager.place(2) == [a, a]
    assert manager.detach("never", 0) is None  # unknown: nothing uncounted
    assert manager.place(4) == [a, a, b, a]
    manager.close()
