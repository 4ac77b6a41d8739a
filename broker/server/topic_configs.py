"""Topic config overrides as a client sees them: described as Kafka describes them (sources and
synonyms), and the mirror-topic rules. Which names a topic takes and the check of their values
are in broker/storage/topic_configs.py, where the controllers check them too."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from broker.config import PASSIVE_TOPIC_CONFIGS, TOPIC_CONFIG_SYNONYMS, BrokerConfig
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_PAUSED, MIRROR_STATE_CONFIG, ConfigSource
from broker.protocol.errors import ErrorCode, KafkaError
from broker.storage.topic_configs import CAUSEWAY_TOPIC_CONFIGS, TOPIC_CONFIG_NAMES

__all__ = ["REMOVED_IN_KAFKA_4", "Synonym", "broker_source", "broker_synonyms", "check_mirror_name_change",
           "describe_topic_configs", "mirror_name", "mirror_paused", "refuse_if_mirror", "refuse_pause_outside_mirror",
           "topic_config_synonyms"]


def mirror_name(configs: Mapping[str, str]) -> str | None:
    """The link-mode mirror that owns a topic with these overrides; None for a normal topic."""
    return configs.get(MIRROR_NAME_CONFIG) or None


def mirror_paused(configs: Mapping[str, str]) -> bool:
    """Whether a mirror topic with these overrides is paused (`causeway mirror pause`)."""
    return configs.get(MIRROR_STATE_CONFIG) == MIRROR_PAUSED


def refuse_if_mirror(topic: str, configs: Mapping[str, str]) -> None:
    """Raise INVALID_REQUEST when ``topic`` is a mirror topic: only its mirror writes to it
    (LinkAppend), and its log is a copy of the source's, so neither Produce nor DeleteRecords
    may change it. INVALID_REQUEST is not retriable: a producer fails at once, with the message."""
    owner = mirror_name(configs)
    if owner is not None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {topic} is a read-only mirror topic written by mirror {owner}; promote it to "
                         f"write to it (causeway mirror promote)")


def refuse_pause_outside_mirror(topic: str, configs: Mapping[str, str | None], what_it_is: str = "is not one") -> None:
    """Refuse (INVALID_CONFIG) `causeway.mirror.state=PAUSED` in `configs` without a mirror
    name beside it: only a mirror topic is paused (at creation, or by AlterConfigs)."""
    if configs.get(MIRROR_STATE_CONFIG) == MIRROR_PAUSED and not configs.get(MIRROR_NAME_CONFIG):
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"{MIRROR_STATE_CONFIG}={MIRROR_PAUSED} is only for a mirror topic, and topic {topic} "
                         f"{what_it_is} ({MIRROR_NAME_CONFIG} unset)")


def check_mirror_name_change(topic: str, current: Mapping[str, str], new: Mapping[str, str | None]) -> None:
    """Refuse (INVALID_CONFIG) making an existing topic a mirror topic, or another mirror's.

    A topic becomes a mirror topic only when the mirror creates it (its log then starts empty,
    at the source's offsets); removing the key is allowed: that is promotion."""
    before = mirror_name(current)
    after = new.get(MIRROR_NAME_CONFIG) or None  # empty is unset, as at creation
    refuse_pause_outside_mirror(topic, new, "will not be one" if before is not None else "is not one")
    if after is None or after == before:
        return
    if before is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"{MIRROR_NAME_CONFIG} cannot be set on existing topic {topic}: a topic becomes a mirror "
                         f"topic only when a link-mode mirror creates it, or at a failback's old primary "
                         f"(causeway mirror truncate-and-restore / reverse-and-start)")
    raise KafkaError(ErrorCode.INVALID_CONFIG,
                     f"topic {topic} is the mirror topic of mirror {before}: {MIRROR_NAME_CONFIG} cannot be "
                     f"changed to {after!r} (a topic becomes a mirror topic only when created, or by a "
                     f"failback); delete the config to promote the topic to a normal topic")


# A synonym as DescribeConfigs lists it: (name, value, source).
Synonym = tuple[str, str, int]

# The broker keys behind one broker config, in Kafka's order (DynamicBrokerConfig's synonyms):
# the precise key first, then the coarser units that supply it when it is unset.
_BROKER_KEY_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}
# Kafka's defaults where they differ from the effective default Causeway applies: these precise
# keys have none in Kafka (null), their coarse units carry it. DescribeConfigs lists no
# DEFAULT_CONFIG synonym for a null default.
_KAFKA_BROKER_DEFAULTS: dict[str, str | None] = {
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": "168",
    "log.roll.ms": None,
    "log.roll.hours": "168",
    "log.roll.jitter.ms": None,
    "log.roll.jitter.hours": "0",
    "log.flush.interval.ms": None,
}
# Topic configs Causeway keeps passively whose default comes from a broker key in Kafka, so that
# DescribeConfigs names it (ServerTopicConfigSynonyms). Those without one list no broker synonym.
_PASSIVE_BROKER_SYNONYMS: dict[str, str] = {
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "preallocate": "log.preallocate",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
# Topic configs Kafka 4.0 removed. Still accepted and kept (a topic copied from a 3.x cluster
# carries them, and the deprecated timestamp key is still honoured), but listed only when set,
# as a Kafka 4.x broker never lists them.
REMOVED_IN_KAFKA_4 = frozenset({"message.downconversion.enable", "message.format.version",
                                "message.timestamp.difference.max.ms"})


@functools.cache
def _defaults() -> BrokerConfig:
    """A broker with nothing set: the source of every DEFAULT_CONFIG value."""
    return BrokerConfig.from_properties({})


def _broker_default(key: str) -> str | None:
    if key in _KAFKA_BROKER_DEFAULTS:
        return _KAFKA_BROKER_DEFAULTS[key]
    try:
        return _defaults().value_text(key)
    except KeyError:
        return None


def broker_synonyms(key: str, broker: BrokerConfig) -> list[Synonym]:
    """The synonyms of broker key ``key`` as Kafka lists them: the statically set keys, then the
    defaults, each in synonym order, dropping those before ``key`` itself (a coarse unit's
    default is listed only after a value of ``key``)."""
    keys = _BROKER_KEY_SYNONYMS.get(key, (key,))
    found: list[Synonym] = []
    # Kafka's precedence, each source over every synonym key: this broker's dynamic value, the
    # cluster-wide dynamic default, server.properties, the default.
    for layer, source in ((broker.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (broker.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (broker.explicit, ConfigSource.STATIC_BROKER_CONFIG)):
        found += [(k, layer[k].strip(), source) for k in keys if k in layer]
    for k in keys:
        default = _broker_default(k)
        if default is not None:
            found.append((k, default, ConfigSource.DEFAULT_CONFIG))
    while found and found[0][0] != key:
        found.pop(0)
    return found


def broker_source(key: str, broker: BrokerConfig) -> int:
    """Where broker key ``key``'s effective value comes from (DescribeConfigs' config_source)."""
    for layer, source in ((broker.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (broker.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (broker.explicit, ConfigSource.STATIC_BROKER_CONFIG)):
        if key in layer:
            return source
    return ConfigSource.DEFAULT_CONFIG


def topic_config_synonyms(name: str, overrides: Mapping[str, str], broker: BrokerConfig) -> list[Synonym]:
    """The synonyms of topic config ``name``: the topic's override, then the broker keys that
    supply its default (``DEFAULT_CONFIG:log.cleanup.policy=delete``), as Kafka lists them."""
    found: list[Synonym] = []
    if name in overrides:
        found.append((name, overrides[name], ConfigSource.TOPIC_CONFIG))
    broker_key = TOPIC_CONFIG_SYNONYMS.get(name) or _PASSIVE_BROKER_SYNONYMS.get(name)
    if broker_key is not None:
        if name in TOPIC_CONFIG_SYNONYMS:
            found += broker_synonyms(broker_key, broker)
        else:  # a broker key Causeway does not take: Kafka's default stands behind it, if any
            default = _KAFKA_BROKER_DEFAULTS.get(broker_key, PASSIVE_TOPIC_CONFIGS[name])
            if default is not None:
                found.append((broker_key, default, ConfigSource.DEFAULT_CONFIG))
    return found


def describe_topic_configs(
    overrides: Mapping[str, str], broker: BrokerConfig
) -> list[tuple[str, str, int]]:
    """Every topic config with its effective value and source, sorted by name."""
    rows: list[tuple[str, str, int]] = []
    for name in sorted(TOPIC_CONFIG_NAMES):
        if (name in REMOVED_IN_KAFKA_4 or name in CAUSEWAY_TOPIC_CONFIGS) and name not in overrides:
            continue
        if name in overrides:
            rows.append((name, overrides[name], ConfigSource.TOPIC_CONFIG))
            continue
        synonym = TOPIC_CONFIG_SYNONYMS.get(name)
        if synonym is not None:
            rows.append((name, broker.topic_default(name) or "", broker_source(synonym, broker)))
        else:
            rows.append((name, PASSIVE_TOPIC_CONFIGS[name], ConfigSource.DEFAULT_CONFIG))
    return rows
