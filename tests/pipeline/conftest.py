"""One local SparkSession and one broker process for every pipeline test, and a target broker
for each module that asks for one.

Spark's start-up (a JVM, then Python workers) costs seconds, so the session is made once per
test session and shared; tests keep apart by topic names. The broker runs its log cleaner
often, so a compacted topic shows its gaps within a test, and keeps records of any age
(tests/pipeline/brokers.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from deploy.broker_process import BrokerProcess
from pipeline.spark import session
from tests.pipeline.brokers import pipeline_broker_process


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    spark = session("local[2]", app_name="causeway-pipeline-tests")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def pipeline_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = pipeline_broker_process(tmp_path_factory.mktemp("pipeline") / "broker", "log.cleaner.backoff.ms=100")
    yield process
    if process.proc is not None:
        code = process.stop()
        assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


@pytest.fixture(scope="module")
def target_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A second broker, the target of the copy, audit and lag jobs: one for each test module."""
    process = pipeline_broker_process(tmp_path_factory.mktemp("target") / "broker")
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.fixture
def bootstrap(pipeline_broker: BrokerProcess) -> str:
    return pipeline_broker.bootstrap

