"""Group configs (ConfigResource GROUP = 32) on a real broker: set, described with Kafka's synonyms,
kept across a restart, and a damaged store refused with a message naming it while the broker serves on."""

from __future__ import annotations

from broker.protocol.errors import ErrorCode
from broker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from deploy.broker_process import BrokerProcess
from deploy.kafka_socket import ask

GROUP = 32
DYNAMIC_GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
SET, DELETE = 0, 1


def alter(broker: BrokerProcess, group: str, *ops: tuple[str, int, str | None]) -> tuple[int, str | None]:
    op = IncrementalAlterConfigsRequest.AlterableConfig
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=GROUP, resource_name=group,
        configs=[op(name=n, config_operation=o, value=v) for n, o, v in ops])])
    response: IncrementalAlterConfigsResponse = ask(broker.bootstrap, request, 1, timeout_s=30)
    (result,) = response.responses
    return result.error_code, result.error_message


def describe(broker: BrokerProcess, group: str) -> DescribeConfigsResponse.DescribeConfigsResult:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=None)], include_synonyms=True)
    response: DescribeConfigsResponse = ask(broker.bootstrap, request, 4, timeout_s=30)
    (result,) = response.results
    return result


def synonyms(result: DescribeConfigsResponse.DescribeConfigsResult, name: str) -> list[tuple[str, str | None, int]]:
    (entry,) = [c for c in result.configs if c.name == name]
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_group_configs_are_kept_across_a_restart(broker: BrokerProcess) -> None:
    assert alter(broker, "orders", ("consumer.heartbeat.interval.ms", SET, "6000"),
                 ("share.isolation.level", SET, "read_committed"))[0] == ErrorCode.NONE
    broker.restart()
    result = describe(broker, "orders")
    assert result.error_code == ErrorCode.NONE and len(result.configs) == 17
    assert synonyms(result, "consumer.heartbeat.interval.ms") == [
        ("consumer.heartbeat.interval.ms", "6000", DYNAMIC_GROUP_CONFIG),
        ("group.consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG)]
    assert synonyms(result, "consumer.session.timeout.ms") == [
        ("group.consumer.session.timeout.ms", "45000", DEFAULT_CONFIG)]
    assert describe(broker, "other").configs[0].config_source == DEFAULT_CONFIG  # another group: defaults

    # A refused change leaves the stored ones as they were.
    assert alter(broker, "orders", ("share.isolation.level", DELETE, None),
                 ("consumer.session.timeout.ms", SET, "1"))[0] == ErrorCode.INVALID_CONFIG
    assert synonyms(describe(broker, "orders"), "share.isolation.level")[0] == (
        "share.isolation.level", "read_committed", DYNAMIC_GROUP_CONFIG)


def test_a_damaged_store_is_refused_by_name_and_the_broker_serves_on(broker: BrokerProcess) -> None:
    assert alter(broker, "orders", ("consumer.session.timeout.ms", SET, "50000"))[0] == ErrorCode.NONE
    broker.stop()
    (stored,) = broker.data_dir.rglob("group-configs.json")
    stored.write_text('{"version": 1, "groups": {"orders": {"consumer.session.timeout.ms": 50000}')  # truncated
    broker.start()
    result = describe(broker, "orders")
    assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert str(stored) in (result.error_message or "") and "damaged" in (result.error_message or "")
    code, message = alter(broker, "orders", ("consumer.session.timeout.ms", DELETE, None))
    assert code == ErrorCode.KAFKA_STORAGE_ERROR and str(stored) in (message or "")
    assert stored.read_text().endswith("50000}")  # not overwritten: the operator repairs it
    # Everything else is served as before.
    broker_configs = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=["log.segment.bytes"])], include_synonyms=True)
    assert ask(broker.bootstrap, broker_configs, 4, timeout_s=30).results[0].error_code == ErrorCode.NONE
