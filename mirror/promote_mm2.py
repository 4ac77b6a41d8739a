"""Promotion of an mm2-mode mirror: the DR site gets local topics shaped as the source's.

An mm2-mode mirror copies `orders` of cluster `east` into the remote topic `east.orders` (its
naming policy, mirror/naming.py). Producers that move to the DR site write to `orders` there,
which nothing created: a broker that auto-creates topics would make it with its own defaults
(one partition), and keys would land on other partitions than at the source. So promoting an
mm2 mirror creates, at the target, each mirrored topic under its source name with the source's
partition count and topic configs (those the mirror syncs: mirror/runtime.py), before any
producer arrives:

- planned (the source answers): the counts and configs are read from the source; a source that
  does not answer is refused (fail over instead);
- failover: the source is never waited for: one that refuses every connection, or has not
  answered within FIRST_ANSWER_S, is left (FAILOVER_SOURCE_S in all), and the remote topics the
  mirror created and kept in line with the source (their partition counts and configs: the
  last topic sync) stand in for it.

A topic that already exists under its source name is left as it is (`already`: a second run, or
identity naming, where the remote topic is that topic). Consumer groups resume on the remote
topics at their translated offsets (mirror/groups.py commits them periodically); when the source
answers, the promotion translates and commits them once more, as the mirror does (through the
offset syncs, only for groups not active at the target, never backwards), so a group moved after
a planned switch-over starts at the last offset it committed at the source, not at the mirror's
last periodic sync.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import trio

from broker.client import ClientError, KafkaError, TopicPartition
from broker.client.admin import NewTopic, create_topics, describe_configs, list_topics
from broker.client.cluster import Client, open_client
from broker.client.groups import commit_offsets, describe_groups, fetch_offsets, list_groups
from broker.protocol.constants import ConfigSource
from broker.protocol.errors import ErrorCode
from mirror.config import EXCLUDED_CONFIGS, INTERNAL_GROUPS, INTERNAL_TOPICS, MirrorConfig
from mirror.formats import OffsetSync
from mirror.groups import INACTIVE_STATES
from mirror.naming import ReplicationPolicy
from mirror.offset_sync import SyncStore
from mirror.promotion import (
    FAILOVER_SOURCE_S,
    FIRST_ANSWER_S,
    SOURCE_PROBE_S,
    SOURCE_TIMEOUT_S,
    PromotionError,
    PromotionReport,
    Say,
    refused,
)
from mirror.topics import read_whole_topic
from security.client import ClientSecurity

__all__ = ["TopicShape", "promote_mm2"]

#: A topic as the target must make it: its partition count and its topic configs.
TopicShape = tuple[int, dict[str, str]]


async def promote_mm2(target_bootstrap: str, config: MirrorConfig, *, source_bootstrap: str | None,
                      topics_regex: str | None, failover: bool, timeout_s: float, say: Say,
                      target_security: ClientSecurity | None,
                      source_security: ClientSecurity | None, progress: Say | None = None) -> PromotionReport:
    """Create at the target, under their source names, the topics mirror `config` copies
    (matching `topics_regex`), shaped as at the source; see the module. Returns the report
    (`promoted`: created; `already`: there before). Raises PromotionError when there is nothing
    to promote, or a planned promotion's source does not answer; ClientError / KafkaError when
    the target cannot be read. `say` gets the report's lines, `progress` (`say` when None) the
    line saying what it starts."""
    policy = ReplicationPolicy(identity=config.naming == "identity", separator=config.separator)
    narrow = re.compile(topics_regex) if topics_regex is not None else None
    alias = config.source.alias

    def wanted(topic: str) -> bool:
        return (config.topics.matches(topic, INTERNAL_TOPICS) and not policy.is_heartbeats(topic)
                and (narrow is None or narrow.fullmatch(topic) is not None))

    async with open_client(target_bootstrap, client_id="causeway-promote", security=target_security,
                           request_timeout_s=min(30.0, max(1.0, timeout_s))) as target:
        target_topics = await list_topics(target)
        # The mirror's remote topics at the target, by source name: what is known without the source.
        remote = {policy.upstream_topic(t) or t: t for t in target_topics
                  if policy.identity or policy.topic_source(t) == alias}
        remote = {name: t for name, t in remote.items() if wanted(name)}
        source_bound = min(timeout_s, FAILOVER_SOURCE_S if failover else SOURCE_PROBE_S)
        shapes, why = await _source_shapes(source_bootstrap, source_security, wanted, source_bound,
                                           first_answer_s=min(FIRST_ANSWER_S, source_bound) if failover else None)
        report = PromotionReport(target_bootstrap, source_bootstrap, failover, {})
        if shapes is None:
            if not failover:
                raise PromotionError(f"the source {source_bootstrap} does not answer ({why}): a planned promotion "
                                     "reads the topics' partition counts and configs from it. If the source is "
                                     "lost, fail over instead: the same command with --failover")
            report.source_error = why
            say(f"the source does not answer ({why}): topics shaped as the remote topics the mirror kept in line "
                "with it (its last topic sync)")
            shapes = {name: await _target_shape(target, t, target_topics[t]) for name, t in sorted(remote.items())}
        report.selected = dict.fromkeys(shapes, config.name or "")
        if not shapes:
            raise PromotionError(f"{target_bootstrap} has no remote topic of mirror {config.name or alias}"
                                 f"{f' matching {topics_regex!r}' if topics_regex else ''}, and the source "
                                 f"{'did not answer' if report.source_error else 'has no such topic'}: "
                                 "nothing to promote")
        (say if progress is None else progress)(
            f"{'failover' if failover else 'promotion'} of mirror {config.name or alias} (mm2): local topics "
            f"at {target_bootstrap} for {', '.join(sorted(shapes))}")
        await _create_local(target, report, shapes, target_topics, config.replication_factor, say)
        if report.source_error is None and source_bootstrap is not None and config.sync_group_offsets:
            # The source answered: its groups' offsets once more, translated (bounded: a failover's
            # source that stops answering now is left, its groups resume from the last sync).
            bound_s = min(timeout_s, FAILOVER_SOURCE_S if failover else SOURCE_TIMEOUT_S)
            with trio.move_on_after(bound_s) as bound:
                try:
                    async with open_client(source_bootstrap, client_id="causeway-promote", security=source_security,
                                           request_timeout_s=bound_s, connect_timeout_s=min(2.0, bound_s)) as source:
                        await _sync_groups(source, target, config, policy, set(shapes), report)
                except (ClientError, KafkaError) as exc:
                    report.groups_error = str(exc) or type(exc).__name__
            if bound.cancelled_caught:
                report.groups_error = f"no answer within {bound_s:g} s"
            for group, offsets in sorted(report.groups_synced.items()):
                shown = ", ".join(f"{tp.topic}-{tp.partition} {o}" for tp, o in sorted(offsets.items())) or "none"
                say(f"group {group}: offsets translated and committed one last time: {shown}")
            for group in report.groups_active:
                say(f"group {group}: consumers are live at the target: its offsets there are its own, left alone")
            if report.groups_error is not None:
                say(f"groups NOT synced at the end ({report.groups_error}): they resume from the mirror's last "
                    "sync of their translated offsets")
        elif config.sync_group_offsets:
            say("groups NOT synced at the end (the source did not answer): they resume from the mirror's last sync "
                "of their translated offsets")
    return report


async def _sync_groups(source: Client, target: Client, config: MirrorConfig, policy: ReplicationPolicy,
                       topics: set[str], report: PromotionReport) -> None:
    """Translate each matching source group's committed offsets on `topics` through the offset
    syncs and commit them on the remote topics at the target, as the mirror's group sync does
    (mirror/groups.py): groups with no live members there, never backwards."""
    location = source if config.offset_syncs_location == "source" else target
    other = config.target.alias if config.offset_syncs_location == "source" else config.source.alias
    syncs = SyncStore(capacity=1_000_000)  # all of them: the newest at or below each offset is exact
    for record in await read_whole_topic(location, policy.offset_syncs_topic(other)):
        if record.key is None or record.value is None:
            continue
        try:
            sync = OffsetSync.decode(record.key, record.value)
        except (ValueError, KafkaError):
            continue  # the mirror logs these; a promotion skips them
        syncs.add(sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset)
    wanted: dict[str, dict[TopicPartition, int]] = {}
    for listing in await list_groups(source):
        group = listing.group_id
        if listing.protocol_type not in ("consumer", "") or not config.groups.matches(group, INTERNAL_GROUPS):
            continue
        for tp, committed in (await fetch_offsets(source, group)).items():
            if tp.topic not in topics or committed.offset < 0:
                continue
            downstream = syncs.translate(tp.topic, tp.partition, committed.offset)
            if downstream is not None:
                remote = policy.remote_topic(config.source.alias, tp.topic)
                wanted.setdefault(group, {})[TopicPartition(remote, tp.partition)] = downstream
    if not wanted:
        return
    described = await describe_groups(target, list(wanted))
    for group, offsets in sorted(wanted.items()):
        description = described.get(group)
        if (description.state if description is not None else "") not in INACTIVE_STATES:
            report.groups_active.append(group)
            continue
        existing = await fetch_offsets(target, group, list(offsets))
        updates: dict[TopicPartition, int] = {tp: o for tp, o in offsets.items()
                                              if (have := existing.get(tp)) is None or have.offset < o}
        if updates:
            try:
                await commit_offsets(target, group, dict(updates))
            except KafkaError as exc:
                if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                                ErrorCode.ILLEGAL_GENERATION):
                    report.groups_active.append(group)
                    continue
                raise
        report.groups_synced[group] = {tp: max(o, existing[tp].offset if tp in existing else o)
                                       for tp, o in offsets.items()}


async def _source_shapes(source_bootstrap: str | None, security: ClientSecurity | None, wanted: Callable[[str], bool],
                         bound_s: float, *, first_answer_s: float | None = None
                         ) -> tuple[dict[str, TopicShape] | None, str]:
    """The source's mirrored topics with their shapes, or None and why, within `bound_s`; with
    `first_answer_s` (a failover), a source refusing every connection is left at once, and one
    whose first answer takes longer than that is left then."""
    if source_bootstrap is None:
        return None, "no source given"
    if first_answer_s is not None and (why := await refused(source_bootstrap, min(1.0, first_answer_s))):
        return None, f"source unreachable, {why}"
    with trio.move_on_after(bound_s):
        try:
            async with open_client(source_bootstrap, client_id="causeway-promote", security=security,
                                   request_timeout_s=bound_s, connect_timeout_s=min(2.0, bound_s)) as source:
                with trio.move_on_after(first_answer_s if first_answer_s is not None else bound_s) as first:
                    counts = await list_topics(source)
                if first.cancelled_caught and first_answer_s is not None:
                    return None, f"source unreachable, no answer within {first_answer_s:g} s"
                shapes: dict[str, TopicShape] = {}
                for name, count in sorted(counts.items()):
                    if wanted(name):
                        entries = await describe_configs(source, name)
                        shapes[name] = (count, {k: e.value for k, e in entries.items()
                                                if not e.is_default and e.value is not None and not e.is_sensitive
                                                and k not in EXCLUDED_CONFIGS})
                return shapes, ""
        except (ClientError, KafkaError) as exc:
            return None, str(exc) or type(exc).__name__
    return None, f"no answer within {bound_s:g} s"


async def _target_shape(target: Client, remote: str, count: int) -> TopicShape:
    """A remote topic's partition count and its own configs (those the mirror synced)."""
    entries = await describe_configs(target, remote)
    return count, {k: e.value for k, e in entries.items()
                            if e.source == ConfigSource.TOPIC_CONFIG and e.value is not None
                            and k not in EXCLUDED_CONFIGS}


async def _create_local(target: Client, report: PromotionReport, shapes: dict[str, TopicShape],
                        existing: dict[str, int], replication_factor: int, say: Say) -> None:
    for name, (count, configs) in sorted(shapes.items()):
        if name in existing:
            report.already.append(name)
            mismatch = f" (it has {existing[name]} partition(s), the source {count})" if existing[name] != count else ""
            say(f"{name} exists at the target already: left as it is{mismatch}")
            continue
        try:
            await create_topics(target, {name: NewTopic(count, replication_factor, configs)}, exist_ok=True)
        except (ClientError, KafkaError) as exc:
            report.failed[name] = f"the target refused to create it: {exc or type(exc).__name__}"
            say(f"NOT created {name}: {report.failed[name]}")
            continue
        report.promoted.append(name)
        shown = f", configs {', '.join(f'{k}={v}' for k, v in sorted(configs.items()))}" if configs else ""
        say(f"created {name}: {count} partition(s){shown}, as at the source; producers write to it now")
