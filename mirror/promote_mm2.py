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
- failover: the source is asked for at most FAILOVER_SOURCE_S; without an answer, the remote
  topics the mirror created and kept in line with the source (their partition counts and
  configs: the last topic sync) stand in for it.

A topic that already exists under its source name is left as it is (`already`: a second run, or
identity naming, where the remote topic is that topic). Consumer groups keep their translated
offsets on the remote topics (mirror/groups.py): this module does not move them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import trio

from broker.client import ClientError, KafkaError
from broker.client.admin import NewTopic, create_topics, describe_configs, list_topics
from broker.client.cluster import Client, open_client
from broker.protocol.constants import ConfigSource
from mirror.config import EXCLUDED_CONFIGS, INTERNAL_TOPICS, MirrorConfig
from mirror.naming import ReplicationPolicy
from mirror.promotion import FAILOVER_SOURCE_S, SOURCE_PROBE_S, PromotionError, PromotionReport, Say
from security.client import ClientSecurity

__all__ = ["TopicShape", "promote_mm2"]

#: A topic as the target must make it: its partition count and its topic configs.
TopicShape = tuple[int, dict[str, str]]


async def promote_mm2(target_bootstrap: str, config: MirrorConfig, *, source_bootstrap: str | None,
                      topics_regex: str | None, failover: bool, timeout_s: float, say: Say,
                      target_security: ClientSecurity | None,
                      source_security: ClientSecurity | None) -> PromotionReport:
    """Create at the target, under their source names, the topics mirror `config` copies
    (matching `topics_regex`), shaped as at the source; see the module. Returns the report
    (`promoted`: created; `already`: there before). Raises PromotionError when there is nothing
    to promote, or a planned promotion's source does not answer; ClientError / KafkaError when
    the target cannot be read."""
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
        shapes, why = await _source_shapes(source_bootstrap, source_security, wanted, source_bound)
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
        say(f"{'failover' if failover else 'promotion'} of mirror {config.name or alias} (mm2): local topics "
            f"at {target_bootstrap} for {', '.join(sorted(shapes))}")
        await _create_local(target, report, shapes, target_topics, config.replication_factor, say)
    return report


async def _source_shapes(source_bootstrap: str | None, security: ClientSecurity | None, wanted: Callable[[str], bool],
                         bound_s: float) -> tuple[dict[str, TopicShape] | None, str]:
    """The source's mirrored topics with their shapes, or None and why, within `bound_s`."""
    if source_bootstrap is None:
        return None, "no source given"
    with trio.move_on_after(bound_s):
        try:
            async with open_client(source_bootstrap, client_id="causeway-promote", security=security,
                                   request_timeout_s=bound_s, connect_timeout_s=min(2.0, bound_s)) as source:
                counts = await list_topics(source)
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
