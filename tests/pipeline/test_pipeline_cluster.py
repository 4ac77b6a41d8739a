"""`--master spark://...`: a job on a real Spark standalone cluster (a master and a worker, each a
JVM of its own, started from the pyspark package's `spark-class`), so the executors are other
processes than the driver: `causeway pipeline export --master spark://HOST:PORT` exports every
record, read by the cluster's executor through the data source."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pyspark
import pytest

from tests.pipeline.clients import consume_all, create_topic, produce
from tests.support.polling import wait_until

pytestmark = pytest.mark.compat

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
# Everything on loopback: the master, the worker, the driver and the executor it starts.
LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME),
            "PYSPARK_PYTHON": sys.executable}


def spark_daemon(log: Path, *argv: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *argv], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **LOOPBACK}, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Spark standalone cluster of one worker (one core): its master URL and the worker's work dir."""
    base = tmp_path_factory.mktemp("spark-cluster")
    master_log, worker_log = base / "master.log", base / "worker.log"
    master = spark_daemon(master_log, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", "0", "--webui-port", "0")
    worker = None
    try:
        url: list[str] = []

        def master_up() -> bool:
            assert master.poll() is None, master_log.read_text()
            url[:] = re.findall(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master_log.read_text())
            return bool(url)

        wait_until(master_up, what="the Spark master", timeout_s=120, interval_s=0.2)
        worker = spark_daemon(worker_log, "org.apache.spark.deploy.worker.Worker", url[0], "--host", "127.0.0.1",
                              "--cores", "1", "--memory", "1g", "--webui-port", "0", "--work-dir", str(base / "work"))

        def registered() -> bool:
            assert worker.poll() is None, worker_log.read_text()
            return "Successfully registered with master" in worker_log.read_text()

        wait_until(registered, what="the Spark worker to register", timeout_s=120, interval_s=0.2)
        yield url[0], base / "work"
    finally:
        if worker is not None:
            stop(worker)
        stop(master)


def test_export_runs_on_a_standalone_cluster(standalone: tuple[str, Path], bootstrap: str, tmp_path: Path) -> None:
    master, work = standalone
    topic = "cluster-export"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [{"partition": i % 2, "key": b"k%d" % i, "value": b"v%d" % i,
                                "timestamp": 1_767_308_400_000 + i} for i in range(100)])
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "deploy.cli", "pipeline", "export", "--bootstrap", bootstrap,
                          "--topic", topic, "--to", str(out), "--master", master],
                         cwd=REPO, env={**os.environ, **LOOPBACK}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == f"export {topic}: done: 100 records in 1 step(s); offsets now 0:50, 1:50"
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().select(
        ["partition", "offset", "value"]).to_pylist()
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == [
        (r.partition, r.offset, r.value) for r in consume_all(bootstrap, topic, [0, 1])]
    # The tasks ran in the worker's executor (its own JVM and Python workers), not in the driver.
    assert list(work.glob("app-*/*/stderr")), sorted(str(p) for p in work.rglob("*"))
