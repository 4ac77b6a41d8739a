"""Broker configuration by Kafka's names and defaults.

A broker is configured the way Kafka is: a ``server.properties``-style file plus ``key=value``
overrides, using Kafka's key names and Kafka's defaults. The result is one frozen
:class:`BrokerConfig`, built once at start-up: a pydantic model whose fields carry Kafka's key as
their alias and, in their annotation, how that key's text is parsed and bounded, so each key is
named once.

Keys that Kafka knows but Causeway has no use for (thread-pool sizes, socket buffer sizes, ...)
are accepted and reported by :func:`ignored_keys`, so an existing ``server.properties`` works
unchanged. Any other unknown key is an error naming the key, with a suggestion when one is close.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from broker.address import format_host_port, parse_endpoint, parse_host_port
from broker.config_parsing import (
    INT_MAX,
    LONG_MAX,
    ConfigModel,
    Parse,
    Wording,
    boolean,
    choice,
    cleanup_policy,
    integer,
)

__all__ = [
    "BROKER_KEYS",
    "BrokerConfig",
    "ConfigError",
    "DYNAMIC_BROKER_KEYS",
    "IGNORED_DYNAMIC_KEYS",
    "ListenerSpec",
    "IGNORED_SSL_KEYS",
    "INTER_BROKER_SASL_MECHANISMS",
    "ListenerSecurity",
    "SASL_KEYS",
    "SECURITY_PROTOCOLS",
    "SaslConfig",
    "SslConfig",
    "StartupError",
    "TLS_VERSIONS",
    "TOPIC_CONFIG_SYNONYMS",
    "ZOOKEEPER_SSL_KEYS",
    "PASSIVE_TOPIC_CONFIGS",
    "load_properties",
    "parse_listeners",
]

class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key."""


# How a broker config refuses a value: the key first, as an operator reading a start-up error
# about server.properties looks for it.
_WORDING = Wording(
    refuse=lambda key, _text, reason: ConfigError(f"{key}: {reason}"),
    not_integer="expected an integer, got '{text}'",
    out_of_range="{number} is outside [{low}, {high}]",
    not_choice="'{text}' is not one of {choices}",
    not_boolean="expected true or false, got '{text}'",
    not_cleanup_policy="'{text}' must be delete, compact or both",
)


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
        return f"{self.name}://{format_host_port(self.host, self.port)}"


_LISTENER_NAME = re.compile(r"[A-Za-z0-9_]+")


def parse_listeners(key: str, value: str) -> tuple[ListenerSpec, ...]:
    """Parse a comma-separated listener list such as ``PLAINTEXT://:9092,WAN://10.0.0.1:9093``.

    Raises ConfigError naming ``key`` for a malformed entry or a repeated listener name.
    """
    specs: list[ListenerSpec] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            name, host, port = parse_endpoint(entry, key)
            if _LISTENER_NAME.fullmatch(name) is None:  # stricter than Kafka's: it names config keys
                raise ValueError(name)
        except ValueError:
            raise ConfigError(f"{key}: '{entry}' is not of the form NAME://host:port") from None
        specs.append(ListenerSpec(name.upper(), host, port))
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}: listener name {name} appears more than once")
    if not specs:
        raise ConfigError(f"{key}: no listener given")
    return tuple(specs)


def _str(key: str, value: str) -> str:
    return value.strip()


def _optional_listeners(key: str, value: str) -> tuple[ListenerSpec, ...] | None:
    return parse_listeners(key, value) if value.strip() else None


def _log_dirs(key: str, value: str) -> tuple[Path, ...]:
    return tuple(Path(p.strip()) for p in value.split(",") if p.strip())


def _host_port(key: str, value: str) -> str:
    try:
        parse_host_port(value.strip(), key)
    except ValueError:
        raise ConfigError(f"{key}: '{value}' is not of the form HOST:PORT") from None
    return value.strip()


# Kafka's older names for the same settings: a file may use either.
CONFIG_ALIASES = {
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

_LISTENER_PREFIX = "listener.name."
_ZOOKEEPER_SSL_PREFIX = "zookeeper.ssl."
# Kafka's ZooKeeper client TLS keys (besides zookeeper.ssl.client.enable, a field): each is the
# listener key of the same name after "zookeeper.", except the revocation switches.
ZOOKEEPER_SSL_KEYS = frozenset(f"zookeeper.ssl.{name}" for name in (
    "keystore.location", "keystore.password", "keystore.type", "truststore.location", "truststore.password",
    "truststore.type", "protocol", "enabled.protocols", "cipher.suites", "endpoint.identification.algorithm",
    "crl.enable", "ocsp.enable"))
_STORE_TYPE_BY_SUFFIX = {".pem": "PEM", ".crt": "PEM", ".p12": "PKCS12", ".pfx": "PKCS12", ".jks": "JKS"}


def _store_type_of(key: str, location: str) -> str:
    """A store's type from its file name's extension, as ZooKeeper's X509Util infers it."""
    kind = _STORE_TYPE_BY_SUFFIX.get(PurePath(location).suffix.lower())
    if kind is None:
        raise ConfigError(f"{key}: cannot tell the store type of {location} from its extension "
                          f"({', '.join(_STORE_TYPE_BY_SUFFIX)}); set the matching .type key (PEM or PKCS12)")
    return kind

# Kafka keys that are valid in a server.properties but have no effect here. They are accepted
# so existing files work, and listed at start-up so nobody believes they took effect.
IGNORED_KAFKA_KEYS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "log.cleaner.threads",
        "log.preallocate",
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

# Keys Causeway honours that Kafka updates dynamically (DynamicLogConfig: every broker key behind
# a topic config except the message format; LogCleaner's backoff; DynamicThreadPool's replica
# fetchers; unclean.leader.election.enable, which the controller reads at each election). Here
# rather than beside the AlterConfigs handler: the ZooKeeper controller checks them too, and the
# controller does not import the server.
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    {key for key in TOPIC_CONFIG_SYNONYMS.values() if key is not None}
    | {"log.cleaner.backoff.ms", "num.replica.fetchers", "unclean.leader.election.enable"}
)
# Kafka's dynamic keys that Causeway accepts in server.properties and ignores: stored and
# described as set, with no effect (as their static values).
IGNORED_DYNAMIC_KEYS: frozenset[str] = frozenset(
    {"num.io.threads", "num.network.threads", "num.recovery.threads.per.data.dir", "background.threads",
     "log.cleaner.threads", "log.preallocate"}
)

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


def _int(low: int, high: int = LONG_MAX) -> Parse:
    return Parse(integer(_WORDING, low, high))


def _text(default: str) -> Any:
    """A default given as Kafka's text for a field that holds what it parses to: validation
    (validate_default) parses it like user input, so it is typed Any here."""
    return default


_STR = Parse(_str)
_BOOL = Parse(boolean(_WORDING))

# The values of authorizer.class.name that turn ACLs on (security/authorizer.py): Kafka's
# ZooKeeper-mode and KRaft-mode authorizers and the pre-2.4 name, so an operator's
# server.properties works unchanged.
AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


def _authorizer(key: str, value: str) -> str:
    name = value.strip()
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"{key}: {name!r} is not an authorizer Causeway has; set it to "
                          f"{AUTHORIZER_CLASS_NAMES[0]} (or {AUTHORIZER_CLASS_NAMES[2]}) for ACLs, or leave it empty")
    return name


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _security_protocol(key: str, text: str) -> str:
    protocol = text.strip().upper()  # Kafka reads the name in any case
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"{key}: '{text}' is not one of {', '.join(SECURITY_PROTOCOLS)}")
    return protocol


def _names(key: str, text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _tls_versions(key: str, text: str) -> tuple[str, ...]:
    versions = _names(key, text)
    unknown = [v for v in versions if v not in TLS_VERSIONS]
    if not versions or unknown:
        raise ConfigError(f"{key}: '{text}' must list TLS versions among {', '.join(TLS_VERSIONS)} "
                          "(older ones are insecure and refused)")
    return versions


# The TLS versions a listener may enable; Kafka's names. TLSv1 and TLSv1.1 are refused, as
# OpenSSL's and Java's current defaults refuse them.
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
_STORE_TYPES = ("JKS", "PKCS12", "PEM")
# Java-only SSL keys (JCA algorithm and provider names): accepted so existing server.properties
# files work, and without effect on OpenSSL.
IGNORED_SSL_KEYS = frozenset({"ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                              "ssl.secure.random.implementation", "ssl.provider"})


class SslConfig(ConfigModel):
    """A TLS listener's ``ssl.*`` configs, by Kafka's names and defaults: the broker-wide keys
    overlaid by the listener's own ``listener.name.<listener>.ssl.*`` keys. Build it with
    :meth:`BrokerConfig.ssl_for`; ``security/tls.py`` turns it into an SSL context."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    keystore_type: Annotated[str, Parse(choice(_WORDING, *_STORE_TYPES))] = Field(
        default="JKS", alias="ssl.keystore.type")
    keystore_location: Annotated[str | None, _STR] = Field(default=None, alias="ssl.keystore.location")
    # Secrets: never in a repr, a log line or DescribeConfigs.
    keystore_password: Annotated[str | None, _STR] = Field(default=None, alias="ssl.keystore.password", repr=False)
    key_password: Annotated[str | None, _STR] = Field(default=None, alias="ssl.key.password", repr=False)
    keystore_certificate_chain: Annotated[str | None, _STR] = Field(
        default=None, alias="ssl.keystore.certificate.chain")
    keystore_key: Annotated[str | None, _STR] = Field(default=None, alias="ssl.keystore.key", repr=False)
    truststore_type: Annotated[str, Parse(choice(_WORDING, *_STORE_TYPES))] = Field(
        default="JKS", alias="ssl.truststore.type")
    truststore_location: Annotated[str | None, _STR] = Field(default=None, alias="ssl.truststore.location")
    truststore_password: Annotated[str | None, _STR] = Field(
        default=None, alias="ssl.truststore.password", repr=False)
    truststore_certificates: Annotated[str | None, _STR] = Field(default=None, alias="ssl.truststore.certificates")
    client_auth: Annotated[str, Parse(choice(_WORDING, "none", "requested", "required"))] = Field(
        default="none", alias="ssl.client.auth")
    enabled_protocols: Annotated[tuple[str, ...], Parse(_tls_versions, as_text=True)] = Field(
        default=_text("TLSv1.2,TLSv1.3"), alias="ssl.enabled.protocols")
    protocol: Annotated[str, Parse(choice(_WORDING, "TLS", *TLS_VERSIONS))] = Field(
        default="TLSv1.3", alias="ssl.protocol")
    # OpenSSL cipher names (or IANA names OpenSSL knows); empty: OpenSSL's secure defaults.
    cipher_suites: Annotated[tuple[str, ...], Parse(_names, as_text=True)] = Field(
        default=_text(""), alias="ssl.cipher.suites")
    endpoint_identification_algorithm: Annotated[str, Parse(choice(_WORDING, "https", ""))] = Field(
        default="https", alias="ssl.endpoint.identification.algorithm")
    # Kafka's rule syntax; checked when the listener starts (security/principal.py).
    principal_mapping_rules: Annotated[str, _STR] = Field(default="DEFAULT", alias="ssl.principal.mapping.rules")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SslConfig:
        """Raises ConfigError naming an unknown ``ssl.*`` key or a value that does not parse."""
        known = {field.alias for field in cls.model_fields.values() if field.alias is not None}
        for key in props:
            if key not in known and key not in IGNORED_SSL_KEYS:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"{key}: unknown SSL config{hint}")
        try:
            return cls.model_validate({k: v for k, v in props.items() if k in known})
        except ValidationError as exc:
            raise _config_error(exc) from None


# The broker-wide SASL keys; a listener's own are listener.name.<listener>.sasl.enabled.mechanisms
# and listener.name.<listener>.<mechanism in lower case>.sasl.jaas.config, as Kafka reads them.
SASL_KEYS = frozenset({"sasl.enabled.mechanisms"})
# What a broker's own client side can log in with to its peers (security/client.py speaks these).
INTER_BROKER_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LISTENER_KEY = re.compile(r"ssl\.[a-z.]+|sasl\.enabled\.mechanisms|[a-z0-9-]+\.sasl\.jaas\.config")


@dataclass(frozen=True)
class SaslConfig:
    """A SASL listener's mechanisms and, per mechanism, its JAAS config text (parsed and checked
    by ``security/sasl.py`` at start; kept as text here, out of reprs: it holds passwords)."""

    listener: str
    mechanisms: tuple[str, ...]
    jaas: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class ListenerSecurity:
    ssl: SslConfig | None
    sasl: SaslConfig | None


def _sasl_config(listener: str, props: Mapping[str, str]) -> SaslConfig:
    key = "sasl.enabled.mechanisms"
    mechanisms = _names(key, props.get(key, "GSSAPI"))
    if not mechanisms:
        raise ConfigError(f"{key}: listener {listener} is SASL and needs at least one mechanism")
    jaas = {}
    for mechanism in mechanisms:
        text = props.get(f"{mechanism.lower()}.sasl.jaas.config")
        if text is not None:
            jaas[mechanism] = text
    return SaslConfig(listener, mechanisms, jaas)


class BrokerConfig(ConfigModel):
    """The broker's configuration, parsed and checked. Build it with :meth:`from_properties`.

    Every field's alias is the Kafka key (Causeway's own keys under ``causeway.``) and its default
    is Kafka's, parsed like user input so defaults obey the same rules.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    broker_id: Annotated[int, _int(-1, INT_MAX)] = Field(default=0, alias="node.id")
    listeners: Annotated[tuple[ListenerSpec, ...], Parse(parse_listeners, as_text=True)] = Field(
        default=_text("PLAINTEXT://:9092"), alias="listeners")
    # Unset: clients are told the listeners' own addresses (see `advertised_listeners`).
    advertised: Annotated[tuple[ListenerSpec, ...] | None, Parse(_optional_listeners, as_text=True)] = Field(
        default=None, alias="advertised.listeners")
    security_protocols: Annotated[dict[str, str], Parse(lambda _key, text: _parse_protocol_map(text),
                                                         as_text=True)] = Field(
        default=_text("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
        alias="listener.security.protocol.map")
    inter_broker_listener_name: Annotated[str | None, _STR] = Field(default=None, alias="inter.broker.listener.name")
    # Kafka's default is PLAINTEXT; unset here so that setting it beside inter.broker.listener.name
    # can be refused, as Kafka refuses it (see `inter_broker_listener`).
    security_inter_broker_protocol: Annotated[str | None, Parse(_security_protocol)] = Field(
        default=None, alias="security.inter.broker.protocol")
    # Checked against the inter-broker listener once the listeners' SASL configs are known.
    sasl_mechanism_inter_broker_protocol: Annotated[str, _STR] = Field(
        default="GSSAPI", alias="sasl.mechanism.inter.broker.protocol")
    rack: Annotated[str | None, _STR] = Field(default=None, alias="broker.rack")
    log_dirs: Annotated[tuple[Path, ...], Parse(_log_dirs, as_text=True)] = Field(
        default=_text("/tmp/kafka-logs"), alias="log.dirs")
    num_partitions: Annotated[int, _int(1, INT_MAX)] = Field(default=1, alias="num.partitions")
    # Partition bounds (KIP-578's names; Kafka's default is unbounded, Causeway's is not: every
    # partition holds an open segment file and memory). A CreateTopics or CreatePartitions that
    # would pass them is refused with POLICY_VIOLATION.
    max_broker_partitions: Annotated[int, _int(1, INT_MAX)] = Field(default=10000, alias="max.broker.partitions")
    max_partitions: Annotated[int, _int(1, INT_MAX)] = Field(default=INT_MAX, alias="max.partitions")
    max_partitions_per_request: Annotated[int, _int(1, INT_MAX)] = Field(
        default=5000, alias="max.partitions.per.request")
    default_replication_factor: Annotated[int, _int(1, 32767)] = Field(default=1, alias="default.replication.factor")
    auto_create_topics_enable: Annotated[bool, _BOOL] = Field(default=True, alias="auto.create.topics.enable")
    delete_topic_enable: Annotated[bool, _BOOL] = Field(default=True, alias="delete.topic.enable")
    # How often a TLS listener looks at its keystore and truststore files for renewed ones
    # (Kafka reloads them on a dynamic config update; Causeway also when the files change).
    ssl_reload_check_interval_ms: Annotated[int, _int(100, INT_MAX)] = Field(
        default=30000, alias="causeway.ssl.reload.check.interval.ms")
    # ACLs (security/authorizer.py): on when authorizer.class.name names Kafka's authorizer.
    authorizer_class_name: Annotated[str, Parse(_authorizer)] = Field(default="", alias="authorizer.class.name")
    super_users: Annotated[str, _STR] = Field(default="", alias="super.users")
    allow_everyone_if_no_acl_found: Annotated[bool, _BOOL] = Field(default=False,
                                                                   alias="allow.everyone.if.no.acl.found")
    log_segment_bytes: Annotated[int, _int(14, INT_MAX)] = Field(default=1073741824, alias="log.segment.bytes")
    log_roll_ms: Annotated[int, _int(1)] = Field(default=168 * 3600 * 1000, alias="log.roll.ms")
    log_index_size_max_bytes: Annotated[int, _int(4, INT_MAX)] = Field(
        default=10485760, alias="log.index.size.max.bytes")
    log_index_interval_bytes: Annotated[int, _int(0, INT_MAX)] = Field(default=4096, alias="log.index.interval.bytes")
    log_retention_ms: Annotated[int, _int(-1)] = Field(default=168 * 3600 * 1000, alias="log.retention.ms")
    log_retention_bytes: Annotated[int, _int(-1)] = Field(default=-1, alias="log.retention.bytes")
    log_retention_check_interval_ms: Annotated[int, _int(1)] = Field(
        default=300000, alias="log.retention.check.interval.ms")
    log_flush_interval_messages: Annotated[int, _int(1)] = Field(default=LONG_MAX, alias="log.flush.interval.messages")
    log_flush_interval_ms: Annotated[int, _int(0)] = Field(default=LONG_MAX, alias="log.flush.interval.ms")
    log_flush_scheduler_interval_ms: Annotated[int, _int(0)] = Field(
        default=LONG_MAX, alias="log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=60000, alias="log.flush.offset.checkpoint.interval.ms")
    log_message_timestamp_type: Annotated[str, Parse(choice(_WORDING, "CreateTime", "LogAppendTime"))] = Field(
        default="CreateTime", alias="log.message.timestamp.type")
    # How far a CreateTime record's timestamp may lie before or after the broker's clock
    # (KIP-937; the after default is Kafka 4.0's); the difference key (removed in Kafka 4.0,
    # still honoured) applies to a side left at its default.
    log_message_timestamp_before_max_ms: Annotated[int, _int(0)] = Field(
        default=LONG_MAX, alias="log.message.timestamp.before.max.ms")
    log_message_timestamp_after_max_ms: Annotated[int, _int(0)] = Field(
        default=3600000, alias="log.message.timestamp.after.max.ms")
    log_message_timestamp_difference_max_ms: Annotated[int, _int(0)] = Field(
        default=LONG_MAX, alias="log.message.timestamp.difference.max.ms")
    log_cleanup_policy: Annotated[str, Parse(cleanup_policy(_WORDING))] = Field(
        default="delete", alias="log.cleanup.policy")
    log_cleaner_delete_retention_ms: Annotated[int, _int(0)] = Field(
        default=86400000, alias="log.cleaner.delete.retention.ms")
    log_cleaner_enable: Annotated[bool, _BOOL] = Field(default=True, alias="log.cleaner.enable")
    log_cleaner_backoff_ms: Annotated[int, _int(0)] = Field(default=15000, alias="log.cleaner.backoff.ms")
    message_max_bytes: Annotated[int, _int(0, INT_MAX)] = Field(default=1048588, alias="message.max.bytes")
    min_insync_replicas: Annotated[int, _int(1, INT_MAX)] = Field(default=1, alias="min.insync.replicas")
    compression_type: Annotated[str, _STR] = Field(default="producer", alias="compression.type")
    socket_request_max_bytes: Annotated[int, _int(1, INT_MAX)] = Field(
        default=104857600, alias="socket.request.max.bytes")
    # Kafka's default is -1 (unbounded). Causeway bounds the bytes held for requests that are
    # still arriving, across all connections, so that many clients each announcing a huge frame
    # cannot exhaust memory; 0 picks twice socket.request.max.bytes.
    queued_max_request_bytes: Annotated[int, _int(-1)] = Field(default=0, alias="queued.max.request.bytes")
    connections_max_idle_ms: Annotated[int, _int(-1)] = Field(default=600000, alias="connections.max.idle.ms")
    # SASL listeners: a failed authentication is answered this much later (slowing password
    # guessing), and what a client may send before it authenticates is bounded by the second.
    connection_failed_authentication_delay_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=100, alias="connection.failed.authentication.delay.ms")
    sasl_server_max_receive_size: Annotated[int, _int(1, INT_MAX)] = Field(
        default=524288, alias="sasl.server.max.receive.size")
    # Causeway's own (Kafka has no such bound): once a request's first bytes are in, the rest
    # must arrive within this, or the connection is closed; -1 turns it off.
    request_arrival_timeout_ms: Annotated[int, _int(-1)] = Field(
        default=60000, alias="causeway.request.arrival.timeout.ms")
    # Causeway's own: repeated per-connection warnings are logged once per window, then summarised.
    log_repeat_window_ms: Annotated[int, _int(1)] = Field(default=60000, alias="causeway.log.repeat.window.ms")
    fetch_max_bytes: Annotated[int, _int(1024, INT_MAX)] = Field(default=57671680, alias="fetch.max.bytes")
    cluster_id: Annotated[str | None, _STR] = Field(default=None, alias="cluster.id")
    # The group coordinator (consumer groups and committed offsets).
    offsets_topic_num_partitions: Annotated[int, _int(1, INT_MAX)] = Field(
        default=50, alias="offsets.topic.num.partitions")
    offsets_topic_segment_bytes: Annotated[int, _int(1, INT_MAX)] = Field(
        default=104857600, alias="offsets.topic.segment.bytes")
    offsets_retention_minutes: Annotated[int, _int(1, INT_MAX)] = Field(
        default=10080, alias="offsets.retention.minutes")
    offsets_retention_check_interval_ms: Annotated[int, _int(1)] = Field(
        default=600000, alias="offsets.retention.check.interval.ms")
    # How long a transaction marker's append (WriteTxnMarkers) waits for the ISR, as Kafka's
    # handleWriteTxnMarkersRequest uses request.timeout.ms.
    request_timeout_ms: Annotated[int, _int(0, INT_MAX)] = Field(default=30000, alias="request.timeout.ms")
    # How long a commit (or group write) waits for the ISR of its __consumer_offsets partition.
    offsets_commit_timeout_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=5000, alias="offsets.commit.timeout.ms")
    offset_metadata_max_bytes: Annotated[int, _int(0, INT_MAX)] = Field(default=4096, alias="offset.metadata.max.bytes")
    # The transaction coordinator and its log, `__transaction_state` (Kafka's names and defaults;
    # the replication factor is capped by the brokers registered when the topic is created).
    transaction_state_log_num_partitions: Annotated[int, _int(1, INT_MAX)] = Field(
        default=50, alias="transaction.state.log.num.partitions")
    transaction_state_log_replication_factor: Annotated[int, _int(1, 32767)] = Field(
        default=3, alias="transaction.state.log.replication.factor")
    transaction_state_log_min_isr: Annotated[int, _int(1, INT_MAX)] = Field(
        default=2, alias="transaction.state.log.min.isr")
    transaction_state_log_segment_bytes: Annotated[int, _int(1, INT_MAX)] = Field(
        default=104857600, alias="transaction.state.log.segment.bytes")
    transaction_max_timeout_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=900000, alias="transaction.max.timeout.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=10000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms")
    transactional_id_expiration_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=604800000, alias="transactional.id.expiration.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=3600000, alias="transaction.remove.expired.transaction.cleanup.interval.ms")
    # KIP-890: a partition leader asks the coordinator before a producer's first transactional
    # write to a partition (broker/server/txn_verification.py).
    transaction_partition_verification_enable: Annotated[bool, _BOOL] = Field(
        default=True, alias="transaction.partition.verification.enable")
    group_initial_rebalance_delay_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=3000, alias="group.initial.rebalance.delay.ms")
    group_min_session_timeout_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=6000, alias="group.min.session.timeout.ms")
    group_max_session_timeout_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=1800000, alias="group.max.session.timeout.ms")
    group_max_size: Annotated[int, _int(1, INT_MAX)] = Field(default=INT_MAX, alias="group.max.size")
    # Causeway's own keys (no Kafka equivalent), under a prefix of their own. HOST:PORT where the
    # broker serves Prometheus metrics over HTTP (/metrics); unset: no metrics endpoint.
    metrics_listener: Annotated[str | None, Parse(_host_port)] = Field(default=None, alias="causeway.metrics.listener")
    # ZooKeeper mode (unset zookeeper.connect: a standalone broker, metadata in its data dir).
    # HOST:PORT[,HOST:PORT...][/chroot], as Kafka's.
    zookeeper_connect: Annotated[str | None, _STR] = Field(default=None, alias="zookeeper.connect")
    zookeeper_session_timeout_ms: Annotated[int, _int(1, INT_MAX)] = Field(
        default=18000, alias="zookeeper.session.timeout.ms")
    # Unset: the session timeout, as Kafka.
    zookeeper_connection_timeout_ms: Annotated[int | None, _int(1, INT_MAX)] = Field(
        default=None, alias="zookeeper.connection.timeout.ms")
    # ZooKeeper over TLS: the zookeeper.ssl.* keys (stores, protocols) are read as the
    # listeners' ssl.* keys are (see `zookeeper_ssl`); these two say whether to use them.
    zookeeper_ssl_client_enable: Annotated[bool, _BOOL] = Field(default=False, alias="zookeeper.ssl.client.enable")
    # Java's socket class for ZooKeeper's client; Kafka requires the Netty one for TLS. Accepted
    # so server.properties files work unchanged: Causeway's ZooKeeper client is not Java.
    zookeeper_client_cnxn_socket: Annotated[str | None, _STR] = Field(default=None, alias="zookeeper.clientCnxnSocket")
    # Create znodes with ACLs: only this cluster's brokers (their identity to ZooKeeper) may write,
    # everyone may read, except credentials and broker configs, which only the brokers may read.
    zookeeper_set_acl: Annotated[bool, _BOOL] = Field(default=False, alias="zookeeper.set.acl")
    # Replication (followers, ISR).
    replica_lag_time_max_ms: Annotated[int, _int(1)] = Field(default=30000, alias="replica.lag.time.max.ms")
    replica_fetch_max_bytes: Annotated[int, _int(0, INT_MAX)] = Field(default=1048576, alias="replica.fetch.max.bytes")
    replica_fetch_wait_max_ms: Annotated[int, _int(0, INT_MAX)] = Field(default=500, alias="replica.fetch.wait.max.ms")
    replica_fetch_min_bytes: Annotated[int, _int(1, INT_MAX)] = Field(default=1, alias="replica.fetch.min.bytes")
    replica_fetch_backoff_ms: Annotated[int, _int(0, INT_MAX)] = Field(default=1000, alias="replica.fetch.backoff.ms")
    num_replica_fetchers: Annotated[int, _int(1, INT_MAX)] = Field(default=1, alias="num.replica.fetchers")
    # Fetch sessions (KIP-227) the broker keeps; 0: none, every fetch is a full one.
    max_incremental_fetch_session_cache_slots: Annotated[int, _int(0, INT_MAX)] = Field(
        default=1000, alias="max.incremental.fetch.session.cache.slots")
    # The controller.
    unclean_leader_election_enable: Annotated[bool, _BOOL] = Field(
        default=False, alias="unclean.leader.election.enable")
    # Capped by the brokers alive when the topic is created, as Kafka does.
    offsets_topic_replication_factor: Annotated[int, _int(1, 32767)] = Field(
        default=3, alias="offsets.topic.replication.factor")
    controlled_shutdown_enable: Annotated[bool, _BOOL] = Field(default=True, alias="controlled.shutdown.enable")
    controlled_shutdown_max_retries: Annotated[int, _int(0, INT_MAX)] = Field(
        default=3, alias="controlled.shutdown.max.retries")
    controlled_shutdown_retry_backoff_ms: Annotated[int, _int(0)] = Field(
        default=5000, alias="controlled.shutdown.retry.backoff.ms")
    auto_leader_rebalance_enable: Annotated[bool, _BOOL] = Field(default=True, alias="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: Annotated[int, _int(1)] = Field(
        default=300, alias="leader.imbalance.check.interval.seconds")
    leader_imbalance_per_broker_percentage: Annotated[int, _int(0, 100)] = Field(
        default=10, alias="leader.imbalance.per.broker.percentage")
    controller_socket_timeout_ms: Annotated[int, _int(0, INT_MAX)] = Field(
        default=30000, alias="controller.socket.timeout.ms")

    # What the user actually set, by canonical key, for DescribeConfigs (STATIC_BROKER_CONFIG).
    _explicit: dict[str, str] = PrivateAttr(default_factory=dict)
    # Dynamic broker configs (ZooKeeper mode: /config/brokers/<default> and /config/brokers/<id>),
    # by key; the fields above already hold their effect (see `with_dynamic`).
    _dynamic_default: dict[str, str] = PrivateAttr(default_factory=dict)
    _dynamic_broker: dict[str, str] = PrivateAttr(default_factory=dict)
    # ``ssl.*``, ``sasl.*`` and ``listener.name.<listener>.*`` as given, and each listener's TLS
    # and SASL configs built from them (checked at start: a bad key stops the broker before it listens).
    _security_props: dict[str, str] = PrivateAttr(default_factory=dict)
    _security: dict[str, ListenerSecurity] = PrivateAttr(default_factory=dict)
    # ``zookeeper.ssl.*`` as given (passwords among them: kept out of DescribeConfigs), and the
    # TLS configs built from them when zookeeper.ssl.client.enable is on.
    _zookeeper_ssl_props: dict[str, str] = PrivateAttr(default_factory=dict)
    _zookeeper_ssl: SslConfig | None = PrivateAttr(default=None)

    @field_validator("queued_max_request_bytes")
    @classmethod
    def _queued_holds_one_request(cls, value: int, info: ValidationInfo) -> int:
        largest = info.data.get("socket_request_max_bytes")
        if largest is None:  # that key failed to parse and is reported instead
            return value
        if value == 0:
            return 2 * int(largest)
        if value != -1 and value < largest:
            raise ConfigError(
                "queued.max.request.bytes: must be at least socket.request.max.bytes "
                f"({largest}) so that one maximal request fits"
            )
        return value

    @model_validator(mode="after")
    def _listeners_agree(self) -> BrokerConfig:
        listener_names = {spec.name for spec in self.listeners}
        for spec in self.listeners:
            if spec.name not in self.security_protocols:
                raise ConfigError(
                    f"listeners: listener {spec.name} has no entry in listener.security.protocol.map"
                )
        for spec in self.advertised_listeners:
            if spec.name not in listener_names:
                raise ConfigError(
                    f"advertised.listeners: {spec.name} is not one of the listeners "
                    f"({', '.join(sorted(listener_names))})"
                )
        ibl = self.inter_broker_listener_name
        if ibl is not None and self.security_inter_broker_protocol is not None:
            raise ConfigError("security.inter.broker.protocol: only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol may be set")
        if ibl is not None and ibl.upper() not in listener_names:
            raise ConfigError(f"inter.broker.listener.name: {ibl} is not one of the listeners")
        protocol = self.security_inter_broker_protocol
        if protocol is not None and protocol not in listener_names:
            # Kafka's rule: the protocol names the listener (a listener called SSL, ...).
            raise ConfigError(f"security.inter.broker.protocol: {protocol} names no listener (listeners: "
                              f"{', '.join(sorted(listener_names))}); name a listener {protocol} or set "
                              "inter.broker.listener.name instead")
        return self

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build a config from Kafka-named keys.

        Raises ConfigError for an unknown key (with a close match when there is one), a value
        that does not parse, or listeners that contradict each other.
        """
        canonical: dict[str, str] = {}
        given = {raw_key.strip(): raw_value for raw_key, raw_value in props.items()}
        security_props: dict[str, str] = {}
        zookeeper_ssl_props: dict[str, str] = {}
        for key, value in given.items():
            if key in CONFIG_ALIASES or key in IGNORED_KAFKA_KEYS:
                continue
            if key.startswith("ssl.") or key in SASL_KEYS or key.startswith(_LISTENER_PREFIX):
                security_props[key] = value
                continue
            if key.startswith(_ZOOKEEPER_SSL_PREFIX) and key not in _FIELD_BY_KEY:
                zookeeper_ssl_props[key] = value
                continue
            if key not in _FIELD_BY_KEY:
                raise ConfigError(_unknown_key_message(key))
            canonical[key] = value
        # An older alias applies only where the precise key is absent; CONFIG_ALIASES lists the
        # more precise alias first (minutes before hours), as Kafka resolves them.
        for alias, target in CONFIG_ALIASES.items():
            if alias in given and target not in canonical:
                value = given[alias]
                scale = _ALIAS_SCALE.get(alias)
                if scale is not None and value.strip() != "-1":
                    value = str(integer(_WORDING, 0)(alias, value) * scale)
                canonical[target] = value
        try:
            config = cls.model_validate(canonical)
        except ValidationError as exc:
            raise _config_error(exc) from None
        config._explicit = dict(canonical)
        config._security_props = security_props
        config._security = config._listener_security(security_props)
        config._zookeeper_ssl_props = zookeeper_ssl_props
        config._zookeeper_ssl = config._zookeeper_tls(zookeeper_ssl_props)
        return config

    def _zookeeper_tls(self, props: Mapping[str, str]) -> SslConfig | None:
        """The TLS configs of this broker's ZooKeeper client, from Kafka's ``zookeeper.ssl.*``
        keys (``zookeeper.ssl.keystore.location`` is ``ssl.keystore.location`` for ZooKeeper, and
        so on); None unless zookeeper.ssl.client.enable is on. A store's type, when unset, comes
        from its file's extension, as ZooKeeper's client infers it."""
        for key in props:
            if key not in ZOOKEEPER_SSL_KEYS:
                close = difflib.get_close_matches(key, sorted(ZOOKEEPER_SSL_KEYS), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"{key}: unknown ZooKeeper TLS config{hint}")
        for key in ("zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable"):
            if key in props and boolean(_WORDING)(key, props[key]):
                raise ConfigError(f"{key}: certificate revocation checks are not supported for ZooKeeper "
                                  "connections; set it to false (revoke by removing the CA from the truststore)")
        if self.zookeeper_set_acl and not self.zookeeper_ssl_client_enable:
            raise ConfigError("zookeeper.set.acl: znode ACLs need an identity in ZooKeeper: set "
                              "zookeeper.ssl.client.enable=true with zookeeper.ssl.keystore.location (a client "
                              "certificate ZooKeeper's x509 provider authenticates); Causeway has no ZooKeeper SASL")
        if not self.zookeeper_ssl_client_enable:
            return None
        ssl_props = {key.removeprefix("zookeeper."): value for key, value in props.items()
                     if key not in ("zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable")}
        ssl_props.setdefault("ssl.protocol", "TLSv1.2")  # ZooKeeper's default, not the listeners'
        if "ssl.endpoint.identification.algorithm" in ssl_props:  # Kafka's default is spelled HTTPS
            ssl_props["ssl.endpoint.identification.algorithm"] = (
                ssl_props["ssl.endpoint.identification.algorithm"].strip().lower())
        for store in ("keystore", "truststore"):
            location = ssl_props.get(f"ssl.{store}.location")
            if location is not None and f"ssl.{store}.type" not in ssl_props:
                ssl_props[f"ssl.{store}.type"] = _store_type_of(f"zookeeper.ssl.{store}.location", location)
        if self.zookeeper_set_acl and "ssl.keystore.location" not in ssl_props:
            raise ConfigError("zookeeper.set.acl: znode ACLs need the broker's client certificate for ZooKeeper: "
                              "set zookeeper.ssl.keystore.location")
        try:
            return SslConfig.from_properties(ssl_props)
        except ConfigError as exc:
            raise ConfigError(f"zookeeper.{exc}") from None

    @property
    def zookeeper_ssl(self) -> SslConfig | None:
        """How this broker's ZooKeeper client speaks TLS (None: plaintext); see `_zookeeper_tls`."""
        return self._zookeeper_ssl

    def _listener_security(self, props: Mapping[str, str]) -> dict[str, ListenerSecurity]:
        """Each listener's TLS and SASL configs: the broker-wide ``ssl.*`` and ``sasl.*`` keys
        overlaid by its own ``listener.name.<listener>.*`` (Kafka's lower-case listener name)."""
        names = {spec.name for spec in self.listeners}
        per_listener: dict[str, dict[str, str]] = {}
        for key, value in props.items():
            if not key.startswith(_LISTENER_PREFIX):
                continue
            listener, dot, rest = key[len(_LISTENER_PREFIX):].partition(".")
            if not dot or not _LISTENER_KEY.fullmatch(rest):
                raise ConfigError(f"{key}: unknown broker config (per-listener keys are listener.name.<listener>."
                                  "ssl.*, .sasl.enabled.mechanisms and .<mechanism>.sasl.jaas.config)")
            if listener.upper() not in names:
                raise ConfigError(f"{key}: {listener} is not one of the listeners ({', '.join(sorted(names))})")
            per_listener.setdefault(listener.upper(), {})[rest] = value
        shared = {k: v for k, v in props.items() if not k.startswith(_LISTENER_PREFIX)}
        security: dict[str, ListenerSecurity] = {}
        for spec in self.listeners:
            protocol = self.security_protocols[spec.name]
            merged = {**shared, **per_listener.get(spec.name, {})}
            prefix = f"{_LISTENER_PREFIX}{spec.name.lower()}."
            own = per_listener.get(spec.name, {})
            for key in own:
                wants = "SSL" if key.startswith("ssl.") else "SASL"
                if wants not in protocol:
                    raise ConfigError(f"{prefix}{key}: listener {spec.name} is {protocol}, not {wants}")
            ssl = (SslConfig.from_properties({k: v for k, v in merged.items() if k.startswith("ssl.")})
                   if protocol in ("SSL", "SASL_SSL") else None)
            sasl = _sasl_config(spec.name, merged) if protocol.startswith("SASL_") else None
            security[spec.name] = ListenerSecurity(ssl, sasl)
        if self.zookeeper_connect is not None:
            self._check_inter_broker_sasl(security[self.inter_broker_listener].sasl)
        return security

    def _check_inter_broker_sasl(self, sasl: SaslConfig | None) -> None:
        """A SASL inter-broker listener: its peers are logged in to with
        sasl.mechanism.inter.broker.protocol, which this broker's client side must speak and the
        listener must enable (Kafka's check). Only in ZooKeeper mode: a standalone broker never
        dials a peer."""
        if sasl is None:
            return
        key = "sasl.mechanism.inter.broker.protocol"
        mechanism = self.sasl_mechanism_inter_broker_protocol
        if mechanism not in INTER_BROKER_SASL_MECHANISMS:
            raise ConfigError(f"{key}: {mechanism}: inter-broker listener {sasl.listener} is SASL and brokers log "
                              f"in to each other with {', '.join(INTER_BROKER_SASL_MECHANISMS)} only (set it "
                              "to one of them)")
        if mechanism not in sasl.mechanisms:
            raise ConfigError(f"{key}: {mechanism} must be one of the mechanisms the inter-broker listener "
                              f"{sasl.listener} enables ({', '.join(sasl.mechanisms)}): its peers serve no other")

    @property
    def inter_broker_listener(self) -> str:
        """The listener followers fetch from and the controller sends to (in the listeners' upper
        case): inter.broker.listener.name, else the listener security.inter.broker.protocol names
        (Kafka's rule; PLAINTEXT when unset). With neither set and no listener called PLAINTEXT,
        where Kafka refuses to start, Causeway takes the first listener."""
        if self.inter_broker_listener_name is not None:
            return self.inter_broker_listener_name.upper()
        if self.security_inter_broker_protocol is not None:
            return self.security_inter_broker_protocol
        names = [spec.name for spec in self.listeners]
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    @property
    def inter_broker_protocol(self) -> str:
        """The security protocol of the inter-broker listener."""
        return self.security_protocols[self.inter_broker_listener]

    def ssl_for(self, listener_name: str) -> SslConfig | None:
        """The TLS configs of listener ``listener_name``; None unless it is SSL or SASL_SSL."""
        found = self._security.get(listener_name)
        return found.ssl if found else None

    def sasl_for(self, listener_name: str) -> SaslConfig | None:
        """The SASL configs of listener ``listener_name``; None unless it is SASL_*."""
        found = self._security.get(listener_name)
        return found.sasl if found else None

    @property
    def explicit(self) -> Mapping[str, str]:
        """The keys the user set (aliases resolved to their canonical key), with their text."""
        return self._explicit

    @property
    def dynamic_default(self) -> Mapping[str, str]:
        """Cluster-wide dynamic broker configs in effect (DYNAMIC_DEFAULT_BROKER_CONFIG)."""
        return self._dynamic_default

    @property
    def dynamic_broker(self) -> Mapping[str, str]:
        """This broker's dynamic configs in effect (DYNAMIC_BROKER_CONFIG)."""
        return self._dynamic_broker

    def with_dynamic(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> BrokerConfig:
        """This broker's static config overlaid with dynamic configs, Kafka's precedence: the
        broker's own dynamic value, then the cluster-wide dynamic default, then the static value.
        ``self`` may itself carry dynamic layers: they are replaced, the static layer stays.

        Raises ConfigError naming a key whose value does not parse.
        """
        config = BrokerConfig.from_properties({**self._explicit, **self._security_props, **default, **per_broker})
        config._explicit = dict(self._explicit)
        config._dynamic_default = dict(default)
        config._dynamic_broker = dict(per_broker)
        return config

    @property
    def advertised_listeners(self) -> tuple[ListenerSpec, ...]:
        """``advertised.listeners``, or the listeners themselves when it is unset."""
        return self.advertised or self.listeners

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
        """A broker key's effective value as text, as DescribeConfigs reports it.

        Raises KeyError for a key that is not a broker key Causeway honours.
        """
        name = _FIELD_BY_KEY[key]
        field = type(self).model_fields[name]
        if any(isinstance(meta, Parse) and meta.as_text for meta in field.metadata):
            text = self._explicit.get(key, field.default)
            return None if text is None else str(text).strip()
        value = getattr(self, name)
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


# Kafka key -> BrokerConfig field, and every key Causeway honours in the model's order.
_FIELD_BY_KEY: dict[str, str] = {field.alias or name: name for name, field in BrokerConfig.model_fields.items()}
BROKER_KEYS: tuple[str, ...] = tuple(_FIELD_BY_KEY)


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem pydantic collected, as the ConfigError our parsers raised (its message
    names the key), or one naming the key pydantic stopped at."""
    first = exc.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    key = ".".join(str(part) for part in first["loc"]) or "config"
    return ConfigError(f"{key}: {first['msg']}")


def ignored_keys(props: Mapping[str, str]) -> list[str]:
    """Keys of ``props`` that Kafka knows but Causeway does not act on."""
    return sorted(k.strip() for k in props if k.strip() in IGNORED_KAFKA_KEYS)


def _unknown_key_message(key: str) -> str:
    known = list(BROKER_KEYS) + list(CONFIG_ALIASES) + sorted(IGNORED_KAFKA_KEYS)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{key}: unknown broker config{hint}"


def _parse_protocol_map(text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    allowed = set(SECURITY_PROTOCOLS)
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
