"""The one config-parsing mechanism: types, bounds and refusals, in each family's wording
(a broker's server.properties as before, a topic's configs as Kafka words INVALID_CONFIG)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.config_parsing import INT_MAX, LONG_MAX, Parse, Wording, boolean, choice, cleanup_policy, integer
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.config import LogConfig

_PLAIN = Wording(refuse=lambda key, text, reason: ValueError(f"{key}={text}: {reason}"), not_integer="nan {text}",
                 out_of_range="{number} not in {low}..{high}", not_choice="{text} not in {choices}",
                 not_boolean="{text} not a bool", not_cleanup_policy="{text} not a policy")


def test_integer_bounds_are_inclusive_and_text_is_trimmed() -> None:
    parse = integer(_PLAIN, -1, 10)
    assert [parse("k", text) for text in (" -1", "10 ", "0")] == [-1, 10, 0]
    with pytest.raises(ValueError, match=r"^k=11: 11 not in -1\.\.10$"):
        parse("k", "11")
    with pytest.raises(ValueError, match=r"^k=-2: -2 not in -1\.\.10$"):
        parse("k", "-2")
    with pytest.raises(ValueError, match=r"^k=1.5: nan 1.5$"):
        parse("k", "1.5")


def test_integer_is_bounded_by_a_long_unless_told() -> None:
    assert integer(_PLAIN, 0)("k", str(LONG_MAX)) == LONG_MAX
    with pytest.raises(ValueError, match="not in 0"):
        integer(_PLAIN, 0)("k", str(LONG_MAX + 1))


def test_choice_boolean_and_cleanup_policy() -> None:
    assert choice(_PLAIN, "a", "b")("k", " b ") == "b"
    with pytest.raises(ValueError, match=r"^k=A: A not in a, b$"):
        choice(_PLAIN, "a", "b")("k", "A")  # Kafka's enumerations are case-sensitive
    assert [boolean(_PLAIN)("k", t) for t in ("TRUE", " false")] == [True, False]
    with pytest.raises(ValueError, match="^k=yes: yes not a bool$"):
        boolean(_PLAIN)("k", "yes")
    assert cleanup_policy(_PLAIN)("k", "delete, compact,") == "delete,compact"
    assert cleanup_policy(_PLAIN, sort=True)("k", "delete, compact") == "compact,delete"
    for bad in ("", " , ", "delete,remove"):
        with pytest.raises(ValueError, match="not a policy"):
            cleanup_policy(_PLAIN)("k", bad)


def test_parse_takes_code_values_as_their_kafka_text() -> None:
    parse = Parse(boolean(_PLAIN))
    assert parse("k", True) is True and parse("k", None) is None  # a default, and unset
    assert Parse(integer(_PLAIN, 0))("k", 5) == 5
    built = (1, 2)
    assert Parse(integer(_PLAIN, 0))("k", built) is built  # already built: left alone


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"num.partitions": "zero"}, "num.partitions: expected an integer, got 'zero'"),
        ({"num.partitions": "0"}, f"num.partitions: 0 is outside [1, {INT_MAX}]"),
        ({"log.retention.ms": "-2"}, f"log.retention.ms: -2 is outside [-1, {LONG_MAX}]"),
        ({"delete.topic.enable": "yes"}, "delete.topic.enable: expected true or false, got 'yes'"),
        ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type: 'Now' is not one of CreateTime, "
                                                "LogAppendTime"),
        ({"log.cleanup.policy": "remove"}, "log.cleanup.policy: 'remove' must be delete, compact or both"),
        ({"log.retention.hours": "x"}, "log.retention.hours: expected an integer, got 'x'"),
    ],
)
def test_broker_config_words_a_refusal_key_first(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.from_properties(props)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"segment.bytes": "13"}, "Invalid value 13 for configuration segment.bytes: must be at least 14"),
        ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: not a number"),
        ({"flush.ms": str(LONG_MAX + 1)}, f"Invalid value {LONG_MAX + 1} for configuration flush.ms: "
                                          "must be at least 0"),
        ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: must be one of "
                                         "producer, uncompressed, gzip, snappy, lz4, zstd"),
        ({"cleanup.policy": "remove"}, "Invalid value remove for configuration cleanup.policy: must be compact, "
                                       "delete or both"),
    ],
)
def test_topic_config_words_a_refusal_as_kafka(configs: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaError) as raised:
        LogConfig.from_topic_configs(configs, LogConfig())
    assert raised.value.code == ErrorCode.INVALID_CONFIG
    assert raised.value.message == message


def test_broker_and_topic_keep_their_cleanup_policy_orders() -> None:
    broker = BrokerConfig.from_properties({"log.cleanup.policy": "delete,compact"})
    assert broker.value_text("log.cleanup.policy") == "delete,compact"  # as given, as DescribeConfigs shows it
    assert LogConfig.from_topic_configs({"cleanup.policy": "delete,compact"}, LogConfig()).cleanup_policy == \
        "compact,delete"
