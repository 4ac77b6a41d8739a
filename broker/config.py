"""Broker configuration by Kafka's names and defaults.

A broker is configured the way Kafka is: a ``server.properties``-style file plus ``key=value``
overrides, using Kafka's key names and Kafka's defaults. The result is one frozen
:class:`BrokerConfig`, built once at start-up.

Keys that Kafka knows but Causeway has no use for (thread-pool sizes, socket buffer sizes, ...)
are accepted and reported by :func:`ignored_keys`, so an existing ``server.properties`` works
unchanged. Any other unknown key is an error naming the key, with a suggestion when one is close.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.address import parse_host_port

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "ListenerSpec",
    "StartupError",
    "TOPIC_CONFIG_SYNONYMS",
    "PASSIVE_TOPIC_CONFIGS",
    "load_properties",
    "parse_listeners",
]

LONG_MAX = 9223372036854775807


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key."""


class StartupError(RuntimeError):
    """The broker cannot start on what it found (a damaged metadata file, a data dir of another
    broker): the message names the file, what is wrong and what the operator can do."""


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One entry of ``listeners`` or ``advertised.listeners``: ``NAME://host:port``."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)$")


def parse_listeners(key: str, value: str) -> tuple[ListenerSpec, ...]:
    """Parse a comma-separated listener list such as ``PLAINTEXT://:9092,WAN://10.0.0.1:9093``.

    Raises ConfigError naming ``key`` for a malformed entry or a repeated listener name.
    """
    specs: list[ListenerSpec] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _LISTENER_RE.match(entry)
        if m is None:
            raise ConfigError(f"{key}: '{entry}' is not of the form NAME://host:port")
        port = int(m["port"])
        if port > 65535:
            raise ConfigError(f"{key}: port {port} in '{entry}' is out of range")
        specs.append(ListenerSpec(m["name"].upper(), m["host"].strip("[]"), port))
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}: listener name {name} appears more than once")
    if not specs:
        raise ConfigError(f"{key}: no listener given")
    return tuple(specs)


def _parse_bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"{key}: expected true or false, got '{value}'")


def _int_parser(low: int, high: int = LONG_MAX) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got '{value}'") from None
        if not low <= number <= high:
            raise ConfigError(f"{key}: {number} is outside [{low}, {high}]")
        return number

    return parse


def _choice_parser(*choices: str) -> Callable[[str, str], str]:
    def parse(key: str, value: str) -> str:
        if value.strip() not in choices:
            raise ConfigError(f"{key}: '{value}' is not one of {', '.join(choices)}")
        return value.strip()

    return parse


def _str(key: str, value: str) -> str:
    return value.strip()


def _host_port(key: str, value: str) -> str:
    try:
        parse_host_port(value.strip(), key)
    except ValueError:
        raise ConfigError(f"{key}: '{value}' is not of the form HOST:PORT") from None
    return value.strip()


def _cleanup_policy(key: str, value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{key}: '{value}' must be delete, compact or both")
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    parse: Callable[[str, str], Any]
    default: str | None
    field: str


# Every key Causeway honours: Kafka's name, how to parse it, Kafka's default (as text, parsed like
# user input so defaults obey the same rules), and the BrokerConfig field it fills.
_KEYS: tuple[_Key, ...] = (
    _Key("node.id", _int_parser(-1, 2**31 - 1), "0", "broker_id"),
    _Key("listeners", _str, "PLAINTEXT://:9092", "listeners_text"),
    _Key("advertised.listeners", _str, None, "advertised_listeners_text"),
    _Key(
        "listener.security.protocol.map",
        _str,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "listener_security_protocol_map_text",
    ),
    _Key("inter.broker.listener.name", _str, None, "inter_broker_listener_name"),
    _Key("broker.rack", _str, None, "rack"),
    _Key("log.dirs", _str, "/tmp/kafka-logs", "log_dirs_text"),
    _Key("num.partitions", _int_parser(1, 2**31 - 1), "1", "num_partitions"),
    # Partition bounds (KIP-578's names; Kafka's default is unbounded, Causeway's is not: every
    # partition holds an open segment file and memory). A CreateTopics or CreatePartitions that
    # would pass them is refused with POLICY_VIOLATION.
    _Key("max.broker.partitions", _int_parser(1, 2**31 - 1), "10000", "max_broker_partitions"),
    _Key("max.partitions", _int_parser(1, 2**31 - 1), str(2**31 - 1), "max_partitions"),
    _Key("max.partitions.per.request", _int_parser(1, 2**31 - 1), "5000", "max_partitions_per_request"),
    _Key("default.replication.factor", _int_parser(1, 32767), "1", "default_replication_factor"),
    _Key("auto.create.topics.enable", _parse_bool, "true", "auto_create_topics_enable"),
    _Key("delete.topic.enable", _parse_bool, "true", "delete_topic_enable"),
    _Key("log.segment.bytes", _int_parser(14, 2**31 - 1), "1073741824", "log_segment_bytes"),
    _Key("log.roll.ms", _int_parser(1), str(168 * 3600 * 1000), "log_roll_ms"),
    _Key("log.index.size.max.bytes", _int_parser(4, 2**31 - 1), "10485760", "log_index_size_max_bytes"),
    _Key("log.index.interval.bytes", _int_parser(0, 2**31 - 1), "4096", "log_index_interval_bytes"),
    _Key("log.retention.ms", _int_parser(-1), str(168 * 3600 * 1000), "log_retention_ms"),
    _Key("log.retention.bytes", _int_parser(-1), "-1", "log_retention_bytes"),
    _Key("log.retention.check.interval.ms", _int_parser(1), "300000", "log_retention_check_interval_ms"),
    _Key("log.flush.interval.messages", _int_parser(1), str(LONG_MAX), "log_flush_interval_messages"),
    _Key("log.flush.interval.ms", _int_parser(0), str(LONG_MAX), "log_flush_interval_ms"),
    _Key("log.flush.scheduler.interval.ms", _int_parser(0), str(LONG_MAX), "log_flush_scheduler_interval_ms"),
    _Key(
        "log.flush.offset.checkpoint.interval.ms",
        _int_parser(0, 2**31 - 1),
        "60000",
        "log_flush_offset_checkpoint_interval_ms",
    ),
    _Key(
        "log.message.timestamp.type",
        _choice_parser("CreateTime", "LogAppendTime"),
        "CreateTime",
        "log_message_timestamp_type",
    ),
    # How far a CreateTime record's timestamp may lie before or after the broker's clock
    # (KIP-937; the after default is Kafka 4.0's); the difference key (removed in Kafka 4.0,
    # still honoured) applies to a side left at its default.
    _Key("log.message.timestamp.before.max.ms", _int_parser(0), str(LONG_MAX),
         "log_message_timestamp_before_max_ms"),
    _Key("log.message.timestamp.after.max.ms", _int_parser(0), "3600000",
         "log_message_timestamp_after_max_ms"),
    _Key("log.message.timestamp.difference.max.ms", _int_parser(0), str(LONG_MAX),
         "log_message_timestamp_difference_max_ms"),
    _Key("log.cleanup.policy", _cleanup_policy, "delete", "log_cleanup_policy"),
    _Key("log.cleaner.delete.retention.ms", _int_parser(0), "86400000", "log_cleaner_delete_retention_ms"),
    _Key("log.cleaner.enable", _parse_bool, "true", "log_cleaner_enable"),
    _Key("log.cleaner.backoff.ms", _int_parser(0), "15000", "log_cleaner_backoff_ms"),
    _Key("message.max.bytes", _int_parser(0, 2**31 - 1), "1048588", "message_max_bytes"),
    _Key("min.insync.replicas", _int_parser(1, 2**31 - 1), "1", "min_insync_replicas"),
    _Key("compression.type", _str, "producer", "compression_type"),
    _Key("socket.request.max.bytes", _int_parser(1, 2**31 - 1), "104857600", "socket_request_max_bytes"),
    # Kafka's default is -1 (unbounded). Causeway bounds the bytes held for requests that are
    # still arriving, across all connections, so that many clients each announcing a huge frame
    # cannot exhaust memory; 0 picks twice socket.request.max.bytes.
    _Key("queued.max.request.bytes", _int_parser(-1), "0", "queued_max_request_bytes"),
    _Key("connections.max.idle.ms", _int_parser(-1), "600000", "connections_max_idle_ms"),
    # Causeway's own (Kafka has no such bound): once a request's first bytes are in, the rest
    # must arrive within this, or the connection is closed; -1 turns it off.
    _Key("causeway.request.arrival.timeout.ms", _int_parser(-1), "60000", "request_arrival_timeout_ms"),
    # Causeway's own: repeated per-connection warnings are logged once per window, then summarised.
    _Key("causeway.log.repeat.window.ms", _int_parser(1), "60000", "log_repeat_window_ms"),
    _Key("fetch.max.bytes", _int_parser(1024, 2**31 - 1), "57671680", "fetch_max_bytes"),
    _Key("cluster.id", _str, None, "cluster_id"),
    # The group coordinator (consumer groups and committed offsets).
    _Key("offsets.topic.num.partitions", _int_parser(1, 2**31 - 1), "50", "offsets_topic_num_partitions"),
    _Key("offsets.topic.segment.bytes", _int_parser(1, 2**31 - 1), "104857600", "offsets_topic_segment_bytes"),
    _Key("offsets.retention.minutes", _int_parser(1, 2**31 - 1), "10080", "offsets_retention_minutes"),
    _Key("offsets.retention.check.interval.ms", _int_parser(1), "600000", "offsets_retention_check_interval_ms"),
    _Key("offset.metadata.max.bytes", _int_parser(0, 2**31 - 1), "4096", "offset_metadata_max_bytes"),
    _Key("group.initial.rebalance.delay.ms", _int_parser(0, 2**31 - 1), "3000", "group_initial_rebalance_delay_ms"),
    _Key("group.min.session.timeout.ms", _int_parser(0, 2**31 - 1), "6000", "group_min_session_timeout_ms"),
    _Key("group.max.session.timeout.ms", _int_parser(0, 2**31 - 1), "1800000", "group_max_session_timeout_ms"),
    _Key("group.max.size", _int_parser(1, 2**31 - 1), str(2**31 - 1), "group_max_size"),
    # Causeway's own keys (no Kafka equivalent), under a prefix of their own. HOST:PORT where the
    # broker serves Prometheus metrics over HTTP (/metrics); unset: no metrics endpoint.
    _Key("causeway.metrics.listener", _host_port, None, "metrics_listener"),
)

_KEY_BY_NAME = {k.name: k for k in _KEYS}

# Kafka's older names for the same settings: a file may use either.
_ALIASES = {
    "broker.id": "node.id",
    "log.dir": "log.dirs",
    "log.roll.hours": "log.roll.ms",
    "log.retention.minutes": "log.retention.ms",
    "log.retention.hours": "log.retention.ms",
}
_ALIAS_SCALE = {
    "log.roll.hours": 3_600_000,
    "log.retention.hours": 3_600_000,
    "log.retention.minutes": 60_000,
}

# Kafka keys that are valid in a server.properties but have no effect here. They are accepted
# so existing files work, and listed at start-up so nobody believes they took effect.
_IGNORED_KAFKA_KEYS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "zookeeper.session.timeout.ms",
        "log.cleaner.threads",
        "log.preallocate",
        "auto.leader.rebalance.enable",
        "controlled.shutdown.enable",
        "unclean.leader.election.enable",
        "replica.lag.time.max.ms",
        "replica.fetch.max.bytes",
        "process.roles",
        "controller.quorum.voters",
        "controller.listener.names",
    }
)

# Topic-level config name -> the broker key that supplies its default (Kafka's "synonyms"), as
# DescribeConfigs reports them. Topic configs without a broker-wide key are listed with None.
TOPIC_CONFIG_SYNONYMS: dict[str, str | None] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.ms": "log.roll.ms",
}

# Topic configs Kafka defines that Causeway stores and reports but does not act on yet, with
# Kafka's defaults. Accepting them matters: tools that copy topic configs between clusters (a
# mirror, a migration script) send them all.
PASSIVE_TOPIC_CONFIGS: dict[str, str] = {
    # Codec levels (KIP-390): they matter only when a broker recompresses, which Causeway does not.
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "file.delete.delay.ms": "60000",
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "message.downconversion.enable": "true",
    # Deprecated in Kafka 3.0 and ignored there (the format is always v2), removed in 4.0.
    "message.format.version": "3.0-IV1",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "segment.jitter.ms": "0",
    "unclean.leader.election.enable": "false",
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's configuration, parsed and checked. Build it with :meth:`from_properties`."""

    broker_id: int
    listeners_text: str
    advertised_listeners_text: str | None
    listener_security_protocol_map_text: str
    inter_broker_listener_name: str | None
    rack: str | None
    log_dirs_text: str
    num_partitions: int
    max_broker_partitions: int
    max_partitions: int
    max_partitions_per_request: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_index_size_max_bytes: int
    log_index_interval_bytes: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_message_timestamp_type: str
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_message_timestamp_difference_max_ms: int
    log_cleanup_policy: str
    log_cleaner_delete_retention_ms: int
    log_cleaner_enable: bool
    log_cleaner_backoff_ms: int
    message_max_bytes: int
    min_insync_replicas: int
    compression_type: str
    socket_request_max_bytes: int
    queued_max_request_bytes: int
    connections_max_idle_ms: int
    request_arrival_timeout_ms: int
    log_repeat_window_ms: int
    fetch_max_bytes: int
    cluster_id: str | None
    offsets_topic_num_partitions: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offset_metadata_max_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    metrics_listener: str | None
    # What the user actually set, by canonical key, for DescribeConfigs (STATIC_BROKER_CONFIG).
    explicit: Mapping[str, str]
    listeners: tuple[ListenerSpec, ...]
    advertised_listeners: tuple[ListenerSpec, ...]
    security_protocols: Mapping[str, str]

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build a config from Kafka-named keys.

        Raises ConfigError for an unknown key (with a close match when there is one), a value
        that does not parse, or listeners that contradict each other.
        """
        canonical: dict[str, str] = {}
        given = {raw_key.strip(): raw_value for raw_key, raw_value in props.items()}
        for key, value in given.items():
            if key in _ALIASES or key in _IGNORED_KAFKA_KEYS:
                continue
            if key not in _KEY_BY_NAME:
                raise ConfigError(_unknown_key_message(key))
            canonical[key] = value
        # An older alias applies only where the precise key is absent; _ALIASES lists the
        # more precise alias first (minutes before hours), as Kafka resolves them.
        for alias, target in _ALIASES.items():
            if alias in given and target not in canonical:
                value = given[alias]
                scale = _ALIAS_SCALE.get(alias)
                if scale is not None and value.strip() != "-1":
                    value = str(_int_parser(0)(alias, value) * scale)
                canonical[target] = value
        values: dict[str, Any] = {}
        for entry in _KEYS:
            text = canonical.get(entry.name, entry.default)
            values[entry.field] = None if text is None else entry.parse(entry.name, text)

        listeners = parse_listeners("listeners", values["listeners_text"])
        advertised_text = values["advertised_listeners_text"]
        advertised = (
            parse_listeners("advertised.listeners", advertised_text) if advertised_text else listeners
        )
        protocols = _parse_protocol_map(values["listener_security_protocol_map_text"])
        listener_names = {spec.name for spec in listeners}
        for spec in listeners:
            if spec.name not in protocols:
                raise ConfigError(
                    f"listeners: listener {spec.name} has no entry in listener.security.protocol.map"
                )
        for spec in advertised:
            if spec.name not in listener_names:
                raise ConfigError(
                    f"advertised.listeners: {spec.name} is not one of the listeners "
                    f"({', '.join(sorted(listener_names))})"
                )
        ibl = values["inter_broker_listener_name"]
        if ibl is not None and ibl.upper() not in listener_names:
            raise ConfigError(f"inter.broker.listener.name: {ibl} is not one of the listeners")
        if values["queued_max_request_bytes"] == 0:
            values["queued_max_request_bytes"] = 2 * values["socket_request_max_bytes"]
        queued = values["queued_max_request_bytes"]
        if queued != -1 and queued < values["socket_request_max_bytes"]:
            raise ConfigError(
                "queued.max.request.bytes: must be at least socket.request.max.bytes "
                f"({values['socket_request_max_bytes']}) so that one maximal request fits"
            )
        return cls(
            **values,
            explicit=dict(canonical),
            listeners=listeners,
            advertised_listeners=advertised,
            security_protocols=protocols,
        )

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(Path(p.strip()) for p in self.log_dirs_text.split(",") if p.strip())

    def advertised_for(self, listener_name: str) -> ListenerSpec:
        """The address clients of ``listener_name`` are told to use."""
        for spec in self.advertised_listeners:
            if spec.name == listener_name:
                return spec
        for spec in self.listeners:
            if spec.name == listener_name:
                return spec
        raise KeyError(listener_name)

    def value_text(self, key: str) -> str | None:
        """A broker key's effective value as text, as DescribeConfigs reports it."""
        spec = _KEY_BY_NAME[key]
        value = getattr(self, spec.field)
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def topic_default(self, topic_key: str) -> str | None:
        """The broker-wide default of a topic-level config key (``retention.ms`` ...)."""
        synonym = TOPIC_CONFIG_SYNONYMS[topic_key]
        return None if synonym is None else self.value_text(synonym)

    def topic_defaults(self) -> dict[str, str]:
        """Every topic-level config key Causeway acts on, with the broker-wide default."""
        out: dict[str, str] = {}
        for key in TOPIC_CONFIG_SYNONYMS:
            value = self.topic_default(key)
            if value is not None:
                out[key] = value
        return out


def ignored_keys(props: Mapping[str, str]) -> list[str]:
    """Keys of ``props`` that Kafka knows but Causeway does not act on."""
    return sorted(k.strip() for k in props if k.strip() in _IGNORED_KAFKA_KEYS)


def _unknown_key_message(key: str) -> str:
    known = list(_KEY_BY_NAME) + list(_ALIASES) + sorted(_IGNORED_KAFKA_KEYS)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{key}: unknown broker config{hint}"


def _parse_protocol_map(text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    allowed = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.strip().upper() not in allowed:
            raise ConfigError(
                f"listener.security.protocol.map: '{entry}' is not NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(sorted(allowed))}"
            )
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def load_properties(path: Path) -> dict[str, str]:
    """Read a Java-style ``.properties`` file (``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations).

    Raises ConfigError naming the file and line for a line that has no key.
    """
    props: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical.append((start, pending + stripped))
        pending = ""
    if pending:
        logical.append((start, pending))
    for number, text in logical:
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", text)
        if m is None:
            raise ConfigError(f"{path}:{number}: expected key=value, got '{text}'")
        props[m.group(1)] = m.group(2)
    return props


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """Parse ``key=value`` command-line overrides; raises ConfigError for one without '='."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override '{item}': expected key=value")
        out[key.strip()] = value
    return out
