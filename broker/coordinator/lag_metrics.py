"""Consumer-group metrics: how many groups this broker coordinates, by state, and each group's
committed offsets and lag, as Kafka's lag exporters compute it (danielqsj/kafka_exporter's
names: ``kafka_consumergroup_lag`` is the partition's high watermark less the group's committed
offset; ``kafka_consumergroup_current_offset`` the committed offset).

A broker knows the committed offsets of the groups it coordinates (those of the
``__consumer_offsets`` partitions it leads) and the high watermarks of the partitions it hosts,
so lag is reported for a group's partitions with a replica on its coordinator's broker (all of
them in a standalone broker, or with as many replicas as brokers); the committed offset of every
partition either way. A follower's high watermark trails its leader's by a fetch round trip.

Rendered as text at scrape, in the metrics endpoint's thread, from copies of the coordinator's
tables (see broker/replication/replica_metrics.py for why text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from broker.coordinator.group import GroupState
from broker.metrics import add_text_source, escape_label_value
from broker.replication.replica_metrics import hosted_partitions

if TYPE_CHECKING:
    from broker.coordinator.group import Group

__all__ = ["render", "track_groups"]

Groups = Callable[[], Mapping[str, "Group"]]

_STATE_GAUGES = (
    ("numgroups", None),
    ("numgroupsstable", GroupState.STABLE),
    ("numgroupspreparingrebalance", GroupState.PREPARING_REBALANCE),
    ("numgroupscompletingrebalance", GroupState.COMPLETING_REBALANCE),
    ("numgroupsempty", GroupState.EMPTY),
    ("numgroupsdead", GroupState.DEAD),
)


class _Source:
    groups: Groups | None = None


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


def render() -> str:
    """The group gauges, as text in Prometheus's exposition format."""
    source = _Source.groups
    groups = list(source().values()) if source is not None else []
    hosted = hosted_partitions()
    states = [group.state for group in groups]
    parts = []
    for suffix, state in _STATE_GAUGES:
        name = f"kafka_coordinator_group_groupmetadatamanager_{suffix}"
        count = len(states) if state is None else sum(1 for s in states if s is state)
        which = "" if state is None else f" in state {state.value}"
        parts.append(f"{_header(name, f'Groups this broker coordinates{which}.')}{name} {count}\n")
    current: list[str] = []
    lag: list[str] = []
    lag_sum: list[str] = []
    members: list[str] = []
    for group in groups:
        gid = escape_label_value(group.group_id)
        members.append(f'kafka_consumergroup_members{{consumergroup="{gid}"}} {len(group.members)}\n')
        sums: dict[str, int] = {}
        for (topic, index), committed in list(group.offsets.items()):
            label = f'{{consumergroup="{gid}",partition="{index}",topic="{topic}"}}'
            current.append(f"kafka_consumergroup_current_offset{label} {committed.offset}\n")
            partition = hosted.get((topic, index))
            if partition is None:
                continue
            behind = max(0, partition.log.high_watermark - committed.offset)
            lag.append(f"kafka_consumergroup_lag{label} {behind}\n")
            sums[topic] = sums.get(topic, 0) + behind
        lag_sum.extend(f'kafka_consumergroup_lag_sum{{consumergroup="{gid}",topic="{topic}"}} {total}\n'
                       for topic, total in sums.items())
    for (name, help_text), lines in (
        (("kafka_consumergroup_members", "Members of the group now."), members),
        (("kafka_consumergroup_current_offset", "The group's committed offset of the partition."), current),
        (("kafka_consumergroup_lag", "The partition's high watermark less the group's committed offset."), lag),
        (("kafka_consumergroup_lag_sum", "The group's lag summed over the topic's partitions (those hosted here)."),
         lag_sum),
    ):
        parts.append(_header(name, help_text))
        parts.append("".join(lines))
    return "".join(parts)


add_text_source(render)


def track_groups(groups: Groups) -> None:
    """Report the groups `groups()` returns (the coordinator's table, which a scrape copies)."""
    _Source.groups = groups
