"""DescribeConfigs synonyms and group configs as Kafka 4.3.1 reports and checks them.

The expected lists are what `kafka-configs --describe --all` printed against Apache Kafka 4.3.1
for the same settings (bench.peers.KafkaBroker; see tests/compat/test_kafka_tools.py)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.protocol.constants import ConfigSource
from broker.protocol.errors import ErrorCode, KafkaError
from broker.server.group_configs import GROUP_CONFIGS, validate_group_configs
from broker.server.topic_configs import broker_synonyms, describe_topic_configs, topic_config_synonyms

TOPIC, STATIC, DEFAULT = ConfigSource.TOPIC_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
PLAIN = BrokerConfig.from_properties({})
STATIC_FILE = BrokerConfig.from_properties({"log.segment.bytes": "2097152", "log.retention.ms": "86400000",
                                            "log.cleanup.policy": "compact"})


@pytest.mark.parametrize(("name", "overrides", "broker", "expected"), [
    ("cleanup.policy", {}, PLAIN, [("log.cleanup.policy", "delete", DEFAULT)]),
    ("segment.bytes", {"segment.bytes": "1048576"}, PLAIN,
     [("segment.bytes", "1048576", TOPIC), ("log.segment.bytes", "1073741824", DEFAULT)]),
    ("segment.bytes", {"segment.bytes": "1048576"}, STATIC_FILE,
     [("segment.bytes", "1048576", TOPIC), ("log.segment.bytes", "2097152", STATIC),
      ("log.segment.bytes", "1073741824", DEFAULT)]),
    ("cleanup.policy", {}, STATIC_FILE,
     [("log.cleanup.policy", "compact", STATIC), ("log.cleanup.policy", "delete", DEFAULT)]),
    # log.retention.ms has no default in Kafka: log.retention.hours carries it, listed only after a
    # value of log.retention.ms itself.
    ("retention.ms", {}, PLAIN, []),
    ("retention.ms", {"retention.ms": "3600000"}, PLAIN, [("retention.ms", "3600000", TOPIC)]),
    ("retention.ms", {"retention.ms": "3600000"}, STATIC_FILE,
     [("retention.ms", "3600000", TOPIC), ("log.retention.ms", "86400000", STATIC),
      ("log.retention.hours", "168", DEFAULT)]),
    ("segment.ms", {}, PLAIN, []),
    ("flush.ms", {}, PLAIN, []),
    ("segment.jitter.ms", {}, PLAIN, []),
    ("file.delete.delay.ms", {}, PLAIN, [("log.segment.delete.delay.ms", "60000", DEFAULT)]),
    ("compression.zstd.level", {}, PLAIN, [("compression.zstd.level", "3", DEFAULT)]),
    ("remote.storage.enable", {}, PLAIN, []),
    ("max.message.bytes", {}, PLAIN, [("message.max.bytes", "1048588", DEFAULT)]),
])
def test_topic_synonyms_as_kafka_lists_them(name: str, overrides: dict[str, str], broker: BrokerConfig,
                                            expected: list[tuple[str, str, int]]) -> None:
    assert topic_config_synonyms(name, overrides, broker) == expected


def test_broker_key_synonyms() -> None:
    assert broker_synonyms("log.segment.bytes", STATIC_FILE) == [
        ("log.segment.bytes", "2097152", STATIC), ("log.segment.bytes", "1073741824", DEFAULT)]
    assert broker_synonyms("log.retention.ms", STATIC_FILE) == [
        ("log.retention.ms", "86400000", STATIC), ("log.retention.hours", "168", DEFAULT)]
    assert broker_synonyms("log.retention.ms", PLAIN) == []


def test_configs_kafka_4_removed_are_listed_only_when_set() -> None:
    names = [name for name, _, _ in describe_topic_configs({}, PLAIN)]
    assert "message.downconversion.enable" not in names and "message.timestamp.difference.max.ms" not in names
    assert {"compression.gzip.level", "remote.log.copy.disable", "remote.log.delete.on.disable"} <= set(names)
    kept = describe_topic_configs({"message.downconversion.enable": "false"}, PLAIN)
    assert ("message.downconversion.enable", "false", TOPIC) in kept


def test_group_configs_keys_and_defaults_are_kafkas() -> None:
    assert len(GROUP_CONFIGS) == 17
    assert (GROUP_CONFIGS["consumer.session.timeout.ms"].broker_key,
            GROUP_CONFIGS["consumer.session.timeout.ms"].default) == ("group.consumer.session.timeout.ms", "45000")
    assert GROUP_CONFIGS["share.isolation.level"].broker_key == "share.isolation.level"
    stripped = validate_group_configs({"consumer.session.timeout.ms": " 50000 "})
    assert stripped == {"consumer.session.timeout.ms": "50000"}
    assert validate_group_configs({"share.auto.offset.reset": "by_duration:PT1H30M"})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"no.such": "1"}, "Unknown group config name: no.such"),
    ({"consumer.session.timeout.ms": "1"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "soon"},
     "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"}, None),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ({"share.isolation.level": "serializable"}, "String must be one of: read_committed, read_uncommitted"),
    ({"share.renew.acknowledge.enable": "yes"}, "Expected value to be either true or false"),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "must be latest, earliest or by_duration"),
    ({"streams.initial.rebalance.delay.ms": "-1"},
     "Invalid value -1 for configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
])
def test_group_configs_are_checked_as_kafka_checks_them(overrides: dict[str, str], message: str | None) -> None:
    if message is None:
        assert validate_group_configs(overrides) == overrides
        return
    with pytest.raises(KafkaError) as caught:
        validate_group_configs(overrides)
    assert caught.value.code == ErrorCode.INVALID_CONFIG and message in (caught.value.message or "")
