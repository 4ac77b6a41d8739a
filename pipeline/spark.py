"""Spark sessions for the pipeline: local mode by default, any master by flag.

`session()` builds (or returns) the SparkSession a job or a test runs on, with the data source
registered. In local mode everything stays on 127.0.0.1 (driver, block manager, Python
workers), the UI is off, shuffles are small, and Spark's start-up warnings are kept out of the
way; the Python workers run this interpreter, so they import the same `pipeline` package.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from pipeline.options import PipelineError

__all__ = ["DEFAULT_MASTER", "session", "task_failure", "writing_to"]

DEFAULT_MASTER = "local[2]"
_LOG4J = Path(__file__).with_name("log4j2.properties")


def session(master: str = DEFAULT_MASTER, *, app_name: str = "causeway-pipeline", shuffle_partitions: int = 2,
            conf: Mapping[str, str] | None = None, jvm_output: IO[bytes] | None = None,
            log_level: str = "ERROR") -> SparkSession:
    """The active SparkSession for `master`, made if need be, with format "causeway" registered.

    A session already running in this process is reused as it is (Spark allows one per JVM).
    `jvm_output`: where the Spark JVM this makes writes its stdout and stderr (its log lines,
    the JVM's own warnings, stack traces Spark's threads print while it stops) instead of this
    process's terminal; it has no effect once a JVM runs in this process. `log_level`: Spark's.
    """
    from pipeline.source import CausewayDataSource

    local = master.startswith("local")
    if local:
        # Workers are forked from this interpreter's environment: the same venv, so the same
        # pipeline code; and nothing binds or connects beyond loopback.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{_LOG4J}",
    }
    if local:
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    if jvm_output is not None:
        _start_jvm(settings, jvm_output)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(CausewayDataSource)
    return spark


@contextmanager
def writing_to(spark: SparkSession, sink: type[DataSource]) -> Iterator[None]:
    """For the block: `sink` registered on `spark` (again: registering replaces), and `spark`
    the active session of the calling thread, so that `df.write.format(sink.name())` on a
    DataFrame of `spark` finds it. The thread's previous active session is put back after.

    Spark looks a Python data source up for a write (DataSource.lookupDataSource) in the
    registry of the calling thread's active session, not in the DataFrame's session as a read
    does. py4j runs each Python thread's calls on a JVM thread of its own, and a JVM thread
    other than the one that made the session has no active session: a Python thread other than
    the session's maker (a job run from a worker thread), or the same Python thread once py4j
    has replaced its connection (it sends a call again on a new connection, so a new JVM thread,
    when the old one broke). There the write failed DATA_SOURCE_NOT_FOUND with the source
    registered."""
    spark.dataSource.register(sink)
    jvm = spark._jvm
    assert jvm is not None
    sessions = getattr(jvm, "org.apache.spark.sql.classic.SparkSession")  # the class PySpark itself uses
    previous = sessions.getActiveSession()
    sessions.setActiveSession(spark._jsparkSession)
    try:
        yield
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()


def _start_jvm(settings: Mapping[str, str], output: IO[bytes]) -> None:
    """Launch Spark's JVM (spark-submit, as PySpark does) with its output going to `output`,
    unless this process runs one already; the session is then made on it."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stdout": output, "stderr": output})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


# What an executor's failure looks like in the driver's exception text: the PipelineError a task
# raised (its class name, then the message naming topic, partition and offset), or Spark's own
# reason for a task that died (a Python worker killed, out of memory, ...).
_TASK_ERROR = re.compile(r"PipelineError: (.+)")
_LOST_TASK = re.compile(r"most recent failure: Lost task (\S+) in stage (\S+) \(TID \d+\) \([^)]*\): "
                        r"(?:[\w.$]+(?:Exception|Error): )?(.+)")
_SPARK_REASON = re.compile(r"SparkException: (.+)")


def task_failure(exc: BaseException) -> PipelineError | None:
    """A Spark job's failure as one line: the PipelineError one of its tasks raised, or Spark's
    reason a task failed; None for anything else (a bug: let it raise with its traceback).

    Spark hands an executor's exception to the driver as text inside its own (a PySparkException,
    or py4j's Py4JJavaError around a SparkException), after its retries ran out."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    if not isinstance(exc, (PySparkException, Py4JJavaError)):
        return None
    text = str(exc)
    raised = _TASK_ERROR.search(text)
    if raised is not None:
        return PipelineError(raised.group(1).strip())
    lost = _LOST_TASK.search(text)
    if lost is not None:
        return PipelineError(f"a Spark task failed (task {lost.group(1)} of stage {lost.group(2)}): "
                             f"{_first_sentence(lost.group(3))}")
    reason = _SPARK_REASON.search(text)
    if reason is not None:
        return PipelineError(f"the Spark job failed: {_first_sentence(reason.group(1))}")
    return None


def _first_sentence(line: str) -> str:
    return line.split(". Consider setting", 1)[0].strip()  # Spark's tuning hint is not the cause
