"""A partition log's configuration: Kafka's topic-level config keys with Kafka's defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.validation import DEFAULT_AFTER_MAX_MS, effective_timestamp_bounds

__all__ = ["LogConfig"]

LONG_MAX = 2**63 - 1


def _long(lo: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {text} for configuration {key}: "
                             "not a number") from None
        if value < lo or value > LONG_MAX:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {text} for configuration {key}: must be at least {lo}")
        return value
    return parse


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        value = text.strip()
        if value not in allowed:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {text} for configuration {key}: "
                             f"must be one of {', '.join(allowed)}")
        return value
    return parse


def _cleanup_policy(key: str, text: str) -> str:
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {text} for configuration {key}: must be compact, delete or both")
    return ",".join(parts)


# Topic config key -> (field, parser). The one table that maps Kafka's names to ours.
_PARSERS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "segment.bytes": ("segment_bytes", _long(14)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _long(4)),
    "index.interval.bytes": ("index_interval_bytes", _long(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-1)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "max.message.bytes": ("max_message_bytes", _long(0)),
    "message.timestamp.type": ("message_timestamp_type", _choice("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _long(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _long(0)),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _long(0)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.insync.replicas": ("min_insync_replicas", _long(1)),
    "compression.type": ("compression_type",
                         _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = DEFAULT_AFTER_MAX_MS  # Kafka 4.0's: one hour
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated by KIP-937, still honoured
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_insync_replicas: int = 1
    compression_type: str = "producer"

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], defaults: LogConfig) -> LogConfig:
        """`defaults` overlaid with the Kafka-named keys of `configs` that logs act on.

        Keys logs do not act on are ignored here (the caller validates names). Raises
        KafkaError(INVALID_CONFIG) naming the key whose value does not parse.
        """
        changes: dict[str, Any] = {}
        for key, text in configs.items():
            entry = _PARSERS.get(key)
            if entry is not None:
                name, parse = entry
                changes[name] = parse(key, text)
        return replace(defaults, **changes)

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far before the broker's clock a CreateTime timestamp may be (KIP-937: the
        difference key applies when the before key is left at its default)."""
        return effective_timestamp_bounds(self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms,
                                          self.message_timestamp_difference_max_ms)[0]

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far after the broker's clock a CreateTime timestamp may be."""
        return effective_timestamp_bounds(self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms,
                                          self.message_timestamp_difference_max_ms)[1]

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")


assert {name for name, _ in _PARSERS.values()} == {f.name for f in fields(LogConfig)}
