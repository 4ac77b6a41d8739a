"""KIP-578's partition limits, the one check both controllers use (check_partition_limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller.assignment import check_partition_limits, replicas_per_broker
from broker.protocol.errors import ErrorCode, KafkaError


def _config(tmp_path: Path, **limits: int) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(tmp_path), **{
        k.replace("_", "."): str(v) for k, v in limits.items()}})


def test_replicas_count_per_broker() -> None:
    assert replicas_per_broker([[1, 2], [2, 3], [3]]) == {1: 1, 2: 2, 3: 2}


def test_broker_limit_names_the_brokers_over_it(tmp_path: Path) -> None:
    config = _config(tmp_path, max_broker_partitions=10)
    check_partition_limits(config, {1: 9, 2: 3}, 10, {1: 1, 2: 7}, 4)  # both at most 10: fine
    with pytest.raises(KafkaError) as info:
        check_partition_limits(config, {1: 9, 2: 3, 3: 10}, 10, {1: 2, 2: 8, 3: 1}, 4)
    assert info.value.code == ErrorCode.POLICY_VIOLATION
    assert "brokers [1,2,3]" in info.value.message and "max.broker.partitions=10" in info.value.message
    assert "broker 1 holds 9 and would get 2 more" in info.value.message


def test_only_brokers_getting_replicas_count(tmp_path: Path) -> None:
    # A broker already past a limit lowered since does not block growth on the others (KIP-578).
    check_partition_limits(_config(tmp_path, max_broker_partitions=10), {1: 50, 2: 3}, 53, {2: 5}, 5)


def test_cluster_limit(tmp_path: Path) -> None:
    config = _config(tmp_path, max_partitions=20)
    check_partition_limits(config, {1: 15}, 15, {1: 5}, 5)
    with pytest.raises(KafkaError) as info:
        check_partition_limits(config, {1: 15}, 15, {1: 6}, 6)
    assert info.value.code == ErrorCode.POLICY_VIOLATION
    assert "max.partitions=20" in info.value.message and "already holds 15 partitions" in info.value.message
    # A reassignment adds replicas, never partitions: the cluster limit does not apply.
    check_partition_limits(config, {1: 25}, 25, {2: 1}, 0)
