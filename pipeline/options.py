"""The data source's options, by the names and rules of Spark's own Kafka source.

Pure parsing and checking (no IO, no Spark): what a user typed becomes a `ReadOptions`, or a
`PipelineError` saying which option is wrong and why, before any cluster is contacted. Option
names are case-insensitive, as Spark's are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.protocol.constants import EARLIEST, LATEST

if TYPE_CHECKING:
    from security.client import ClientSecurity

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "OffsetSpec",
    "PipelineError",
    "ReadOptions",
    "SecurityProps",
    "Subscription",
    "WriteOptions",
    "check_write_schema",
    "client_security_of",
    "parse_bool",
    "parse_read_options",
    "parse_write_options",
    "security_options",
]

# Spark's per-partition JSON uses Kafka's ListOffsets sentinels: EARLIEST (-2) and LATEST (-1).


class PipelineError(Exception):
    """A job cannot go on: bad options, a missing topic, data lost, a cluster out of reach.
    The message names the option, or the topic, partition and offset."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """Exactly one of Spark's three ways to name partitions."""

    topics: tuple[str, ...] = ()  # subscribe
    pattern: re.Pattern[str] | None = None  # subscribePattern
    assign: tuple[tuple[str, int], ...] = ()  # assign


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """`earliest`, `latest`, or per-partition offsets (-2 earliest, -1 latest), or timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamps" | "timestamp"
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # offsets or timestamps
    timestamp: int = -1  # kind "timestamp": one timestamp for every partition


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    request_timeout_s: float = 30.0
    max_partition_fetch_bytes: int = 1024 * 1024  # Kafka's max.partition.fetch.bytes default
    security: SecurityProps = ()


# The Kafka client's security keys, as Spark's Kafka source takes them (`kafka.security.protocol`,
# `kafka.sasl.*`, `kafka.ssl.*`), without the prefix: plain pairs, so options travel to Spark's
# workers as they are (a TLS context does not pickle); each process builds its client from them.
SecurityProps = tuple[tuple[str, str], ...]


def security_options(options: Mapping[str, str]) -> SecurityProps:
    """The security options among `options` (`kafka.security.protocol`, `kafka.ssl.*`,
    `kafka.sasl.*`; names case-insensitive), checked as Causeway's client reads them: an unknown
    key or a file that cannot be read is refused here, before Spark starts. Raises PipelineError."""
    props = tuple(sorted((key.lower()[len("kafka."):], value) for key, value in options.items()
                         if key.lower().startswith(("kafka.security.", "kafka.ssl.", "kafka.sasl."))))
    client_security_of(props)
    return props


def client_security_of(props: SecurityProps) -> ClientSecurity | None:
    """The TLS and SASL settings of Causeway's client for `props`; None for none (plaintext).
    Raises PipelineError naming the option."""
    if not props:
        return None
    # Imported here: a job without security options does not load TLS and SCRAM in every process.
    from broker.config import ConfigError
    from security.client import client_security

    try:
        return client_security(dict(props), "the kafka.* options")
    except ConfigError as exc:
        raise PipelineError(str(exc)) from None


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise PipelineError(f"option {name} must be true or false, got {value!r}")


def _positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise PipelineError(f"option {name} must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise PipelineError(f"option {name} must be a positive integer, got {value!r}")
    return number


def parse_partition_json(name: str, text: str) -> dict[tuple[str, int], int]:
    """Spark's {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}} as {(topic, partition): number}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"option {name}: not JSON ({exc.msg} at char {exc.pos}): {text!r}") from None
    if not isinstance(data, dict):
        raise PipelineError(f'option {name}: expected {{"topic":{{"partition":offset}}}}, got {text!r}')
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise PipelineError(f"option {name}: topic {topic!r} must map partitions to numbers, got {parts!r}")
        for part, number in parts.items():
            try:
                partition = int(part)
            except ValueError:
                raise PipelineError(f"option {name}: topic {topic!r} has partition {part!r}, not a number") from None
            if isinstance(number, bool) or not isinstance(number, int):
                raise PipelineError(f"option {name}: {topic}-{partition} has {number!r}, not an integer")
            out[(topic, partition)] = number
    return out


def _assign_json(text: str) -> tuple[tuple[str, int], ...]:
    """Spark's assign: {"topicA":[0,1],"topicB":[2,4]}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"option assign: not JSON ({exc.msg} at char {exc.pos}): {text!r}") from None
    if not isinstance(data, dict) or not data:
        raise PipelineError(f'option assign: expected {{"topic":[partitions]}}, got {text!r}')
    out: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise PipelineError(f"option assign: topic {topic!r} must list partition numbers, got {parts!r}")
        out.extend((topic, p) for p in parts)
    return tuple(dict.fromkeys(out))


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise PipelineError(
            "exactly one of the options subscribe, subscribePattern or assign must be given"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise PipelineError(f"option subscribe names no topic: {value!r}")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            return Subscription(pattern=re.compile(value))
        except re.error as exc:
            raise PipelineError(f"option subscribePattern: bad regular expression {value!r}: {exc}") from None
    return Subscription(assign=_assign_json(value))


def _offsets(opts: Mapping[str, str], which: str) -> OffsetSpec:
    name = f"{which}Offsets"
    # Spark's precedence: {which}Timestamp, then {which}OffsetsByTimestamp, then {which}Offsets.
    if f"{which}timestamp" in opts:
        try:
            return OffsetSpec("timestamp", timestamp=int(opts[f"{which}timestamp"]))
        except ValueError:
            raise PipelineError(f"option {which}Timestamp must be milliseconds since the epoch, "
                                f"got {opts[f'{which}timestamp']!r}") from None
    if f"{which}offsetsbytimestamp" in opts:
        return OffsetSpec("timestamps", parse_partition_json(f"{which}OffsetsByTimestamp",
                                                             opts[f"{which}offsetsbytimestamp"]))
    raw = opts.get(name.lower())
    default = "earliest" if which == "starting" else "latest"
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        # Spark's rules for batch queries: a batch cannot start at the end nor end at the start.
        if which == "starting" and kind == "latest":
            raise PipelineError("option startingOffsets: starting offset can't be latest for batch queries")
        if which == "ending" and kind == "earliest":
            raise PipelineError("option endingOffsets: ending offset can't be earliest for batch queries")
        return OffsetSpec(kind)
    offsets = parse_partition_json(name, text)
    for (topic, partition), offset in offsets.items():
        if which == "starting" and offset == LATEST:
            raise PipelineError(f"option startingOffsets: {topic}-{partition}: starting offset can't be latest (-1) "
                                "for batch queries")
        if which == "ending" and offset == EARLIEST:
            raise PipelineError(f"option endingOffsets: {topic}-{partition}: ending offset can't be earliest (-2) "
                                "for batch queries")
        if offset < EARLIEST:
            raise PipelineError(f"option {name}: {topic}-{partition}: offset {offset} is neither an offset nor "
                                "-2 (earliest) nor -1 (latest)")
    return OffsetSpec("offsets", offsets)


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a batch read's options; raises PipelineError naming the first bad one."""
    opts = {k.lower(): v for k, v in options.items()}
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise PipelineError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
    min_partitions = None
    if "minpartitions" in opts:
        min_partitions = _positive_int("minPartitions", opts["minpartitions"])
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise PipelineError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    timeout_ms = _positive_int("kafka.request.timeout.ms", opts.get("kafka.request.timeout.ms", "30000"))
    fetch_bytes = _positive_int("kafka.max.partition.fetch.bytes",
                                opts.get("kafka.max.partition.fetch.bytes", str(1024 * 1024)))
    return ReadOptions(
        bootstrap=bootstrap,
        subscription=_subscription(opts),
        starting=_offsets(opts, "starting"),
        ending=_offsets(opts, "ending"),
        min_partitions=min_partitions,
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        timestamp_strategy=strategy,
        request_timeout_s=timeout_ms / 1000,
        max_partition_fetch_bytes=fetch_bytes,
        security=security_options(opts),
    )


# kafka.compression.type: the codec numbers a batch's attributes carry (broker.protocol.records.Compression).
_COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Bytes of records per produced batch (broker.client.batching.DEFAULT_BATCH_BYTES, under Kafka's
# default max.message.bytes); not imported from there, as importing broker.client costs a second
# in every Python process Spark starts for planning.
DEFAULT_BATCH_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap: str
    topic: str | None = None
    compression: int = 0  # none
    request_timeout_s: float = 30.0
    batch_bytes: int = DEFAULT_BATCH_BYTES
    security: SecurityProps = ()


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = {k.lower(): v for k, v in options.items()}
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise PipelineError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
    codec = opts.get("kafka.compression.type", "none").strip().lower()
    if codec not in _COMPRESSION:
        raise PipelineError(f"option kafka.compression.type must be one of {', '.join(_COMPRESSION)}, got {codec!r}")
    if parse_bool("kafka.enable.idempotence", opts.get("kafka.enable.idempotence", "true")) is False:
        raise PipelineError("option kafka.enable.idempotence=false is not offered: the writer always produces "
                            "idempotently (acks=all)")
    try:
        timeout_ms = int(opts.get("kafka.request.timeout.ms", "30000"))
        batch_bytes = int(opts.get("kafka.batch.size", str(DEFAULT_BATCH_BYTES)))
    except ValueError as exc:
        raise PipelineError(f"option kafka.request.timeout.ms / kafka.batch.size: {exc}") from None
    if timeout_ms <= 0 or batch_bytes <= 0:
        raise PipelineError("options kafka.request.timeout.ms and kafka.batch.size must be positive")
    topic = opts.get("topic", "").strip() or None
    return WriteOptions(bootstrap, topic, _COMPRESSION[codec], timeout_ms / 1000, batch_bytes, security_options(opts))


def check_write_schema(fields: Mapping[str, str], opts: WriteOptions) -> None:
    """Spark's Kafka sink checks, by column name and Spark's simple type names (binary, string,
    int, array<struct<key:string,value:binary>>). Raises PipelineError for the first wrong one."""
    if "value" not in fields:
        raise PipelineError("required attribute 'value' not found")
    if fields["value"] not in ("binary", "string"):
        raise PipelineError(f"value attribute type must be a string or binary, got {fields['value']}")
    if "key" in fields and fields["key"] not in ("binary", "string"):
        raise PipelineError(f"key attribute type must be a string or binary, got {fields['key']}")
    if opts.topic is None:
        if "topic" not in fields:
            raise PipelineError("topic option required when no 'topic' attribute is present; use the topic option "
                                "to set one for every row")
        if fields["topic"] != "string":
            raise PipelineError(f"topic attribute type must be a string, got {fields['topic']}")
    if "partition" in fields and fields["partition"] != "int":
        raise PipelineError(f"partition attribute type must be an int, got {fields['partition']}")
    if "headers" in fields and fields["headers"] != "array<struct<key:string,value:binary>>":
        raise PipelineError(f"headers attribute type must be array<struct<key:string,value:binary>>, "
                            f"got {fields['headers']}")
