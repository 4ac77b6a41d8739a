"""`--master spark://...`: a job on a real Spark standalone cluster (a master and a worker, each a
JVM of its own, started from the pyspark package's `spark-class`), so the executors are other
processes than the driver: `causeway pipeline export --master spark://HOST:PORT` exports every
record, read by the cluster's executor through the data source."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pyspark
import pytest

from deploy.child_process import ChildProcess
from tests.pipeline.clients import consume_all, create_topic, produce

pytestmark = pytest.mark.compat

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
# Everything on loopback: the master, the worker, the driver and the executor it starts.
LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME),
            "PYSPARK_PYTHON": sys.executable}


def spark_daemon(what: str, log: Path, *argv: str) -> ChildProcess:
    """A Spark daemon (a JVM) in a process group of its own, with what it starts (a worker's
    executors): stopping it stops them too. Its output goes to `log`, which it is probed by."""
    return ChildProcess.start(what, [str(SPARK_HOME / "bin" / "spark-class"), *argv], log_path=log, stdout="log",
                              env=LOOPBACK, own_group=True)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Spark standalone cluster of one worker (one core): its master URL and the worker's work dir."""
    base = tmp_path_factory.mktemp("spark-cluster")
    master_log, worker_log = base / "master.log", base / "worker.log"
    master = spark_daemon("the Spark master", master_log, "org.apache.spark.deploy.master.Master", "--host",
                          "127.0.0.1", "--port", "0", "--webui-port", "0")
    worker = None
    try:
        url: list[str] = []

        def master_up() -> bool:
            url[:] = re.findall(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master_log.read_text())
            return bool(url)

        master.wait_ready(master_up, timeout_s=120, interval_s=0.2)
        worker = spark_daemon("the Spark worker", worker_log, "org.apache.spark.deploy.worker.Worker", url[0],
                              "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0",
                              "--work-dir", str(base / "work"))
        worker.wait_ready(lambda: "Successfully registered with master" in worker_log.read_text(), timeout_s=120,
                          interval_s=0.2)
        yield url[0], base / "work"
    finally:
        if worker is not None:
            worker.stop(30)
        master.stop(30)


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
