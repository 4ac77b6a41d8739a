"""`causeway pipeline export`: a topic to Parquet by date/hour; reruns continue, a killed run
leaves nothing that a rerun would duplicate or lose."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import pipeline.export as export
from broker.progress import bytes_text
from deploy.cli import main
from pipeline.export import OFFSETS_FILE, export_topic
from tests.pipeline.brokers import delete_before
from tests.pipeline.clients import consume_all, create_topic, produce

pytestmark = pytest.mark.compat

# 2026-01-01 23:00 UTC: the records span two dates and three hours.
BASE_MS = 1_767_308_400_000


def exported(out: Path) -> list[tuple[int, int, bytes]]:
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    rows = table.select(["partition", "offset", "value"]).to_pylist()
    return sorted((r["partition"], r["offset"], r["value"]) for r in rows)


def records(start: int, n: int) -> list[dict[str, object]]:
    return [{"partition": i % 2, "value": b"v%d" % i, "key": b"k%d" % i, "timestamp": BASE_MS + i * 45_000}
            for i in range(start, start + n)]


def test_export_then_rerun_continues_without_duplicates(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    topic = "export-a"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records(0, 240))
    out = tmp_path / "out"
    lines: list[str] = []
    first = export_topic(spark, bootstrap, topic, out, step_records=60, say=lines.append)
    assert (first.planned, first.exported, first.steps) == (240, 240, 2)
    # Each step's line: done of planned, then the rate since the start and the ETA at it.
    assert any(line.startswith("export export-a step 1: 120 of 240 offsets done (120 records, ")
               and " of Parquet written); " in line and " offsets/s, ETA " in line for line in lines), lines
    # The bytes beside the records: the Parquet files the steps wrote, as they lie in the output.
    parquet = bytes_text(sum(p.stat().st_size for p in out.rglob("*.parquet")))
    assert any(line.startswith(f"export export-a step 2: 240 of 240 offsets done (240 records, {parquet} of "
                               "Parquet written); ") and line.endswith(" offsets/s, ETA 0 s") for line in lines), lines
    assert json.loads((out / OFFSETS_FILE).read_text()) == {"topic": topic, "offsets": {"0": 120, "1": 120}}
    hours = sorted(str(p.relative_to(out)) for p in out.glob("date=*/hour=*"))
    assert hours == ["date=2026-01-01/hour=23", "date=2026-01-02/hour=00", "date=2026-01-02/hour=01"]
    expected = [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    assert exported(out) == expected

    produce(bootstrap, topic, records(240, 60))
    again = export_topic(spark, bootstrap, topic, out, step_records=1000, say=lines.append)
    assert (again.planned, again.exported) == (60, 60)
    assert exported(out) == [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    nothing = export_topic(spark, bootstrap, topic, out, say=lines.append)
    assert (nothing.planned, nothing.exported) == (0, 0)
    assert len(exported(out)) == 300


def test_a_run_killed_midway_is_finished_or_discarded_by_the_next(spark: SparkSession, bootstrap: str,
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "export-killed"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records(0, 100))
    out = tmp_path / "out"
    write_json = export.write_json_atomically

    class Killed(Exception):
        pass

    def killed_before_the_offsets(path: Path, data: object) -> None:
        if path.name == OFFSETS_FILE:  # the step's files are in place, its offsets not yet
            raise Killed
        write_json(path, data)

    monkeypatch.setattr(export, "write_json_atomically", killed_before_the_offsets)
    with pytest.raises(Killed):
        export_topic(spark, bootstrap, topic, out, step_records=1000, say=lambda _: None)
    monkeypatch.setattr(export, "write_json_atomically", write_json)
    assert not (out / OFFSETS_FILE).exists()
    # A second killed run, this time before its journal: its staging is all it left.
    stale = out / "_staging" / "20260101T000000-deadbeef" / "data" / "date=2026-01-01" / "hour=23"
    stale.mkdir(parents=True)
    (stale / "part-00000.parquet").write_bytes(b"PAR1 torn")

    lines: list[str] = []
    result = export_topic(spark, bootstrap, topic, out, step_records=1000, say=lines.append)
    assert result.planned == 0  # the journalled step was completed, not read again
    assert any("completing a step an earlier run journalled" in line for line in lines)
    assert any("discarding an unfinished step" in line for line in lines)
    assert not (out / "_staging").exists() or not any((out / "_staging").iterdir())
    assert exported(out) == [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    assert json.loads((out / OFFSETS_FILE).read_text())["offsets"] == {"0": 50, "1": 50}


def test_the_command_exports_and_reports_progress(spark: SparkSession, bootstrap: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # In this process, on the test session's SparkSession (the command leaves a session it did
    # not start running): a second JVM would cost more than the rest of the file.
    topic = "export-cli"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records(0, 40))
    out = tmp_path / "out"
    argv = ["pipeline", "export", "--bootstrap", bootstrap, "--topic", topic, "--to", str(out), "--step-records", "10"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("export export-cli: 40 offsets to export in 2 partitions")
    assert any(line.startswith("export export-cli step 2: 40 of 40 offsets done (40 records, ")
               and line.endswith(" offsets/s, ETA 0 s") for line in lines), lines
    assert lines[-1] == "export export-cli: done: 40 records in 2 step(s); offsets now 0:20, 1:20"
    # --quiet: the result line only, the same export done.
    produce(bootstrap, topic, records(40, 20))
    assert main([*argv, "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.out.splitlines() == ["export export-cli: done: 20 records in 1 step(s); offsets now 0:30, 1:30"]
    assert quiet.err == ""
    assert exported(out) == [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    assert not spark.sparkContext._jsc.sc().isStopped()
    # Another topic into the same directory would mix two exports' offsets: refused.
    assert main(argv + ["--topic", "export-other"]) == 1
    assert capsys.readouterr().err.strip() == f"Error: {out} holds an export of topic 'export-cli', not 'export-other'"
    assert main(["pipeline", "export", "--bootstrap", bootstrap, "--topic", "export-missing",
                 "--to", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.strip() == "Error: topic 'export-missing' does not exist"


def test_offsets_the_log_no_longer_holds_fail_or_are_reported_and_skipped(
        spark: SparkSession, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Retention (here DeleteRecords) took records the last run had not reached: failOnDataLoss
    as Spark's Kafka source has it. By default the export stops naming the partition and the
    offsets; with failOnDataLoss=false it says what it skips and goes on from the log start."""
    topic = "export-loss"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records(0, 60))
    out = tmp_path / "out"
    assert export_topic(spark, bootstrap, topic, out, say=lambda _: None).offsets == {0: 30, 1: 30}
    first = exported(out)
    produce(bootstrap, topic, records(60, 40))
    delete_before(bootstrap, topic, 0, 40)
    argv = ["pipeline", "export", "--bootstrap", bootstrap, "--topic", topic, "--to", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: {topic}-0: starting offset 30 is before the log start offset 40 "
                          "(the log holds [40, 50))"), err
    assert 'set the option "failOnDataLoss" to "false"' in err
    assert json.loads((out / OFFSETS_FILE).read_text())["offsets"] == {"0": 30, "1": 30}  # nothing moved

    assert main([*argv, "--option", "failOnDataLoss=false"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"export {topic}: data loss: {topic}-0: starting offset 30 is before the log start offset 40 "
                        "(the log holds [40, 50))")
    assert lines[-1] == f"export {topic}: done: 30 records in 1 step(s); offsets now 0:50, 1:50"
    now = [(r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1]) if r.offset >= 30]
    assert [o for p, o, _ in now if p == 0] == list(range(40, 50))
    assert exported(out) == sorted(first + now)
