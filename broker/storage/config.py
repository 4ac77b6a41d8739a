"""A partition log's configuration: Kafka's topic-level config keys with Kafka's defaults.

One pydantic model names each setting once: the field is ours, its validation alias is Kafka's
topic config name, its annotation says how a Kafka text value is parsed and bounded. (A validation
alias rather than an alias: code builds a LogConfig by field name, and type checkers then see the
field names as the constructor's keywords.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import ConfigDict, Field

from broker.config_parsing import LONG_MAX, ConfigModel, Parse, Wording, choice, cleanup_policy, integer
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.validation import DEFAULT_AFTER_MAX_MS, effective_timestamp_bounds

__all__ = ["LogConfig", "is_metadata_version"]

# Kafka 3.x's MetadataVersion releases, each with how many inter-broker protocol steps it has
# (`2.8-IV0`, `2.8-IV1`); 0 for the releases before those steps existed. message.format.version
# (deprecated in 3.0, removed in 4.0) takes any of their names, as Kafka 3.x's validator does.
_RELEASE_STEPS: dict[str, int] = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3,
    "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2,
    "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}
_METADATA_VERSIONS = frozenset(name for release, steps in _RELEASE_STEPS.items()
                               for name in (release, *(f"{release}-IV{i}" for i in range(steps))))


def is_metadata_version(value: str) -> bool:
    """Whether Kafka 3.x takes `value` as a MetadataVersion (MetadataVersion.fromVersionString):
    a release (`0.10.0`, `2.8`) or one of its steps (`0.10.0-IV1`, `3.0-IV1`), followed by any
    further dotted segments, which Kafka ignores: a 0.x release is read from the first three
    segments, a later one from the first two, so `0.10.0.0` and `2.8.1` name 0.10.0 and 2.8."""
    text = value.strip()  # Kafka's ConfigDef trims a string value
    parts = text.split(".")
    while len(parts) > 1 and not parts[-1]:
        parts.pop()  # as Java's String.split, which drops trailing empty strings
    keep = 3 if text.startswith("0.") else 2
    return (text if keep >= len(parts) else ".".join(parts[:keep])) in _METADATA_VERSIONS


# How a topic config refuses a value: Kafka's ConfigException text, which clients show as the
# INVALID_CONFIG error message of a CreateTopics or AlterConfigs.
_WORDING = Wording(
    refuse=lambda key, text, reason: KafkaError(ErrorCode.INVALID_CONFIG,
                                                f"Invalid value {text} for configuration {key}: {reason}"),
    not_integer="not a number",
    out_of_range="must be at least {low}",
    not_choice="must be one of {choices}",
    not_boolean="Expected value to be either true or false",
    not_cleanup_policy="must be compact, delete or both",
)


def _long(low: int) -> Parse:
    return Parse(integer(_WORDING, low))


def _choice(*allowed: str) -> Parse:
    return Parse(choice(_WORDING, *allowed))


# Named here: in LogConfig's body the field cleanup_policy hides the parser's name.
_CLEANUP_POLICY = Parse(cleanup_policy(_WORDING, sort=True))


class LogConfig(ConfigModel):
    """Built from Kafka-named topic configs (:meth:`from_topic_configs`) or, in code, by field name."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, validate_default=False)

    segment_bytes: Annotated[int, _long(14)] = Field(default=1073741824, validation_alias="segment.bytes")
    segment_ms: Annotated[int, _long(1)] = Field(default=604800000, validation_alias="segment.ms")
    segment_index_bytes: Annotated[int, _long(4)] = Field(default=10485760, validation_alias="segment.index.bytes")
    index_interval_bytes: Annotated[int, _long(0)] = Field(default=4096, validation_alias="index.interval.bytes")
    retention_ms: Annotated[int, _long(-1)] = Field(default=604800000, validation_alias="retention.ms")
    retention_bytes: Annotated[int, _long(-1)] = Field(default=-1, validation_alias="retention.bytes")
    flush_messages: Annotated[int, _long(1)] = Field(default=LONG_MAX, validation_alias="flush.messages")
    flush_ms: Annotated[int, _long(0)] = Field(default=LONG_MAX, validation_alias="flush.ms")
    max_message_bytes: Annotated[int, _long(0)] = Field(default=1048588, validation_alias="max.message.bytes")
    message_timestamp_type: Annotated[str, _choice("CreateTime", "LogAppendTime")] = Field(
        default="CreateTime", validation_alias="message.timestamp.type")
    message_timestamp_before_max_ms: Annotated[int, _long(0)] = Field(
        default=LONG_MAX, validation_alias="message.timestamp.before.max.ms")
    # Kafka 4.0's default: one hour.
    message_timestamp_after_max_ms: Annotated[int, _long(0)] = Field(
        default=DEFAULT_AFTER_MAX_MS, validation_alias="message.timestamp.after.max.ms")
    # Deprecated by KIP-937, still honoured.
    message_timestamp_difference_max_ms: Annotated[int, _long(0)] = Field(
        default=LONG_MAX, validation_alias="message.timestamp.difference.max.ms")
    cleanup_policy: Annotated[str, _CLEANUP_POLICY] = Field(
        default="delete", validation_alias="cleanup.policy")
    delete_retention_ms: Annotated[int, _long(0)] = Field(default=86400000, validation_alias="delete.retention.ms")
    min_insync_replicas: Annotated[int, _long(1)] = Field(default=1, validation_alias="min.insync.replicas")
    compression_type: Annotated[str, _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")] = Field(
        default="producer", validation_alias="compression.type")
    # Causeway's own: the link-mode mirror whose read-only copy this log is (empty: a normal topic).
    # Its log keeps copied batches out of the idempotent-producer state (broker/storage/link_copy.py).
    mirror_name: str = Field(default="", validation_alias="causeway.mirror.name")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], defaults: LogConfig) -> LogConfig:
        """`defaults` overlaid with the Kafka-named keys of `configs` that logs act on.

        Keys logs do not act on are ignored here (the caller validates names). Raises
        KafkaError(INVALID_CONFIG) naming the key whose value does not parse.
        """
        given = {_FIELD_OF_KEY[key]: text for key, text in configs.items() if key in _FIELD_OF_KEY}
        if not given:
            return defaults
        return cls.model_validate({**defaults.model_dump(), **given})

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


# Field -> the Kafka topic config name it is set by, and back: the names a log acts on.
_KEY_OF_FIELD: dict[str, str] = {name: field.validation_alias for name, field in LogConfig.model_fields.items()
                                 if isinstance(field.validation_alias, str)}
_FIELD_OF_KEY: dict[str, str] = {key: name for name, key in _KEY_OF_FIELD.items()}
assert len(_FIELD_OF_KEY) == len(LogConfig.model_fields)
