"""The protocol's numbers are defined once, and an error code this side does not know keeps its number."""

from __future__ import annotations

import pytest

from broker.client.connection import check_error
from broker.protocol.constants import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    AlterConfigOp,
    ConfigResourceType,
    ConfigSource,
    CoordinatorType,
)
from broker.protocol.errors import ErrorCode, KafkaError, is_retriable


def test_an_unknown_code_reads_as_unknown_server_error_and_keeps_its_number() -> None:
    code = ErrorCode(31000)  # a newer broker's code
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR and int(code) == -1  # as Kafka's Errors.forCode
    assert code in {ErrorCode.UNKNOWN_SERVER_ERROR: "x"}
    assert "31000" in code.name and "31000" in str(KafkaError(code, "fetch"))
    assert not is_retriable(code)
    assert ErrorCode(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER  # known codes are the members themselves


@pytest.mark.parametrize("value", ["6", 1.5, None])
def test_what_is_not_a_code_is_still_refused(value: object) -> None:
    with pytest.raises(ValueError):
        ErrorCode(value)  # type: ignore[arg-type]


def test_check_error_names_an_unknown_code_once() -> None:
    with pytest.raises(KafkaError) as info:
        check_error(31000, "describe", "newer")
    assert info.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert str(info.value) == "UNKNOWN_SERVER_ERROR (error code 31000): describe: newer"


def test_the_numbers_are_kafkas() -> None:
    # ListOffsetsRequest's EARLIEST/LATEST/MAX_TIMESTAMP, CoordinatorType, ConfigResource.Type,
    # DescribeConfigsResponse.ConfigSource and AlterConfigOp.OpType ids.
    assert (LATEST, EARLIEST, MAX_TIMESTAMP) == (-1, -2, -3)
    assert (CoordinatorType.GROUP, CoordinatorType.TRANSACTION) == (0, 1)
    assert (ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.GROUP) == (2, 4, 32)
    assert (ConfigSource.TOPIC_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG,
            ConfigSource.GROUP_CONFIG) == (1, 4, 5, 8)
    assert [op.value for op in AlterConfigOp] == [0, 1, 2, 3]
