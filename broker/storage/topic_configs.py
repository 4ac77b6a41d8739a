"""Topic config overrides: which names a topic takes, and the check of their values.

Both the controllers (a topic's configs are checked before they are stored, and again when the
standalone controller replays them) and the request handlers (CreateTopics, AlterConfigs) check
overrides here; how they are described to a client (DescribeConfigs' sources and synonyms) is
the server's business (broker/server/topic_configs.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.config import PASSIVE_TOPIC_CONFIGS, TOPIC_CONFIG_SYNONYMS, BrokerConfig
from broker.log_limits import limiter
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_PAUSED, MIRROR_PROMOTING, MIRROR_STATE_CONFIG
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.config import LogConfig, is_metadata_version

__all__ = ["CAUSEWAY_TOPIC_CONFIGS", "MIRROR_STATES", "TOPIC_CONFIG_NAMES", "validate_topic_configs"]

# Causeway's own topic configs: listed by DescribeConfigs only when set (a Kafka tool never
# sees a key it does not know on an ordinary topic).
CAUSEWAY_TOPIC_CONFIGS = frozenset({MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG})
#: The values causeway.mirror.state takes (unset is ACTIVE).
MIRROR_STATES = frozenset({"ACTIVE", MIRROR_PAUSED, MIRROR_PROMOTING})
TOPIC_CONFIG_NAMES = frozenset(TOPIC_CONFIG_SYNONYMS) | frozenset(PASSIVE_TOPIC_CONFIGS) | CAUSEWAY_TOPIC_CONFIGS

log = logging.getLogger(__name__)
_limited = limiter(log)  # what a request's configs make us say: once per window, then counted


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
        if name == "message.format.version":
            _check_message_format_version(value)
        if name == MIRROR_NAME_CONFIG and not value:
            continue  # empty: not a mirror topic, nothing to keep
        if name == MIRROR_STATE_CONFIG and value not in MIRROR_STATES:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                                       f"must be one of {', '.join(sorted(MIRROR_STATES))}")
        out[name] = value
    acted_on = {k: v for k, v in out.items() if k in TOPIC_CONFIG_SYNONYMS}
    # Parsing into a LogConfig (the overrides over the broker's topic defaults) is the one check
    # of every value; it raises INVALID_CONFIG.
    LogConfig.from_topic_configs({**broker.topic_defaults(), **acted_on}, LogConfig())
    return out


def _check_message_format_version(value: str) -> None:
    """Kafka 3.x accepts any release name here and ignores it (inter-broker protocol 3.0 and
    later always write the v2 format); Kafka 4.0 removed the key. Do as 3.x did: refuse what is
    not a release, keep the rest, say it has no effect."""
    if not is_metadata_version(value):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration message.format.version: "
                                                   f"Version {value} is not a valid version")
    _limited.warning("message.format.version ignored",
                     "Topic configuration message.format.version with value `%s` is ignored: the message format "
                     "is always v2 (as with inter-broker protocol 3.0 and later). This configuration is "
                     "deprecated and was removed in Apache Kafka 4.0.", value)
