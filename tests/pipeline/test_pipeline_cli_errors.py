"""Issue 19, item 16: `causeway pipeline ...` refuses bad input in one line, in seconds, before
Spark starts, leaves nothing behind, and keeps Spark's own output off the terminal.

Every case runs the real CLI in a process of its own. Whether Spark started is seen from outside:
the process's SPARK_CONF_DIR holds a spark-env.sh that leaves a marker file, and spark-submit
(which PySpark runs to start Spark's JVM) always reads it. Temporary files go to a TMPDIR of the
test's own, so a Spark output file left behind would be seen.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from deploy.cli.pipeline_common import on_spark
from deploy.launcher.state_file import ClusterRecord, LaunchStateFile, MirrorRecord, WanRecord
from pipeline.export import LOCK_FILE, export_topic
from pipeline.options import PipelineError
from tests.pipeline.cli import causeway_pipeline
from tests.pipeline.clients import create_topic, produce

pytestmark = pytest.mark.compat

@dataclass
class Run:
    code: int
    out: str
    err: str
    spark_started: bool
    left_in_tmp: list[str]


def pipeline_run(work: Path, *argv: str) -> Run:
    """`causeway pipeline ARGV`, watched for Spark starting and files left in its TMPDIR."""
    conf, tmp, marker = work / "spark-conf", work / "tmp", work / "spark-started"
    conf.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(exist_ok=True)
    marker.unlink(missing_ok=True)
    (conf / "spark-env.sh").write_text(f"touch {shlex.quote(str(marker))}\n")
    run = causeway_pipeline(*argv, env={"SPARK_CONF_DIR": str(conf), "TMPDIR": str(tmp)})
    return Run(run.returncode, run.stdout, run.stderr, marker.exists(),
               sorted(p.name for p in tmp.glob("causeway-spark-*")))


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def topic(pipeline_broker: BrokerProcess) -> str:
    name, bootstrap = "cli-errors", pipeline_broker.bootstrap
    create_topic(bootstrap, name, 2)
    produce(bootstrap, name, [{"partition": i % 2, "value": b"v%d" % i, "timestamp": 1_767_308_400_000 + i}
                              for i in range(20)])
    return name


def state_dir(work: Path, source: str, target: str) -> Path:
    """A launcher state file naming mirror east-west between `source` and `target`."""
    directory = work / "state"
    directory.mkdir(exist_ok=True)
    state = LaunchStateFile(name="cli-demo", wan=WanRecord(api="127.0.0.1:1"), clusters={
        "east": ClusterRecord(datacenter="dc-east", bootstrap=source, brokers=[]),
        "west": ClusterRecord(datacenter="dc-west", bootstrap=target, brokers=[])},
        mirrors={"east-west": MirrorRecord(source="east", target="west", status_file=str(work / "status.json"))})
    (directory / "state.json").write_text(state.to_json())
    return directory


# Each case: (argv from (work dir, bootstrap, topic, dead address), exit code, the one line on stderr).
Case = tuple[Callable[[Path, str, str, str], list[str]], int, Callable[[Path, str, str, str], str]]
CASES: dict[str, Case] = {
    "export to an unreachable cluster": (
        lambda w, b, t, dead: ["export", "--bootstrap", dead, "--topic", t, "--to", str(w / "new" / "out")], 1,
        lambda w, b, t, dead: f"Error: cluster {dead} is unreachable or did not answer in time: connect to {dead} "
                              f"failed: all attempts to connect to {dead} failed"),
    "export to an existing file": (
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", t, "--to", str(w / "a-file")], 1,
        lambda w, b, t, dead: f"Error: cannot export to {w / 'a-file'}: it exists and is not a directory"),
    "export below a file": (
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", t, "--to", str(w / "a-file" / "out")], 1,
        lambda w, b, t, dead: f"Error: cannot export to {w / 'a-file' / 'out'}: it cannot be made: "
                              f"{w / 'a-file'} is not a directory"),
    "export to an unwritable place": (  # /sys refuses new entries, to root too
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", t, "--to", "/sys/causeway-test/out"], 1,
        lambda w, b, t, dead: "Error: cannot export to /sys/causeway-test/out: it cannot be made in /sys: "
                              "Permission denied"),
    "export of a missing topic": (
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", "cli-nope", "--to", str(w / "new" / "out")], 1,
        lambda w, b, t, dead: "Error: topic 'cli-nope' does not exist"),
    "export with a bad option": (
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", t, "--to", str(w / "new" / "out"),
                               "--option", "failOnDataLoss=maybe"], 1,
        lambda w, b, t, dead: "Error: option failOnDataLoss must be true or false, got 'maybe'"),
    "export with a bad master": (
        lambda w, b, t, dead: ["export", "--bootstrap", b, "--topic", t, "--to", str(w / "new" / "out"),
                               "--master", "local[two]"], 2,
        lambda w, b, t, dead: "causeway pipeline export: --master 'local[two]' is not a Spark master URL: local, "
                              "local[N], local[*], spark://HOST:PORT, yarn, k8s://URL"),
    "export with a malformed bootstrap": (
        lambda w, b, t, dead: ["export", "--bootstrap", "127.0.0.1", "--topic", t, "--to", str(w / "new" / "out")],
        1, lambda w, b, t, dead: "Error: bootstrap '127.0.0.1': bootstrap address '127.0.0.1' must be HOST:PORT"),
    "copy with bad starting offsets": (
        lambda w, b, t, dead: ["copy", "--from", b, "--to", b, "--topic", t, "--target-topic", "cli-copy",
                               "--starting-offsets", "{\"cli-errors\": 3}"], 1,
        lambda w, b, t, dead: "Error: option startingOffsets: topic 'cli-errors' must map partitions to numbers, "
                              "got 3"),
    "copy to an unreachable cluster": (
        lambda w, b, t, dead: ["copy", "--from", b, "--to", dead, "--topic", t], 1,
        lambda w, b, t, dead: f"Error: cluster {dead} is unreachable or did not answer in time: connect to {dead} "
                              f"failed: all attempts to connect to {dead} failed"),
    "copy of a missing topic": (
        lambda w, b, t, dead: ["copy", "--from", b, "--to", b, "--topic", "cli-nope"], 1,
        lambda w, b, t, dead: f"Error: topic 'cli-nope' does not exist on the source cluster {b}"),
    "audit with a bad topic pattern": (
        lambda w, b, t, dead: ["audit", "--source-bootstrap", b, "--target-bootstrap", b, "--identity",
                               "--topics", "cli-(errors"], 1,
        lambda w, b, t, dead: "Error: --topics: bad regular expression 'cli-(errors': missing ), unterminated "
                              "subpattern at position 4"),
    "audit of an unreachable target": (
        lambda w, b, t, dead: ["audit", "--source-bootstrap", b, "--target-bootstrap", dead, "--identity"], 1,
        lambda w, b, t, dead: f"Error: cluster {dead} is unreachable or did not answer in time: connect to {dead} "
                              f"failed: all attempts to connect to {dead} failed"),
    "audit with its JSON report in a missing directory": (
        lambda w, b, t, dead: ["audit", "--source-bootstrap", b, "--target-bootstrap", b, "--identity",
                               "--json", str(w / "missing" / "audit.json")], 1,
        lambda w, b, t, dead: f"Error: cannot write the JSON report to {w / 'missing' / 'audit.json'}: "
                              f"{w / 'missing'} does not exist"),
    "audit with its Parquet history below a file": (
        lambda w, b, t, dead: ["audit", "--source-bootstrap", b, "--target-bootstrap", b, "--identity",
                               "--parquet", str(w / "a-file" / "history")], 1,
        lambda w, b, t, dead: f"Error: cannot write the Parquet history to {w / 'a-file' / 'history'}: it cannot "
                              f"be made: {w / 'a-file'} is not a directory"),
    "lag with its chart in an unwritable place": (
        lambda w, b, t, dead: ["lag", "cli-demo", "--mirror", "east-west", "--state-dir", str(state_dir(w, b, b)),
                               "--chart", "/sys/causeway-lag.svg"], 1,
        lambda w, b, t, dead: "Error: cannot write the chart to /sys/causeway-lag.svg: Permission denied"),
    "lag of a mirror whose target is unreachable": (
        lambda w, b, t, dead: ["lag", "cli-demo", "--mirror", "east-west", "--state-dir",
                               str(state_dir(w, b, dead))], 1,
        lambda w, b, t, dead: f"Error: cluster {dead} is unreachable or did not answer in time: connect to {dead} "
                              f"failed: all attempts to connect to {dead} failed"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_before_spark_starts_and_leaves_nothing(case: str, bootstrap: str, topic: str,
                                                                        tmp_path: Path) -> None:
    argv, code, line = CASES[case]
    (tmp_path / "a-file").write_text("kept as it was\n")
    dead = f"127.0.0.1:{refused_port()}"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    run = pipeline_run(tmp_path / "run", *argv(tmp_path, bootstrap, topic, dead))
    assert (run.code, run.err.splitlines()) == (code, [line(tmp_path, bootstrap, topic, dead)]), run.err
    assert "Traceback" not in run.err and run.out == ""
    assert not run.spark_started
    assert run.left_in_tmp == []
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "run"))
    assert after == sorted([*before, *([Path("state"), Path("state/state.json")] if "lag" in case else [])])
    assert (tmp_path / "a-file").read_text() == "kept as it was\n"


def test_spark_output_stays_off_the_terminal_unless_verbose(bootstrap: str, topic: str, tmp_path: Path) -> None:
    out = tmp_path / "export"
    run = pipeline_run(tmp_path / "run", "export", "--bootstrap", bootstrap, "--topic", topic, "--to", str(out))
    assert run.code == 0, run.err
    assert run.spark_started
    assert run.out.splitlines()[-1] == f"export {topic}: done: 20 records in 1 step(s); offsets now 0:10, 1:10"
    # Nothing but the job's own lines: no JVM warning, no "Setting default log level", no py4j INFO.
    assert run.err == "", run.err
    assert run.left_in_tmp == []
    # Asked for, Spark's own log shows (its INFO lines included).
    verbose = pipeline_run(tmp_path / "run", "export", "--bootstrap", bootstrap, "--topic", topic, "--to",
                                str(out), "--verbose")
    assert verbose.code == 0, verbose.err
    assert " INFO SparkContext: " in verbose.err, verbose.err
    assert verbose.out.splitlines()[-1] == f"export {topic}: done: 0 records in 0 step(s); offsets now 0:10, 1:10"


def test_lag_ends_cleanly(bootstrap: str, target_broker: BrokerProcess, tmp_path: Path) -> None:
    """The lag report, with its Spark job, ends with its report and its progress lines only."""
    now = int(time.time() * 1000)
    create_topic(bootstrap, "cli-lag", 1)
    create_topic(target_broker.bootstrap, "east.cli-lag", 1, {"message.timestamp.type": "LogAppendTime"})
    records: list[dict[str, object]] = [{"partition": 0, "value": b"v%d" % i, "timestamp": now - 60_000 + i}
                                        for i in range(50)]
    produce(bootstrap, "cli-lag", records)
    produce(target_broker.bootstrap, "east.cli-lag", records)
    states = state_dir(tmp_path, bootstrap, target_broker.bootstrap)
    run = pipeline_run(tmp_path / "run", "lag", "cli-demo", "--mirror", "east-west", "--state-dir", str(states),
                            "--topics", "cli-lag")
    assert run.code == 0, run.err
    assert run.spark_started
    assert run.out.startswith("replication latency of mirror east-west (mm2)")
    assert "records  cli-lag-0  east.cli-lag-0      50" in run.out
    assert all(line.startswith("lag of mirror east-west: ") for line in run.err.splitlines()), run.err
    assert run.left_in_tmp == []


def test_a_failed_export_removes_the_directories_it_made_and_only_those(spark: SparkSession, bootstrap: str,
                                                                        tmp_path: Path) -> None:
    """The export itself (not the command's checks) fails after making its output directory:
    what it made goes again, lock file included; a directory that was there stays."""
    made = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(PipelineError, match="topic 'cli-nope' does not exist"):
        export_topic(spark, bootstrap, "cli-nope", made)
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(PipelineError, match="topic 'cli-nope' does not exist"):
        export_topic(spark, bootstrap, "cli-nope", kept)
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert [p.name for p in kept.iterdir()] == [LOCK_FILE]  # the lock stays in a directory it did not make


def test_a_job_run_from_another_thread_leaves_the_running_session_running(spark: SparkSession) -> None:
    """A job finds the session this process runs even when asked from a thread that did not make
    it (Spark's active session is per thread): it is used, and left running for its owner."""
    counted: list[int] = []
    worker = threading.Thread(target=lambda: counted.append(on_spark("local[2]", lambda s: s.range(5).count())))
    worker.start()
    worker.join()
    assert counted == [5]
    assert spark.range(3).count() == 3  # still running: the job did not stop the shared session
