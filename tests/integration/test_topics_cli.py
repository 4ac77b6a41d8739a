"""`causeway topics` against a real broker, as kafka-topics users run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from deploy.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]


def topics(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "topics", "--bootstrap-server", broker.bootstrap,
                           *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_create_list_describe_alter_delete(broker: BrokerProcess) -> None:
    created = topics(broker, "--create", "--topic", "orders", "--partitions", "3", "--config", "retention.ms=3600000")
    assert created.returncode == 0, created.stderr
    assert topics(broker, "--list").stdout.split() == ["orders"]
    described = topics(broker, "--describe", "--topic", "orders").stdout
    assert "Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=3600000" in described
    assert described.count("\tPartition: ") == 3

    again = topics(broker, "--create", "--topic", "orders", "--partitions", "3")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert topics(broker, "--create", "--topic", "orders", "--if-not-exists").returncode == 0

    altered = topics(broker, "--alter", "--topic", "orders", "--partitions", "5", "--config", "cleanup.policy=compact",
                     "--delete-config", "retention.ms")
    assert altered.returncode == 0, altered.stderr
    described = topics(broker, "--describe", "--topic", "orders").stdout
    assert "PartitionCount: 5" in described and "cleanup.policy=compact" in described
    assert "retention.ms" not in described

    assert topics(broker, "--delete", "--topic", "orders").returncode == 0
    assert topics(broker, "--list").stdout.split() == []
    missing = topics(broker, "--delete", "--topic", "orders")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_an_unreachable_cluster_is_named(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "topics", "--bootstrap-server", "127.0.0.1:1",
                           "--list", "--timeout", "2"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1 and "127.0.0.1:1" in done.stderr
