"""What the pipeline's jobs leave on disk: in an order that survives a power cut, and cleaned up
after a run that died, never under a run that is still going.

- export: a step's journal is written only after every file it names, and every directory
  entry leading to them, is flushed to disk; its offsets only after the moved files' directories
  are (a power cut cannot be tested honestly here: the order of the flushes is, with os.fsync
  watched, as a unit test of pipeline/export.py);
- export: a run killed after Spark wrote a step, before its journal, leaves staging only, which
  the next run discards (saying so) before exporting everything once;
- export: a second run into a directory an export is writing to (a real process holding its
  lock) is refused and leaves that run's staging alone; once that process is gone, the next run
  removes what it left, says so, and exports everything once;
- audit history and JSON report: temporary files of killed runs (process gone) are removed and
  named in one line; those of a live process, of this process, or of another host are left alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import pipeline.export as export
from broker import atomic_file
from pipeline.audit import HISTORY_TMP, AuditReport, remove_strays, write_json
from pipeline.leftovers import HOST
from pipeline.options import PipelineError
from tests.pipeline.clients import consume_all, create_topic, produce
from tests.pipeline.test_pipeline_killed import killed_at

pytestmark = pytest.mark.compat

BASE_TS = 1_767_308_400_000  # 2026-01-01 23:00 UTC


def _parquet(path: Path, rows: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"offset": list(range(rows))}), path)


def test_a_steps_journal_comes_after_its_files_are_on_disk_and_its_offsets_after_the_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    run = "20260101T230000-1-abcdef01"
    run_dir = out / export.STAGING / run
    data = run_dir / "data"
    # As Spark leaves a step: part files in date/hour directories, checksums, a _SUCCESS marker.
    _parquet(data / "date=2026-01-01/hour=23/part-00000-x.c000.snappy.parquet", 3)
    _parquet(data / "date=2026-01-02/hour=00/part-00001-x.c000.snappy.parquet", 2)
    _parquet(data / "date=2026-01-02/hour=00/part-00002-x.c000.snappy.parquet", 1)
    (data / "date=2026-01-01/hour=23/.part-00000-x.c000.snappy.parquet.crc").write_bytes(b"crc")
    (data / "_SUCCESS").write_bytes(b"")

    events: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def write_atomically(path: Path, content: str | bytes) -> None:
        events.append(("write", str(path.resolve())))
        atomic_file.write_atomically(path, content)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr("pipeline.export.write_atomically", write_atomically)

    journal, rows = export.seal_step(out, run_dir, run, {"0": 4, "1": 2})
    export.apply_step(out, run_dir, journal, "t")

    def at(kind: str, path: Path) -> int:
        return events.index((kind, str(path.resolve())))

    def flushed_before(path: Path, index: int, after: int = -1) -> bool:
        return any(e == ("fsync", str(path.resolve())) and after < i < index for i, e in enumerate(events))

    files = journal["files"]
    assert isinstance(files, list) and rows == 6
    assert sorted(files) == [f"date=2026-01-01/hour=23/{run}-part-00000-x.c000.snappy.parquet",
                             f"date=2026-01-02/hour=00/{run}-part-00001-x.c000.snappy.parquet",
                             f"date=2026-01-02/hour=00/{run}-part-00002-x.c000.snappy.parquet"]
    journalled = at("write", run_dir / export.JOURNAL)
    for rel in files:
        staged = data / rel
        # The file's data, and each directory entry from it up to DIR, flushed before the journal.
        assert flushed_before(staged, journalled), (rel, events)
        for directory in [staged.parent, staged.parent.parent, data, run_dir, run_dir.parent, out]:
            assert flushed_before(directory, journalled), (directory, events)
    committed = at("write", out / export.OFFSETS_FILE)
    for rel in files:
        placed = out / rel
        assert placed.exists()
        for directory in [placed.parent, placed.parent.parent, out]:  # the moves, after the journal
            assert flushed_before(directory, committed, after=journalled), (directory, events)


@pytest.fixture
def lock_holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A process of its own holding an export directory's lock (as a running export does) until
    its stdin is closed."""
    out = tmp_path / "out"
    out.mkdir()
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d' % os.getpid()); print('locked', flush=True); "
            "sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out / export.LOCK_FILE)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        yield proc, out
    finally:
        proc.kill()
        proc.wait()


def test_an_export_is_refused_while_another_writes_the_directory_then_cleans_what_it_left(
        spark: SparkSession, bootstrap: str, lock_holder: tuple[subprocess.Popen[str], Path]) -> None:
    holder, out = lock_holder
    topic = "durability-export"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"partition": i % 2, "value": b"v%d" % i, "timestamp": BASE_TS + i} for i in range(30)])
    # The running export's step in progress: Spark's files, no journal yet.
    live = out / export.STAGING / f"20260101T230000-{holder.pid}-0123abcd"
    _parquet(live / "data/date=2026-01-01/hour=23/part-00000-x.c000.snappy.parquet", 5)
    (out / (export.OFFSETS_FILE + ".tmp")).write_text("{")

    said: list[str] = []
    with pytest.raises(PipelineError, match=rf"another export is writing to {out} \(process {holder.pid}, "):
        export.export_topic(spark, bootstrap, topic, out, say=said.append)
    assert said == []
    assert sorted(p.name for p in live.rglob("*.parquet")) == ["part-00000-x.c000.snappy.parquet"]
    assert (out / (export.OFFSETS_FILE + ".tmp")).exists()

    assert holder.stdin is not None
    holder.stdin.close()  # that export ends (as a killed one would: the kernel drops its lock)
    assert holder.wait(timeout=30) == 0
    result = export.export_topic(spark, bootstrap, topic, out, say=said.append)
    assert [line for line in said if "removing" in line or "discarding" in line] == [
        f"export {topic}: removing {out / (export.OFFSETS_FILE + '.tmp')}, an offsets file a run that is gone "
        "did not finish writing",
        f"export {topic}: discarding an unfinished step a run that is gone left in {live} (1 files, no journal: "
        "its records are exported again)",
    ], said
    assert (result.planned, result.exported) == (30, 30)
    assert list((out / export.STAGING).iterdir()) == []
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().select(["partition", "offset"])
    assert sorted((r["partition"], r["offset"]) for r in rows.to_pylist()) == [
        (r.partition, r.offset) for r in consume_all(bootstrap, topic, [0, 1])]


def test_an_audit_history_loses_only_the_files_of_runs_that_are_gone(tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free now
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        names = {
            "dead": f"_audit-1-aa.parquet.{HOST}.{dead.pid}.tmp",
            "dead, named before hosts were": f"_audit-2-bb.parquet.{dead.pid}.tmp",
            "live": f"_audit-3-cc.parquet.{HOST}.{live.pid}.tmp",
            "this process": f"_audit-4-dd.parquet.{HOST}.{os.getpid()}.tmp",
            "another host": f"_audit-5-ee.parquet.elsewhere-{HOST}.{dead.pid}.tmp",
            "a pid the live process reuses": f"_audit-6-ff.parquet.{HOST}.{live.pid}.tmp",
            "a run": "audit-7-11.parquet",
            "not the audit's": f"_other.{dead.pid}.tmp",
        }
        for name in names.values():
            (history / name).write_bytes(b"x")
        # Written an hour before the live process started: not by it, whatever its pid.
        stale = os.stat(history / names["live"]).st_mtime - 3600
        os.utime(history / names["a pid the live process reuses"], (stale, stale))
        said: list[str] = []
        remove_strays(history, HISTORY_TMP, f"audit history {history}", said.append)
        gone = ["dead", "dead, named before hosts were", "a pid the live process reuses"]
        assert sorted(p.name for p in history.iterdir()) == sorted(n for k, n in names.items() if k not in gone)
        assert said == [f"audit history {history}: removed 3 unfinished file(s) that killed runs left: "
                        + ", ".join(sorted(names[k] for k in gone))], said
    finally:
        live.kill()
        live.wait()


def test_an_audit_json_report_replaces_what_a_killed_run_left_beside_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "report.json"
    stray = tmp_path / f".report.json.{HOST}.{dead.pid}.tmp"
    other = tmp_path / f".other.json.{HOST}.{dead.pid}.tmp"  # another report's: not this one's to judge
    stray.write_text("{")
    other.write_text("{")
    write_json(AuditReport("m", "mm2", "a:1", "b:2", 0, []), path)
    assert json.loads(path.read_text())["mirror"] == "m"
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, path.name]
    assert capsys.readouterr().err == (f"audit JSON {path}: removed 1 unfinished file(s) that killed runs left: "
                                       f"{stray.name}\n")


def test_an_export_killed_before_journalling_a_step_leaves_staging_the_next_run_discards(
        spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    topic = "durability-killed-export"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"partition": i % 2, "value": b"v%d" % i, "timestamp": BASE_TS + i * 60_000}
                               for i in range(40)])
    out = tmp_path / "out"
    run = killed_at("pipeline-export-step-written", "export", "--bootstrap", bootstrap, "--topic", topic,
                    "--to", str(out), "--step-records", "10")
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    # Spark's files of step 1 in staging, no journal: nothing a reader sees, nothing committed.
    (left,) = (out / export.STAGING).iterdir()
    staged = list(left.rglob("*.parquet"))
    assert staged and not (left / export.JOURNAL).exists()
    assert not (out / export.OFFSETS_FILE).exists() and not list(out.glob("date=*"))

    said: list[str] = []
    result = export.export_topic(spark, bootstrap, topic, out, say=said.append)
    assert f"export {topic}: discarding an unfinished step a run that is gone left in {left} " in "\n".join(said)
    assert (result.planned, result.exported) == (40, 40)  # the dead run's step read again, once
    assert list((out / export.STAGING).iterdir()) == []
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().select(["partition", "offset"])
    assert sorted((r["partition"], r["offset"]) for r in rows.to_pylist()) == [
        (r.partition, r.offset) for r in consume_all(bootstrap, topic, [0, 1])]
