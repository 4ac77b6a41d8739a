from pathlib import Path

import pytest

from broker.config import (
    BROKER_KEYS,
    TOPIC_CONFIG_SYNONYMS,
    BrokerConfig,
    ConfigError,
    ignored_keys,
    load_properties,
    parse_listeners,
)
from broker.protocol.errors import KafkaError
from broker.storage import LogConfig


def test_defaults_are_kafkas() -> None:
    config = BrokerConfig.from_properties({})
    assert config.broker_id == 0
    assert config.num_partitions == 1
    assert config.message_max_bytes == 1048588
    assert config.log_segment_bytes == 1073741824
    assert config.log_retention_ms == 168 * 3600 * 1000
    assert config.socket_request_max_bytes == 104857600
    assert config.auto_create_topics_enable is True
    assert [str(s) for s in config.listeners] == ["PLAINTEXT://:9092"]
    # Causeway bounds queued request bytes where Kafka does not: twice the largest request.
    assert config.queued_max_request_bytes == 2 * config.socket_request_max_bytes


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"log.retension.ms": "1"}, "did you mean 'log.retention.ms'"),
        ({"num.partitions": "zero"}, "num.partitions: expected an integer"),
        ({"num.partitions": "0"}, "num.partitions: 0 is outside"),
        ({"auto.create.topics.enable": "yes"}, "expected true or false"),
        ({"listeners": "PLAINTEXT://host"}, "listeners: 'PLAINTEXT://host' is not of the form"),
        ({"listeners": "A://:1,A://:2"}, "appears more than once"),
        ({"listeners": "WAN://:1"}, "WAN has no entry in listener.security.protocol.map"),
        ({"advertised.listeners": "OTHER://h:1"}, "OTHER is not one of the listeners"),
        ({"queued.max.request.bytes": "10"}, "must be at least socket.request.max.bytes"),
        ({"log.message.timestamp.type": "Now"}, "not one of CreateTime, LogAppendTime"),
    ],
)
def test_bad_config_is_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BrokerConfig.from_properties(props)


def test_aliases_resolve_with_kafkas_precedence() -> None:
    assert BrokerConfig.from_properties({"log.retention.hours": "2"}).log_retention_ms == 7_200_000
    both = {"log.retention.hours": "2", "log.retention.minutes": "3"}
    assert BrokerConfig.from_properties(both).log_retention_ms == 180_000
    precise = {"log.retention.ms": "5", "log.retention.hours": "2"}
    assert BrokerConfig.from_properties(precise).log_retention_ms == 5
    assert BrokerConfig.from_properties({"broker.id": "7"}).broker_id == 7


def test_named_listeners_and_advertised_addresses() -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,WAN://127.0.0.1:9093",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:9092,WAN://proxy.example:19093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,WAN:PLAINTEXT",
        }
    )
    assert str(config.advertised_for("WAN")) == "WAN://proxy.example:19093"
    assert config.security_protocols["WAN"] == "PLAINTEXT"
    assert parse_listeners("l", "PLAINTEXT://[::1]:9092")[0].host == "::1"


def test_kafka_keys_without_effect_are_accepted_and_reported() -> None:
    props = {"num.network.threads": "3", "num.io.threads": "8"}
    BrokerConfig.from_properties(props)
    assert ignored_keys(props) == ["num.io.threads", "num.network.threads"]


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! also a comment\nnum.partitions=3\nlog.dirs = /data/a,\\\n    /data/b\nbroker.id: 4\n"
    )
    props = load_properties(path)
    config = BrokerConfig.from_properties(props)
    assert config.num_partitions == 3
    assert config.broker_id == 4
    assert [str(p) for p in config.log_dirs] == ["/data/a", "/data/b"]


def test_topic_defaults_follow_broker_keys() -> None:
    config = BrokerConfig.from_properties({"log.retention.ms": "1000", "message.max.bytes": "2000"})
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == "1000"
    assert defaults["max.message.bytes"] == "2000"
    assert defaults["cleanup.policy"] == "delete"


def test_every_broker_key_is_named_once_and_topic_synonyms_exist() -> None:
    # The model is the one table: each field's alias is its Kafka key, and the keys DescribeConfigs
    # lists as topic-config synonyms are among them.
    assert len(BROKER_KEYS) == len(set(BROKER_KEYS)) == len(BrokerConfig.model_fields)
    assert {key for key in TOPIC_CONFIG_SYNONYMS.values() if key is not None} <= set(BROKER_KEYS)
    with pytest.raises(ConfigError, match="log_dirs: unknown broker config"):
        BrokerConfig.from_properties({"log_dirs": "/x"})  # field names are not keys


def test_describe_reports_text_as_given_and_sources() -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": " plaintext://127.0.0.1:9092 ",
            "log.dir": "/data/a, /data/b",
            "log.retention.minutes": "3",
            "auto.create.topics.enable": "FALSE",
            "num.partitions": " 05",
        }
    )
    assert config.value_text("listeners") == "plaintext://127.0.0.1:9092"
    assert config.value_text("log.dirs") == "/data/a, /data/b"
    assert config.value_text("advertised.listeners") is None
    assert config.value_text("listener.security.protocol.map").startswith("PLAINTEXT:PLAINTEXT,")
    assert config.value_text("log.retention.ms") == "180000"
    assert config.value_text("auto.create.topics.enable") == "false"
    assert config.value_text("num.partitions") == "5"
    assert config.value_text("queued.max.request.bytes") == str(2 * 104857600)
    assert set(config.explicit) == {"listeners", "log.dirs", "log.retention.ms", "auto.create.topics.enable",
                                    "num.partitions"}
    with pytest.raises(KeyError):
        config.value_text("log.retention.hours")


def test_log_config_parses_topic_configs_by_kafka_name() -> None:
    defaults = LogConfig(segment_bytes=300)
    config = LogConfig.from_topic_configs({"retention.ms": " 5", "cleanup.policy": "delete,compact",
                                           "preallocate": "true"}, defaults)
    assert (config.segment_bytes, config.retention_ms, config.cleanup_policy) == (300, 5, "compact,delete")
    assert config.compacts and config.deletes
    assert LogConfig.from_topic_configs({}, defaults) is defaults
    with pytest.raises(KafkaError, match="Invalid value 13 for configuration segment.bytes: must be at least 14"):
        LogConfig.from_topic_configs({"segment.bytes": "13"}, defaults)
    with pytest.raises(KafkaError, match="configuration compression.type: must be one of producer"):
        LogConfig.from_topic_configs({"compression.type": "lzma"}, defaults)


def test_the_inter_broker_listener_is_named_as_the_listeners_are() -> None:
    # inter.broker.listener.name is matched case-insensitively (listener names are upper case),
    # and every user of it (followers, the controller, metadata) reads this one property.
    base = {"listeners": "INTERNAL://:1,EXTERNAL://:2",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}
    assert BrokerConfig.from_properties(base).inter_broker_listener == "INTERNAL"
    named = BrokerConfig.from_properties({**base, "inter.broker.listener.name": "external"})
    assert named.inter_broker_listener == "EXTERNAL"
