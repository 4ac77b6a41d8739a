"""Spark sessions for the pipeline: local mode by default, any master by flag.

`session()` builds (or returns) the SparkSession a job or a test runs on, with the data source
registered. In local mode everything stays on 127.0.0.1 (driver, block manager, Python
workers), the UI is off, shuffles are small, and Spark's start-up warnings are kept out of the
way; the Python workers run this interpreter, so they import the same `pipeline` package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "session"]

DEFAULT_MASTER = "local[2]"
_LOG4J = Path(__file__).with_name("log4j2.properties")


def session(master: str = DEFAULT_MASTER, *, app_name: str = "causeway-pipeline", shuffle_partitions: int = 2,
            conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active SparkSession for `master`, made if need be, with format "causeway" registered.

    A session already running in this process is reused as it is (Spark allows one per JVM).
    """
    from pipeline.source import CausewayDataSource

    local = master.startswith("local")
    if local:
        # Workers are forked from this interpreter's environment: the same venv, so the same
        # pipeline code; and nothing binds or connects beyond loopback.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{_LOG4J}")
    )
    if local:
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CausewayDataSource)
    return spark
