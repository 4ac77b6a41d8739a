"""Dynamic broker configs: Kafka's checks, precedence, sources and synonyms (pure)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.protocol.constants import ConfigSource
from broker.protocol.errors import ErrorCode, KafkaError
from broker.server.broker_configs import check_broker_update
from broker.server.topic_configs import broker_source, broker_synonyms, describe_topic_configs

STATIC = BrokerConfig.from_properties({"node.id": "1", "log.segment.bytes": "2097152"})


def refused(configs: dict[str, str | None], name: str = "1") -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        check_broker_update(name, configs, STATIC, {})
    return caught.value


def test_static_keys_are_refused_with_kafkas_message() -> None:
    error = refused({"log.dirs": "/x", "zookeeper.connect": "h:1", "log.retention.ms": "1"})
    assert error.code == ErrorCode.INVALID_REQUEST
    assert error.message == ("Invalid config value for resource ConfigResource(type=BROKER, name='1'): "
                             "Cannot update these configs dynamically: Set(log.dirs, zookeeper.connect)")


def test_bad_values_unknown_keys_and_units_are_refused_by_name() -> None:
    bad = refused({"min.insync.replicas": "zero"}, name="")
    assert bad.code == ErrorCode.INVALID_REQUEST and "min.insync.replicas" in bad.message
    assert "name=''" in bad.message
    assert refused({"no.such.key": "1"}).code == ErrorCode.INVALID_CONFIG
    assert "log.retention.ms" in refused({"log.retention.hours": "1"}).message
    assert refused({"message.max.bytes": None}).code == ErrorCode.INVALID_REQUEST


def test_dynamic_keys_and_ignored_kafka_keys_are_accepted() -> None:
    wanted = {"log.retention.ms": "1000", "num.io.threads": "16", "unclean.leader.election.enable": "true"}
    assert check_broker_update("1", wanted, STATIC, {"message.max.bytes": "2000"}) == wanted


def test_precedence_sources_and_synonyms_are_kafkas() -> None:
    config = STATIC.with_dynamic({"log.segment.bytes": "3000000", "message.max.bytes": "2000"},
                                 {"log.segment.bytes": "4000000"})
    assert config.log_segment_bytes == 4000000 and config.message_max_bytes == 2000
    assert dict(config.explicit) == dict(STATIC.explicit)  # the static layer stays as it was
    assert broker_source("log.segment.bytes", config) == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert broker_source("message.max.bytes", config) == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert broker_source("log.retention.bytes", config) == ConfigSource.DEFAULT_CONFIG
    assert broker_synonyms("log.segment.bytes", config) == [
        ("log.segment.bytes", "4000000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.segment.bytes", "3000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.segment.bytes", "2097152", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG)]
    topic = {name: (value, source) for name, value, source in describe_topic_configs({}, config)}
    assert topic["segment.bytes"] == ("4000000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert topic["max.message.bytes"] == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    # Replacing the layers replaces them; nothing of the previous dynamic values remains.
    again = config.with_dynamic({}, {})
    assert again.log_segment_bytes == 2097152 and not again.dynamic_default and not again.dynamic_broker
