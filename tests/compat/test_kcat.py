"""kcat (librdkafka's command-line client) against a real broker process."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from deploy.broker_process import BrokerProcess

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(module_broker: BrokerProcess) -> BrokerProcess:
    """The module's one broker (tests/conftest.py), not one per test: topics keep them apart."""
    return module_broker


def kcat(*args: str, stdin: str | None = None) -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed: `make test` installs it as root (make system-deps)"
    done = subprocess.run([path, *args], input=stdin, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_kcat_produces_lists_and_consumes(broker: BrokerProcess) -> None:
    lines = [f"line {i}" for i in range(50)]
    kcat("-b", broker.bootstrap, "-P", "-t", "kc", "-z", "snappy", stdin="\n".join(lines) + "\n")
    listing = kcat("-b", broker.bootstrap, "-L", "-t", "kc")
    assert 'topic "kc" with 1 partitions' in listing
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} line {i}" for i in range(50)]


def test_kcat_keys_and_json_envelope(broker: BrokerProcess) -> None:
    kcat("-b", broker.bootstrap, "-P", "-t", "keyed", "-K", ":", stdin="a:1\nb:2\n")
    out = kcat("-b", broker.bootstrap, "-C", "-t", "keyed", "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert out.splitlines() == ["a=1", "b=2"]
