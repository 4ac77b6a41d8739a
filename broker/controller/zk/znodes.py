"""Kafka's ZooKeeper layout: znode paths, and their JSON as Kafka (ZooKeeper mode, 2.8-3.x) writes it.

Someone who knows Kafka reads these znodes with zkCli and finds what Kafka would have written
(ZkData.scala); a Kafka tool reading them parses them. Every ``encode_*`` returns the bytes to
store, every ``parse_*(path, data)`` reads them back strictly and raises ``ZnodeError`` naming the
znode and what is wrong with it (garbage, a missing key, a wrong type, a value out of range, more
than ``MAX_ZNODE_BYTES``). Unknown keys are ignored, as Kafka's decoders ignore them, so a znode
written by a newer Kafka still parses.

    /cluster/id                                   {"version":"1","id":"<22-char base64 uuid>"}
    /controller                                   {"version":2,"brokerid":1,"timestamp":"..","kraftControllerEpoch":-1}
    /controller_epoch                             3              (plain decimal text)
    /brokers/ids/<id>          (ephemeral)        {"features":{},"listener_security_protocol_map":{..},
                                                   "endpoints":["PLAINTEXT://h:p"],"jmx_port":-1,"port":p,
                                                   "host":"h","version":5,"timestamp":".."}  (+ "rack")
    /brokers/topics/<t>                           {"removing_replicas":{},"partitions":{"0":[1,2,3]},
                                                   "topic_id":"<base64 uuid>","adding_replicas":{},"version":3}
    /brokers/topics/<t>/partitions/<p>/state      {"controller_epoch":1,"leader":1,"version":1,
                                                   "leader_epoch":0,"isr":[1,2,3]}
    /config/topics/<t>, /config/brokers/<id>, /config/brokers/<default>
                                                  {"version":1,"config":{"retention.ms":"1000"}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/t"}
    /admin/delete_topics/<t>                      (no data)
    /isr_change_notification/isr_change_<seq>     {"version":1,"partitions":[{"topic":"t","partition":0}]}
    /log_dir_event_notification/log_dir_event_<seq>  {"version":1,"broker":1,"event":1}
    /latest_producer_id_block                     {"version":1,"broker":1,"block_start":"0","block_end":"999"}

``PERSISTENT_PATHS`` are the znodes every Kafka broker ensures at start (ZkData.PersistentZkPaths).

Key order: Kafka builds these documents from Scala hash maps, so its key order is an accident of
hashing; ours is the order a real Kafka 3.x broker's znodes show in zkCli. Readers never depend
on it.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from broker.address import parse_endpoint
from broker.config import ListenerSpec
from broker.controller.model import BrokerInfo, validate_topic_name
from broker.ids import uuid_text

__all__ = [
    "MAX_ZNODE_BYTES", "ZnodeError", "PERSISTENT_PATHS", "CONFIG_ENTITY_TYPES", "DEFAULT_ENTITY",
    # paths
    "ADMIN", "BROKERS", "BROKER_IDS", "BROKER_TOPICS", "BROKER_SEQID", "CLUSTER", "CLUSTER_ID", "CONFIG",
    "CONFIG_CHANGES", "CONFIG_CHANGE_PREFIX", "CONSUMERS", "CONTROLLER", "CONTROLLER_EPOCH",
    "DELETE_TOPICS", "ISR_CHANGE_NOTIFICATION", "ISR_CHANGE_PREFIX", "LOG_DIR_EVENT_NOTIFICATION",
    "PRODUCER_ID_BLOCK",
    "broker_path", "topic_path", "topic_partitions_path", "partition_path", "partition_state_path",
    "config_entity_path", "topic_config_path", "broker_config_path", "config_change_prefix_path",
    "delete_topic_path", "isr_change_prefix_path", "child_name",
    # documents
    "BrokerRegistration", "TopicAssignment", "PartitionState", "ControllerRegistration", "ProducerIdBlock",
    "encode_cluster_id", "parse_cluster_id", "encode_broker", "parse_broker", "encode_topic", "parse_topic",
    "encode_partition_state", "parse_partition_state", "encode_controller", "parse_controller",
    "encode_controller_epoch", "parse_controller_epoch", "encode_config", "parse_config",
    "encode_config_change", "parse_config_change", "encode_isr_change", "parse_isr_change",
    "log_dir_event_prefix_path", "encode_log_dir_event", "parse_log_dir_event",
    "encode_producer_id_block", "parse_producer_id_block", "topic_id_to_string", "topic_id_from_string",
]

# ZooKeeper's own limit on a znode's data (jute.maxbuffer, 1 MiB by default): nothing bigger can
# be a znode Kafka wrote, and nothing bigger is worth parsing.
MAX_ZNODE_BYTES = 1024 * 1024
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# -- paths ---------------------------------------------------------------------------------

ADMIN = "/admin"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
# Legacy preferred elections: {"version":1,"partitions":[{"topic":..,"partition":..}]} (parse_isr_change reads it).
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# Kafka's ConfigType.all: the entity types under /config.
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
# The entity name of a cluster-wide default (ConfigEntityName.Default).
DEFAULT_ENTITY = "<default>"

# ZkData.PersistentZkPaths: what a Kafka broker creates, when missing, at every start.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
) + tuple(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_ENTITY_TYPES)


def _segment(kind: str, name: str) -> str:
    """`name` as one path segment; a '/' or '.'/'..' would address another znode."""
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"{kind} {name!r} cannot be a znode name")
    return name


def _topic(topic: str) -> str:
    problem = validate_topic_name(topic)
    if problem is not None:
        raise ValueError(problem)
    return topic


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{_topic(topic)}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_entity_path(entity_type: str, name: str) -> str:
    if entity_type not in CONFIG_ENTITY_TYPES:
        raise ValueError(f"config entity type {entity_type!r} is not one of {', '.join(CONFIG_ENTITY_TYPES)}")
    return f"{CONFIG}/{entity_type}/{_segment('config entity', name)}"


def sanitized(name: str) -> str:
    """A user name as Kafka's Sanitizer writes it into a znode name: URL-encoded (UTF-8), with
    only letters, digits and ``._-`` kept, so ``/``, ``*`` and spaces cannot shape a path."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitized(name: str) -> str:
    return urllib.parse.unquote(name)


def topic_config_path(topic: str) -> str:
    return config_entity_path("topics", _topic(topic))


def broker_config_path(broker_id: int | None) -> str:
    """``/config/brokers/<id>``; None: the cluster-wide default, ``/config/brokers/<default>``."""
    return config_entity_path("brokers", DEFAULT_ENTITY if broker_id is None else str(int(broker_id)))


def config_change_prefix_path() -> str:
    """Create a sequential znode at this path to announce a config change."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{_topic(topic)}"


def isr_change_prefix_path() -> str:
    """Create a sequential znode at this path to announce ISR changes (pre-KIP-497 brokers)."""
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}"


def child_name(path: str) -> str:
    """The last segment of a path: the name get_children returns for it."""
    return path.rstrip("/").rsplit("/", 1)[-1]


# -- errors and parsing --------------------------------------------------------------------


class ZnodeError(ValueError):
    """A znode holds something that is not what Kafka writes there."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"znode {path}: {problem}")
        self.path = path
        self.problem = problem


class _Doc(BaseModel):
    # strict: a number written as a string (or the reverse) is not what Kafka writes, and is
    # refused rather than guessed at; extra keys are ignored as Kafka ignores them.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


M = TypeVar("M", bound=_Doc)


def _preview(data: bytes) -> str:
    text = data[:80].decode("utf-8", "replace")
    return repr(text) + ("..." if len(data) > 80 else "")


def _bounded(path: str, data: bytes | None) -> bytes:
    if data is None:
        raise ZnodeError(path, "has no data")
    if len(data) > MAX_ZNODE_BYTES:
        raise ZnodeError(path, f"holds {len(data)} bytes, more than the {MAX_ZNODE_BYTES} a znode may hold")
    return bytes(data)


def _load(path: str, data: bytes | None, model: type[M]) -> M:
    raw = _bounded(path, data)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        what = first["msg"].removeprefix("Value error, ")
        problem = f"{where}: {what}" if where else what
        raise ZnodeError(path, f"{problem} in {_preview(raw)}") from None


def _dump(document: Mapping[str, Any]) -> bytes:
    # Jackson's compact form: no spaces, UTF-8 as is.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _now_ms() -> int:
    return int(time.time() * 1000)


Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
BrokerId = Annotated[int, Field(ge=0, le=INT32_MAX)]
Epoch = Annotated[int, Field(ge=0, le=INT32_MAX)]


def _digits(value: str, what: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{what} {value!r} is not a decimal number")
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"{what} {number} is outside [{low}, {high}]")
    return number


def _unique(values: Sequence[int], what: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} {list(values)} names a broker more than once")


# -- /cluster/id ---------------------------------------------------------------------------


class _ClusterId(_Doc):
    version: str | int | None = None
    id: Annotated[str, Field(min_length=1, max_length=1024)]


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def parse_cluster_id(path: str, data: bytes | None) -> str:
    return _load(path, data, _ClusterId).id


# -- /brokers/ids/<id> ---------------------------------------------------------------------

# Kafka's default listener map when a registration has none (SocketServerConfigs).
_DEFAULT_PROTOCOLS = {name: name for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}


class BrokerRegistration(_Doc):
    """A broker's registration znode (BrokerIdZNode, versions 1 to 5)."""

    version: Annotated[int, Field(ge=1)]
    host: str | None = None
    port: Int32 = -1
    endpoints: list[str] = Field(default_factory=list)
    listener_security_protocol_map: dict[str, str] | None = None
    jmx_port: Int32
    timestamp: str | None = None
    rack: str | None = None
    features: dict[str, dict[str, int]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> BrokerRegistration:
        if self.version == 1:
            if not self.host or not 0 <= self.port <= 65535:
                raise ValueError("a version 1 registration needs a host and a port")
        elif not self.endpoints:
            raise ValueError(f"a version {self.version} registration needs endpoints")
        # Parse now so that a bad endpoint is refused here, naming the znode.
        self.listeners()
        return self

    def listeners(self) -> tuple[ListenerSpec, ...]:
        if self.version == 1:
            return (ListenerSpec("PLAINTEXT", self.host or "", self.port),)
        protocols = self.security_protocols()
        specs: list[ListenerSpec] = []
        for entry in self.endpoints:
            # Kafka's endpoint syntax (EndPoint.scala): any listener name (Strimzi's
            # "REPLICATION-9091" included), a host name or IPv6 address, a port.
            try:
                name, host, port = parse_endpoint(entry)
            except ValueError:
                raise ValueError(f"endpoint {entry!r} is not NAME://host:port") from None
            name = name.upper()
            if name not in protocols:
                raise ValueError(f"endpoint {entry!r}: listener {name} has no security protocol")
            specs.append(ListenerSpec(name, host, port))
        return tuple(specs)

    def security_protocols(self) -> dict[str, str]:
        if self.listener_security_protocol_map is None:
            return dict(_DEFAULT_PROTOCOLS)
        return {name.upper(): protocol.upper() for name, protocol in self.listener_security_protocol_map.items()}

    def broker_info(self, broker_id: int) -> BrokerInfo:
        return BrokerInfo(broker_id=broker_id, endpoints=self.listeners(), rack=self.rack)

    def timestamp_ms(self) -> int | None:
        if self.timestamp is None or not self.timestamp.isdigit():
            return None
        return int(self.timestamp)


def encode_broker(
    info: BrokerInfo,
    security_protocols: Mapping[str, str],
    *,
    timestamp_ms: int | None = None,
    jmx_port: int = -1,
) -> bytes:
    """The version 5 registration of `info` (Kafka's IBP >= 2.7): the top-level host and port are
    the first PLAINTEXT endpoint (for old clients), or null and -1 when there is none."""
    missing = [spec.name for spec in info.endpoints if spec.name not in security_protocols]
    if missing:
        raise ValueError(f"listeners {', '.join(missing)} have no entry in listener.security.protocol.map")
    protocols = {spec.name: security_protocols[spec.name] for spec in info.endpoints}
    plaintext = next((spec for spec in info.endpoints if protocols[spec.name] == "PLAINTEXT"), None)
    document: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": protocols,
        "endpoints": [str(spec) for spec in info.endpoints],
        "jmx_port": jmx_port,
        "port": plaintext.port if plaintext is not None else -1,
        "host": plaintext.host if plaintext is not None else None,
    }
    if info.rack is not None:
        document["rack"] = info.rack
    document["version"] = 5
    document["timestamp"] = str(_now_ms() if timestamp_ms is None else timestamp_ms)
    return _dump(document)


def parse_broker(path: str, data: bytes | None) -> BrokerRegistration:
    """The registration at ``/brokers/ids/<id>`` (the id is the path's last segment)."""
    try:
        _digits(child_name(path), "broker id", high=INT32_MAX)
    except ValueError as exc:
        raise ZnodeError(path, str(exc)) from None
    return _load(path, data, BrokerRegistration)


# -- /brokers/topics/<t> -------------------------------------------------------------------


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return uuid_text(topic_id)


def topic_id_from_string(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError when `text` is not 16 bytes in URL-safe base64."""
    if len(text) != 22:
        raise ValueError(f"topic id {text!r} is not 22 base64 characters")
    try:
        raw = base64.b64decode(text + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"topic id {text!r} is not URL-safe base64") from None
    return uuid.UUID(bytes=raw)


def _partition_map(value: dict[str, list[int]], what: str) -> dict[int, tuple[int, ...]]:
    result: dict[int, tuple[int, ...]] = {}
    for key, replicas in value.items():
        partition = _digits(key, f"{what} partition", high=INT32_MAX)
        for replica in replicas:
            if not 0 <= replica <= INT32_MAX:
                raise ValueError(f"{what} of partition {key}: broker id {replica} is out of range")
        _unique(replicas, f"{what} of partition {key}")
        result[partition] = tuple(replicas)
    return result


class TopicAssignment(_Doc):
    """A topic's replica assignment (TopicZNode, version 3 with its topic id; 1 and 2 without)."""

    version: Annotated[int, Field(ge=1)] = 1
    partitions: dict[str, list[int]]
    topic_id: str | None = None
    adding_replicas: dict[str, list[int]] = Field(default_factory=dict)
    removing_replicas: dict[str, list[int]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> TopicAssignment:
        replicas = _partition_map(self.partitions, "replicas")
        for partition, brokers in replicas.items():
            if not brokers:
                raise ValueError(f"partition {partition} has no replicas")
        for name, value in (("adding_replicas", self.adding_replicas), ("removing_replicas", self.removing_replicas)):
            extra = set(_partition_map(value, name)) - set(replicas)
            if extra:
                raise ValueError(f"{name} names partitions {sorted(extra)} the topic does not have")
        if self.topic_id is not None:
            topic_id_from_string(self.topic_id)
        return self

    def replicas(self) -> dict[int, tuple[int, ...]]:
        """Partition -> its replicas, the first the preferred leader, by partition."""
        return dict(sorted(_partition_map(self.partitions, "replicas").items()))

    def adding(self) -> dict[int, tuple[int, ...]]:
        return _partition_map(self.adding_replicas, "adding_replicas")

    def removing(self) -> dict[int, tuple[int, ...]]:
        return _partition_map(self.removing_replicas, "removing_replicas")

    def uuid(self) -> uuid.UUID | None:
        return None if self.topic_id is None else topic_id_from_string(self.topic_id)


def _json_partitions(assignment: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(partition): list(replicas) for partition, replicas in sorted(assignment.items())}


def encode_topic(
    topic_id: uuid.UUID | None,
    assignment: Mapping[int, Sequence[int]],
    *,
    adding: Mapping[int, Sequence[int]] | None = None,
    removing: Mapping[int, Sequence[int]] | None = None,
) -> bytes:
    """Version 3 of the topic znode: partition -> replicas (the first is the preferred leader);
    partitions with nothing being added or removed are left out of those maps, as Kafka does."""
    document: dict[str, Any] = {
        "removing_replicas": _json_partitions({p: r for p, r in (removing or {}).items() if r}),
        "partitions": _json_partitions(assignment),
    }
    if topic_id is not None:
        document["topic_id"] = topic_id_to_string(topic_id)
    document["adding_replicas"] = _json_partitions({p: r for p, r in (adding or {}).items() if r})
    document["version"] = 3
    return _dump(document)


def parse_topic(path: str, data: bytes | None) -> TopicAssignment:
    return _load(path, data, TopicAssignment)


# -- /brokers/topics/<t>/partitions/<p>/state ----------------------------------------------


class PartitionState(_Doc):
    """Leader, leader epoch, ISR and the epoch of the controller that wrote them
    (TopicPartitionStateZNode); its zkVersion is the partition epoch."""

    version: Literal[1] = 1
    leader: Annotated[int, Field(ge=-1, le=INT32_MAX)]
    leader_epoch: Epoch
    isr: list[int]
    controller_epoch: Epoch
    # KIP-704: 1 while a leader elected uncleanly recovers; absent (0) otherwise.
    leader_recovery_state: Annotated[int, Field(ge=0, le=1)] = 0

    @field_validator("isr")
    @classmethod
    def _isr(cls, isr: list[int]) -> list[int]:
        for broker in isr:
            if not 0 <= broker <= INT32_MAX:
                raise ValueError(f"broker id {broker} is out of range")
        _unique(isr, "isr")
        return isr


def encode_partition_state(
    leader: int, leader_epoch: int, isr: Sequence[int], controller_epoch: int, *, leader_recovery_state: int = 0
) -> bytes:
    document: dict[str, Any] = {
        "controller_epoch": controller_epoch,
        "leader": leader,
        "version": 1,
        "leader_epoch": leader_epoch,
        "isr": list(isr),
    }
    if leader_recovery_state:
        document["leader_recovery_state"] = leader_recovery_state
    return _dump(document)


def parse_partition_state(path: str, data: bytes | None) -> PartitionState:
    return _load(path, data, PartitionState)


# -- /controller and /controller_epoch -----------------------------------------------------


class ControllerRegistration(_Doc):
    version: Annotated[int, Field(ge=1)] = 1
    brokerid: BrokerId
    timestamp: str | None = None
    kraftControllerEpoch: Int32 = -1  # Kafka's key


def encode_controller(broker_id: int, *, timestamp_ms: int | None = None) -> bytes:
    return _dump({
        "version": 2,
        "brokerid": broker_id,
        "timestamp": str(_now_ms() if timestamp_ms is None else timestamp_ms),
        "kraftControllerEpoch": -1,
    })


def parse_controller(path: str, data: bytes | None) -> ControllerRegistration:
    return _load(path, data, ControllerRegistration)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode("ascii")


def parse_controller_epoch(path: str, data: bytes | None) -> int:
    raw = _bounded(path, data)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ZnodeError(path, f"not ASCII text: {_preview(raw)}") from None
    try:
        return _digits(text.strip(), "controller epoch", high=INT32_MAX)
    except ValueError as exc:
        raise ZnodeError(path, str(exc)) from None


# -- /config/<type>/<name> and /config/changes ---------------------------------------------


class _EntityConfig(_Doc):
    version: Literal[1] = 1
    config: dict[str, str]


def encode_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def parse_config(path: str, data: bytes | None) -> dict[str, str]:
    """A config entity's overrides. An empty znode (Kafka creates some so) has none."""
    if data is not None and not data.strip():
        return {}
    return dict(_load(path, data, _EntityConfig).config)


class _ConfigChange(_Doc):
    version: Literal[1, 2]
    entity_path: str | None = None  # version 2
    entity_type: str | None = None  # version 1
    entity_name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> _ConfigChange:
        if self.version == 2:
            parts = (self.entity_path or "").split("/")
            if len(parts) < 2 or parts[0] not in CONFIG_ENTITY_TYPES or not all(parts):
                raise ValueError(f"entity_path {self.entity_path!r} is not <type>/<name> with a type "
                                 f"of {', '.join(CONFIG_ENTITY_TYPES)}")
        elif self.entity_type not in CONFIG_ENTITY_TYPES or not self.entity_name:
            raise ValueError("a version 1 notification needs entity_type and entity_name")
        return self


def encode_config_change(entity_path: str) -> bytes:
    """The notification that ``/config/<entity_path>`` changed, e.g. "topics/t" or "brokers/<default>"."""
    return _dump({"version": 2, "entity_path": entity_path})


def parse_config_change(path: str, data: bytes | None) -> str:
    """The changed entity as "<type>/<name>" (version 1 notifications are converted)."""
    change = _load(path, data, _ConfigChange)
    if change.version == 2:
        return change.entity_path or ""
    return f"{change.entity_type}/{change.entity_name}"


# -- /isr_change_notification --------------------------------------------------------------


class _TopicPartition(_Doc):
    topic: str
    partition: Annotated[int, Field(ge=0, le=INT32_MAX)]


class _IsrChange(_Doc):
    version: Literal[1]
    partitions: list[_TopicPartition]


def encode_isr_change(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def parse_isr_change(path: str, data: bytes | None) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in _load(path, data, _IsrChange).partitions]


# -- /log_dir_event_notification -------------------------------------------------------------

# Kafka's LogDirEventNotificationHandler.LogDirFailureEvent: the only event Kafka writes. A
# Causeway broker writes it again when a failed dir takes writes again: the controller then asks
# the broker for its replicas' state (LeaderAndIsr) as it does after a failure, and learns which
# are back.
LOG_DIR_FAILURE_EVENT = 1
LOG_DIR_EVENT_PREFIX = "log_dir_event_"


class _LogDirEvent(_Doc):
    version: Literal[1]
    broker: Annotated[int, Field(ge=0, le=INT32_MAX)]
    event: int


def log_dir_event_prefix_path() -> str:
    """Create a sequential znode at this path to tell the controller a log dir changed."""
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}"


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def parse_log_dir_event(path: str, data: bytes | None) -> int:
    """The broker id of a log dir event notification."""
    return _load(path, data, _LogDirEvent).broker


# -- /admin/reassign_partitions ---------------------------------------------------------------


class _ReassignPartition(_Doc):
    topic: str
    partition: Annotated[int, Field(ge=0, le=INT32_MAX)]
    replicas: list[Annotated[int, Field(ge=0, le=INT32_MAX)]]


class _ReassignPartitions(_Doc):
    version: Literal[1]
    partitions: list[_ReassignPartition]


def encode_reassign_partitions(targets: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """The legacy reassignment request (Kafka's ReassignPartitionsZNode, version 1)."""
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                               for (t, p), r in sorted(targets.items())]})


def parse_reassign_partitions(path: str, data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) -> target replicas; ``log_dirs`` is ignored (each broker places a new replica)."""
    return {(tp.topic, tp.partition): tuple(tp.replicas) for tp in _load(path, data, _ReassignPartitions).partitions}


# -- /latest_producer_id_block -------------------------------------------------------------


class ProducerIdBlock(_Doc):
    """The last producer id block handed out: ids block_start..block_end, both included."""

    version: Literal[1] = 1
    broker: BrokerId
    block_start: str
    block_end: str

    @model_validator(mode="after")
    def _check(self) -> ProducerIdBlock:
        start = _digits(self.block_start, "block_start")
        end = _digits(self.block_end, "block_end")
        if end < start:
            raise ValueError(f"block_end {end} is before block_start {start}")
        return self

    @property
    def first(self) -> int:
        return int(self.block_start)

    @property
    def last(self) -> int:
        return int(self.block_end)


def encode_producer_id_block(broker_id: int, first: int, last: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(first), "block_end": str(last)})


def parse_producer_id_block(path: str, data: bytes | None) -> ProducerIdBlock:
    return _load(path, data, ProducerIdBlock)
