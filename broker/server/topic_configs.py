"""Topic config overrides: validate them and describe them as Kafka does."""

from __future__ import annotations

from collections.abc import Mapping

from broker.config import PASSIVE_TOPIC_CONFIGS, TOPIC_CONFIG_SYNONYMS, BrokerConfig
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import broker_log_config
from broker.storage import LogConfig

__all__ = ["validate_topic_configs", "describe_topic_configs", "ConfigSource", "TOPIC_CONFIG_NAMES"]

TOPIC_CONFIG_NAMES = frozenset(TOPIC_CONFIG_SYNONYMS) | frozenset(PASSIVE_TOPIC_CONFIGS)


class ConfigSource:
    """DescribeConfigs config_source values (Kafka's ConfigSource ids)."""

    TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


def validate_topic_configs(configs: Mapping[str, str | None], broker: BrokerConfig) -> dict[str, str]:
    """Check overrides for a topic; returns them without null values.

    Raises KafkaError(INVALID_CONFIG) naming an unknown key or a value that does not parse.
    """
    out: dict[str, str] = {}
    for name, value in configs.items():
        if name not in TOPIC_CONFIG_NAMES:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config {name}")
        out[name] = value
    acted_on = {k: v for k, v in out.items() if k in TOPIC_CONFIG_SYNONYMS}
    # Parsing into a LogConfig is the one check of every value; it raises INVALID_CONFIG.
    LogConfig.from_topic_configs(acted_on, broker_log_config(broker))
    return out


def describe_topic_configs(
    overrides: Mapping[str, str], broker: BrokerConfig
) -> list[tuple[str, str, int]]:
    """Every topic config with its effective value and source, sorted by name."""
    rows: list[tuple[str, str, int]] = []
    for name in sorted(TOPIC_CONFIG_NAMES):
        if name in overrides:
            rows.append((name, overrides[name], ConfigSource.TOPIC_CONFIG))
            continue
        synonym = TOPIC_CONFIG_SYNONYMS.get(name)
        if synonym is not None and synonym in broker.explicit:
            rows.append((name, broker.topic_default(name) or "", ConfigSource.STATIC_BROKER_CONFIG))
        elif synonym is not None:
            rows.append((name, broker.topic_default(name) or "", ConfigSource.DEFAULT_CONFIG))
        else:
            rows.append((name, PASSIVE_TOPIC_CONFIGS[name], ConfigSource.DEFAULT_CONFIG))
    return rows
