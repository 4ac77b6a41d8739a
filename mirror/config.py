"""One mirror's settings: what `causeway mirror --config FILE` reads and `causeway up` writes.

    source: {alias: east, bootstrap: 127.0.0.1:9092}
    target: {alias: west, bootstrap: 127.0.0.1:9093,
             properties: {security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512, ...}}
    topics: {include: [".*"], exclude: []}
    groups: {include: [".*"], exclude: []}
    naming: default                       # east.orders at the target; identity keeps orders
    mode: mm2                             # or link: read-only copies with the source's offsets
    refresh.topics.interval.seconds: 5    # MirrorMaker 2's names (and units) for the knobs
    metrics.listener: 127.0.0.1:9465      # Prometheus metrics (mirror/metrics.py); unset: none
    exactly.once.support: required        # mm2 mode: records and positions in one transaction

The knobs keep MirrorMaker 2's property names so an MM2 operator finds them; where MM2's default
hurts (it re-scans topics every 10 minutes) ours is shorter. A bad file is refused with its line
and key, through the topology loader.

`mode: link` (mirror/link.py) needs a Causeway target and keeps topic names: `naming` may be left
out or be `identity`; an explicit `naming: default` is refused, at its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from broker.address import parse_host_port
from broker.config import ConfigError
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG
from security.client import ClientSecurity, client_security
from topology.errors import Problem, TopologyError
from topology.loader import Positions, load_yaml
from topology.model import schema_problems
from topology.schema import MirrorMode, Naming, Patterns

__all__ = ["EXCLUDED_CONFIGS", "LINK_SYNC_GROUP_OFFSETS_S", "ClusterEndpoint", "MirrorConfig", "Patterns",
           "load_mirror_config"]

# MM2's DefaultTopicFilter and DefaultGroupFilter exclusions: internal topics and groups are never
# mirrored, whatever the include patterns say.
INTERNAL_TOPICS = (r".*[\-\.]internal", r".*\.replica", r"__.*")
INTERNAL_GROUPS = (r"console-consumer-.*", r"connect-.*", r"__.*")

# Topic configs MirrorMaker 2 leaves alone (DefaultConfigPropertyFilter): they describe the source
# cluster's brokers or its clocks, not the data. The pipeline's bulk copy leaves them alone too.
EXCLUDED_CONFIGS = frozenset({
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    # Causeway's mark of a link-mode mirror topic: it names the mirror that writes the topic at
    # its own cluster, so a copy of it elsewhere would lock that copy against its own writer.
    MIRROR_NAME_CONFIG,
    MIRROR_STATE_CONFIG,  # the link state of the source's own mirror topic (a chain), not the copy's
})


#: Link mode's default `sync.group.offsets.interval.seconds` (mm2 mode keeps 5 s): a failover from
#: a dead source cannot copy the groups' offsets a last time, so a moved group re-reads what it
#: committed there since the mirror's last pass (mirror/link_groups.py makes a pass cheap).
LINK_SYNC_GROUP_OFFSETS_S = 0.1
SYNC_GROUP_OFFSETS_KEY = "sync.group.offsets.interval.seconds"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ClusterEndpoint(_Strict):
    alias: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    bootstrap: str = Field(min_length=1, description="HOST:PORT[,HOST:PORT...]")
    # Kafka client properties for this cluster's connections (MM2's `source.cluster.*` and
    # `target.cluster.*`): security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config.
    properties: dict[str, str] = Field(default_factory=dict, repr=False)

    @field_validator("properties")
    @classmethod
    def _security_readable(cls, properties: dict[str, str]) -> dict[str, str]:
        # Checked when the file is read: a store that cannot be opened or a typo'd key is named
        # at its line, not found later by a mirror that cannot connect.
        try:
            client_security(properties, "properties")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return properties

    def security(self) -> ClientSecurity:
        return client_security(self.properties, f"{self.alias}.properties")


class MirrorConfig(_Strict):
    name: str | None = None
    source: ClusterEndpoint
    target: ClusterEndpoint
    topics: Patterns = Field(default_factory=Patterns)
    groups: Patterns = Field(default_factory=Patterns)
    # Before `naming`: its check reads the mode.
    mode: MirrorMode = "mm2"
    naming: Naming = "default"
    separator: str = Field(".", alias="replication.policy.separator", min_length=1)
    refresh_topics_s: float = Field(5.0, alias="refresh.topics.interval.seconds", gt=0)
    refresh_groups_s: float = Field(5.0, alias="refresh.groups.interval.seconds", gt=0)
    sync_topic_configs: bool = Field(True, alias="sync.topic.configs.enabled")
    # MM2's topic ACL sync (mirror/acl_sync.py), with MM2's default interval: ACLs change rarely,
    # and each round reads every topic ACL of both clusters.
    sync_topic_acls: bool = Field(True, alias="sync.topic.acls.enabled")
    sync_topic_acls_s: float = Field(600.0, alias="sync.topic.acls.interval.seconds", gt=0)
    heartbeats_s: float = Field(1.0, alias="emit.heartbeats.interval.seconds", ge=0)
    checkpoints_s: float = Field(5.0, alias="emit.checkpoints.interval.seconds", ge=0)
    sync_group_offsets: bool = Field(True, alias="sync.group.offsets.enabled")
    sync_group_offsets_s: float = Field(5.0, alias="sync.group.offsets.interval.seconds", gt=0)  # link: 0.1
    offset_lag_max: int = Field(100, alias="offset.lag.max", ge=0)
    offset_syncs_location: Literal["source", "target"] = Field("source", alias="offset-syncs.topic.location")
    # Connect's offset.flush.interval.ms: how often mirrored positions are checkpointed on the
    # target. After a crash at most this much is mirrored again (duplicates, never gaps).
    flush_interval_ms: int = Field(1000, alias="offset.flush.interval.ms", gt=0)
    # KIP-618's `exactly.once.support` for mm2 mode (mirror/exactly_once.py): `required` writes the
    # records and the positions in one transaction at the target every offset.flush.interval.ms,
    # so a crash repeats nothing for read_committed readers. `disabled`: at-least-once, as MM2
    # without it. Connect's `requested` (fall back when the target cannot) is not offered: a
    # mirror that silently falls back would break the promise the setting names.
    exactly_once_support: Literal["disabled", "required"] = Field("disabled", alias="exactly.once.support")
    # Remote and internal topics' replication factor; -1 takes the target broker's default.
    replication_factor: int = Field(-1, alias="replication.factor", ge=-1, le=32767)
    # Concurrent fetch streams from the source (partitions are spread over them): more keep a
    # long link fuller when many partitions lag.
    tasks_max: int = Field(4, alias="tasks.max", ge=1, le=64)
    # Per-request sizes for the WAN fetches: large, so a long link stays full.
    fetch_max_bytes: int = Field(52_428_800, alias="fetch.max.bytes", ge=1024)
    partition_fetch_max_bytes: int = Field(8_388_608, alias="max.partition.fetch.bytes", ge=1024)
    fetch_max_wait_ms: int = Field(500, alias="fetch.max.wait.ms", ge=0)
    # How far fetching may run ahead of writing, per partition, in bytes.
    queue_max_bytes: int = Field(33_554_432, alias="queue.max.bytes", ge=1024)
    # HOST:PORT where the mirror serves Prometheus metrics (mirror/metrics.py); port 0 picks a
    # free one and the log says which. MM2 has JMX instead; the key follows the broker's
    # causeway.metrics.listener. Unset: no endpoint.
    metrics_listener: str | None = Field(None, alias="metrics.listener")

    @model_validator(mode="before")
    @classmethod
    def _link_defaults(cls, data: object) -> object:
        # A link-mode mirror topic has its source topic's name: naming defaults to identity.
        if isinstance(data, dict) and data.get("mode") == "link" and "naming" not in data:
            data = {**data, "naming": "identity"}
        # Link mode copies group offsets often by default: see LINK_SYNC_GROUP_OFFSETS_S.
        if (isinstance(data, dict) and data.get("mode") == "link" and SYNC_GROUP_OFFSETS_KEY not in data
                and "sync_group_offsets_s" not in data):
            data = {**data, SYNC_GROUP_OFFSETS_KEY: LINK_SYNC_GROUP_OFFSETS_S}
        return data

    @field_validator("naming")
    @classmethod
    def _naming_for_mode(cls, naming: str, info: ValidationInfo) -> str:
        # Runs only for a `naming` the file gives (defaults are not validated).
        if naming == "default" and info.data.get("mode") == "link":
            raise ValueError("mode: link keeps topic names (a mirror topic has its source topic's name and "
                             "offsets): leave naming out or set it to identity")
        return naming

    @field_validator("exactly_once_support")
    @classmethod
    def _exactly_once_for_mode(cls, value: str, info: ValidationInfo) -> str:
        if value != "disabled" and info.data.get("mode") == "link":
            raise ValueError("exactly.once.support is for mode: mm2 (link mode copies transactions with their "
                             "markers and the source's offsets already)")
        return value

    @field_validator("metrics_listener")
    @classmethod
    def _listener(cls, value: str | None) -> str | None:
        if value is not None:
            parse_host_port(value, "metrics.listener")  # raises ValueError naming what is wrong
        return value

    @field_validator("replication_factor")
    @classmethod
    def _factor(cls, value: int) -> int:
        if value == 0:
            raise ValueError("replication.factor is -1 (the broker's default) or at least 1")
        return value

    @property
    def display_name(self) -> str:
        return self.name or f"{self.source.alias}->{self.target.alias}"

    @field_validator("target")
    @classmethod
    def _different(cls, target: ClusterEndpoint, info: object) -> ClusterEndpoint:
        data = getattr(info, "data", {})
        source = data.get("source")
        if source is not None and source.alias == target.alias:
            raise ValueError(f"source and target have the same alias '{target.alias}'")
        return target


def load_mirror_config(path: Path) -> MirrorConfig:
    """Raises TopologyError listing every problem with file, line and key."""
    data, positions = load_yaml(path)
    return mirror_config_from_data(data, str(path), positions)


def mirror_config_from_data(data: object, file: str = "<config>", positions: Positions | None = None) -> MirrorConfig:
    """Raises TopologyError listing every problem (at line 1 when no `positions` are known)."""
    positions = positions or {(): (1, 1)}
    if not isinstance(data, dict):
        raise TopologyError([Problem(file, 1, 1, "(top level)", "a mirror config is a mapping of keys")])
    try:
        return MirrorConfig.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(schema_problems(exc, file, positions)) from None
