"""Export a topic to Parquet, partitioned by date and hour (UTC) of the records' timestamps,
continuing where the last run stopped.

Layout of the output directory:

    DIR/date=2026-11-23/hour=18/<run>-part-....parquet   the data (Spark's file names, run-prefixed)
    DIR/_causeway_export.json                            offsets reached, per partition: the commit
    DIR/_staging/<run>/                                  a run in progress (readers skip "_" dirs)
    DIR/_causeway_export.lock                            held (flock) by the run writing DIR

A run plans each partition's range from the committed offsets (the log start for a partition it
has never seen) to the log end, then works through it in steps of at most `step_records` offsets
per partition. Each step is one Spark job writing into `_staging/<run>/`; then a journal (the
files to move and the offsets reached) is written atomically, the files are renamed into place,
and the offsets file is replaced last. A run killed at any point leaves either a staging dir
without a journal (thrown away by the next run: its records are read again) or a journal (rolled
forward by the next run: renames are idempotent), so the data directory never holds a step's
files without its offsets, nor the offsets without its files: no duplicates, no holes.

That order holds across a power cut too, not only a kill: the step's files and every directory
entry leading to them are flushed to disk (fsync, file by file, nothing read back) before the
journal that names them is written, the moved files' directories before the offsets that count
them, and a finished step's staging is gone for good before the next step's offsets.

One run writes to DIR at a time (an exclusive flock on `_causeway_export.lock`, which the
kernel drops when the process dies): a second export to DIR is refused while one is running,
so what the next run finds in `_staging` was left by a run that is gone, and it is completed or
removed, saying so.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker.atomic_file import fsync_path, write_atomically
from broker.faults import crash_point
from broker.progress import bytes_text, rate_and_eta
from pipeline.options import PipelineError, parse_read_options
from pipeline.paths import check_writable
from pipeline.planning import OffsetRange, check_cluster, plan_read
from pipeline.progress import stage_progress
from pipeline.source import FORMAT

__all__ = ["ExportResult", "OFFSETS_FILE", "check_export", "export_topic"]

OFFSETS_FILE = "_causeway_export.json"
STAGING = "_staging"
JOURNAL = "_journal.json"
LOCK_FILE = "_causeway_export.lock"
DEFAULT_STEP_RECORDS = 1_000_000
_CANNOT_EXPORT = "cannot export to"


@dataclass(frozen=True, slots=True)
class ExportResult:
    planned: int  # offsets between the committed position and the log end when the run started
    exported: int  # records written (offsets minus compacted gaps and control records)
    steps: int
    offsets: dict[int, int]  # the next offset per partition, as committed


def write_json_atomically(path: Path, data: object) -> None:
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True))


def read_offsets(out_dir: Path, topic: str) -> dict[int, int]:
    """The committed next offset per partition ({} before the first run)."""
    path = out_dir / OFFSETS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        found = data.get("topic")
        offsets = {int(p): int(o) for p, o in data["offsets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PipelineError(f"{path} is not an offsets file an export wrote ({exc!r})") from None
    if found != topic:
        raise PipelineError(f"{out_dir} holds an export of topic {found!r}, not {topic!r}")
    return offsets


def check_export(bootstrap: str, topic: str, out_dir: str | Path, *, min_partitions: int | None = None,
                 options: Mapping[str, str] | None = None) -> None:
    """What an export checks before Spark starts: its read options, its output directory, the
    cluster and the topic (within seconds). Raises PipelineError as `export_topic` does."""
    read = {"kafka.bootstrap.servers": bootstrap, **(options or {}), "subscribe": topic}
    if min_partitions is not None:
        read["minPartitions"] = str(min_partitions)
    checked = parse_read_options(read)
    out = Path(out_dir)
    check_writable(out, _CANNOT_EXPORT, directory=True)
    if out.is_dir():
        read_offsets(out, topic)  # another topic's export there is refused
    check_cluster(bootstrap, [topic], security=checked.security)


def _make_dirs(out: Path) -> list[Path]:
    """Make `out` and its missing parents; the directories made, deepest first."""
    made = []
    probe = out
    while not probe.exists() and probe.parent != probe:
        made.append(probe)
        probe = probe.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipelineError(f"{_CANNOT_EXPORT} {out}: {exc.strerror or exc}") from None
    return made


@contextmanager
def _exclusive(out: Path, made: list[Path]) -> Iterator[None]:
    """Hold DIR's export lock for the run, or refuse: another export is writing to DIR now.

    When the run fails before it journalled a step in a DIR it made (`made`, deepest first),
    DIR and those parents are removed again, lock file included (under the lock: an export
    that opened it meanwhile is refused, and one that comes after makes a new one). A
    journalled step stays, for the next run to complete."""
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    removed: list[Path] = []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise PipelineError(f"another export is writing to {out} (process {holder}, holding "
                                f"{out / LOCK_FILE}); run one export per directory at a time") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield  # the lock file stays: removing it would let two runs lock different files
        except BaseException:
            if made and _nothing_to_keep(out):
                shutil.rmtree(out, ignore_errors=True)  # this run's lock and unjournalled staging only
                removed = made
            raise
    finally:
        os.close(fd)  # drops the lock
        for directory in removed[1:]:
            try:
                directory.rmdir()  # only if empty: another run may have started in it since
            except OSError:
                break


def _nothing_to_keep(out: Path) -> bool:
    """Whether `out` holds only the lock and staging without a journal (a failed step's files)."""
    return (all(p.name in (LOCK_FILE, STAGING) for p in out.iterdir())
            and not any((out / STAGING).glob(f"*/{JOURNAL}")))


def _fsync_tree(paths: list[Path], top: Path) -> None:
    """Flush each of `paths` (files or directories, under `top`) and every directory from theirs
    up to `top`, each once, deepest first (a file's entry before its directory's)."""
    dirs: set[Path] = set()
    for path in dict.fromkeys(paths):
        fsync_path(path)
        parent = path.parent
        while parent not in dirs and parent.is_relative_to(top):
            dirs.add(parent)
            parent = parent.parent
    for directory in sorted(dirs - set(paths), key=lambda d: len(d.parts), reverse=True):
        fsync_path(directory)


def _remove_dir(path: Path) -> None:
    """`path` removed for good: its parent's entry flushed, so a power cut cannot bring it back."""
    shutil.rmtree(path)
    fsync_path(path.parent)


def _roll_forward(out_dir: Path, topic: str, say: Callable[[str], None]) -> None:
    """Finish what a killed run left (with DIR's lock held, so that run is gone): apply a
    journalled step, remove unjournalled staging and a half-written offsets file, saying so."""
    stray = out_dir / (OFFSETS_FILE + ".tmp")
    if stray.exists():
        say(f"export {topic}: removing {stray}, an offsets file a run that is gone did not finish writing")
        stray.unlink()
    staging = out_dir / STAGING
    if not staging.exists():
        return
    for run_dir in sorted(p for p in staging.iterdir() if p.is_dir()):
        journal = run_dir / JOURNAL
        if journal.exists():
            step = json.loads(journal.read_text())
            say(f"export {topic}: completing a step an earlier run journalled ({len(step['files'])} files)")
            apply_step(out_dir, run_dir, step, topic)
        else:
            files = sum(1 for p in run_dir.rglob("*") if p.is_file())
            say(f"export {topic}: discarding an unfinished step a run that is gone left in {run_dir} "
                f"({files} files, no journal: its records are exported again)")
        _remove_dir(run_dir)


def seal_step(out_dir: Path, run_dir: Path, run: str, offsets: dict[str, int]) -> tuple[dict[str, object], int]:
    """Journal the step Spark wrote into `run_dir/data`, once its files are on disk.

    The files get run-prefixed names (so steps never overwrite each other's files); then each
    file and each directory entry leading to it, up to DIR, is flushed to disk, and only then
    is the journal that names them written (atomically): after a power cut, a journal never
    names a file that is not whole."""
    data_dir = run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)  # Spark makes it; a step of no records still journals
    renamed = []
    for path in sorted(p.relative_to(data_dir) for p in data_dir.rglob("*.parquet")):
        target = path.with_name(f"{run}-{path.name}")
        (data_dir / path).rename(data_dir / target)
        renamed.append(target)
    _fsync_tree([data_dir / rel for rel in renamed] or [data_dir], out_dir)
    rows = sum(pq.read_metadata(data_dir / rel).num_rows for rel in renamed)  # the footers only
    step: dict[str, object] = {"files": [str(rel) for rel in renamed], "offsets": offsets, "records": rows}
    write_json_atomically(run_dir / JOURNAL, step)
    return step, rows


def _step_bytes(run_dir: Path, step: dict[str, object]) -> int:
    """The size of the Parquet files a sealed step wrote (its journal names them)."""
    files = step["files"]
    assert isinstance(files, list)
    return sum((run_dir / "data" / rel).stat().st_size for rel in files)


def apply_step(out_dir: Path, run_dir: Path, step: dict[str, object], topic: str) -> None:
    files = step["files"]
    assert isinstance(files, list)
    placed = []
    for rel in files:
        src, dst = run_dir / "data" / rel, out_dir / rel
        if src.exists():  # else: moved before the kill
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        placed.append(dst)
    # The moves (and directories made for them) on disk before the offsets that count them.
    _fsync_tree([p.parent for p in placed] or [out_dir], out_dir)
    crash_point("pipeline-export-files-moved")  # the step's files in place, its offsets not yet
    write_json_atomically(out_dir / OFFSETS_FILE, {"topic": topic, "offsets": step["offsets"]})


def export_topic(spark: SparkSession, bootstrap: str, topic: str, out_dir: str | Path, *,
                 step_records: int = DEFAULT_STEP_RECORDS, min_partitions: int | None = None,
                 say: Callable[[str], None] = print, options: dict[str, str] | None = None) -> ExportResult:
    """Export `topic` from its committed offsets to the log end into `out_dir` (see the module).

    Raises PipelineError for a missing topic, an unreachable cluster, data no longer in the
    log (the committed offset below the log start: failOnDataLoss, set false to skip it), or an
    `out_dir` it cannot write to. A run that fails before its first commit into a directory it
    made removes that directory again.
    """
    out = Path(out_dir)
    check_writable(out, _CANNOT_EXPORT, directory=True)
    with _exclusive(out, _make_dirs(out)):
        return _export(spark, bootstrap, topic, out, step_records, min_partitions, say, options)


def _export(spark: SparkSession, bootstrap: str, topic: str, out: Path, step_records: int,
            min_partitions: int | None, say: Callable[[str], None], options: dict[str, str] | None) -> ExportResult:
    _roll_forward(out, topic, say)
    committed = read_offsets(out, topic)
    base = {"kafka.bootstrap.servers": bootstrap, **(options or {})}
    probe = parse_read_options({**base, "subscribe": topic})
    # Where to start: the committed offsets, or the log start for partitions never exported.
    whole = plan_read(probe)
    starting = {r.partition: committed.get(r.partition, -2) for r in whole.ranges}
    opts = parse_read_options({**base, "subscribe": topic,
                               "startingOffsets": json.dumps({topic: {str(p): o for p, o in starting.items()}})})
    plan = plan_read(opts)
    for message in plan.data_loss:
        say(f"export {topic}: data loss: {message}")
    position = {r.partition: r.start for r in plan.ranges}
    ends = {r.partition: r.end for r in plan.ranges}
    planned = plan.records
    say(f"export {topic}: {planned} offsets to export in {len(plan.ranges)} partitions "
        f"(from {json.dumps(position, sort_keys=True)} to {json.dumps(ends, sort_keys=True)})")
    if planned == 0:
        offsets = {str(p): o for p, o in position.items()}
        write_json_atomically(out / OFFSETS_FILE, {"topic": topic, "offsets": offsets})
        return ExportResult(0, 0, 0, dict(position))
    zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # date and hour directories are UTC
    try:
        return _run_steps(spark, out, topic, base, position, ends, planned, step_records, min_partitions, say)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


def _run_steps(spark: SparkSession, out: Path, topic: str, base: dict[str, str], position: dict[int, int],
               ends: dict[int, int], planned: int, step_records: int, min_partitions: int | None,
               say: Callable[[str], None]) -> ExportResult:
    done_offsets = 0
    exported = written_bytes = 0
    steps = 0
    started = time.monotonic()  # the steps' rate and ETA
    while any(position[p] < ends[p] for p in position):
        step = {p: OffsetRange(topic, p, position[p], min(ends[p], position[p] + step_records)) for p in position}
        run = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        run_dir = out / STAGING / run
        label = f"export {topic} step {steps + 1}"
        read = {**base, "subscribe": topic,
                "startingOffsets": json.dumps({topic: {str(p): r.start for p, r in step.items()}}),
                "endingOffsets": json.dumps({topic: {str(p): r.end for p, r in step.items()}})}
        if min_partitions is not None:
            read["minPartitions"] = str(min_partitions)
        df = spark.read.format(FORMAT).options(**read).load()
        df = df.withColumn("date", F.date_format("timestamp", "yyyy-MM-dd")).withColumn(
            "hour", F.date_format("timestamp", "HH"))
        with stage_progress(spark, say, label):
            df.write.partitionBy("date", "hour").parquet(str(run_dir / "data"))
        crash_point("pipeline-export-step-written")  # Spark's files in staging, no journal yet
        journal, rows = seal_step(out, run_dir, run, {str(p): r.end for p, r in step.items()})
        written_bytes += _step_bytes(run_dir, journal)  # before apply_step moves the files out
        apply_step(out, run_dir, journal, topic)
        _remove_dir(run_dir)  # before the next step's offsets: a power cut never replays this one
        steps += 1
        exported += rows
        done_offsets += sum(r.size for r in step.values())
        for p, r in step.items():
            position[p] = r.end
        say(f"{label}: {done_offsets} of {planned} offsets done ({exported} records, "
            f"{bytes_text(written_bytes)} of Parquet written); "
            f"{rate_and_eta(done_offsets, planned, time.monotonic() - started, 'offsets')}")
    return ExportResult(planned, exported, steps, dict(position))
