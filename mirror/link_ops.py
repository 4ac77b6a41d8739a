"""Link operations on a link-mode mirror's topics, at its target: which mirrors it holds topics of
(`causeway mirror list`), each mirror topic's state and lag (`describe`), and `pause` / `resume`
(deploy/cli/mirror_links.py), as Confluent's Cluster Linking has them (`kafka-mirrors --describe
| --pause | --resume`).

A mirror topic's state lives where its identity does, in its config at the target, so every
process (the mirror, each broker, this command) reads the same and a restart changes nothing:
`causeway.mirror.name` (which mirror writes it; deleted by a promotion, after which the topic is
STOPPED) and `causeway.mirror.state` (PAUSED, or unset: ACTIVE). A pause is enforced by the
target's leaders (LinkAppend to a paused topic is refused), so it holds once every broker has
applied it, whatever the mirror process knows; the mirror stops its partitions when refused or at
its next topic discovery, and a resume starts them again at the copy's end (mirror/link.py), so
nothing is copied twice or skipped. What only the mirror process knows (FAILED and why) comes
from its status file, which a topology names (mirror/status.py `topic_states`).

Lag: records the source holds beyond the copy's end, per partition; and in time, how long the
oldest of them has waited (now minus its batch's first timestamp, read at the source with one
fetch per lagging partition). Both unknown (None) while the source does not answer within
SOURCE_ASK_S: the topic is then SOURCE_UNAVAILABLE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import trio

from broker.client import ClientError, ErrorCode, KafkaError, TopicPartition, fetch, whole_batches
from broker.client.admin import LATEST, alter_configs, describe_configs, list_offsets, list_topics
from broker.client.cluster import Client, open_client
from broker.clock import now_ms
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_PAUSED, MIRROR_PROMOTING, MIRROR_STATE_CONFIG
from broker.protocol.records import split_batches
from mirror.promote import applied_everywhere
from mirror.promotion import Say, quiet
from mirror.status import TopicState
from security.client import ClientSecurity

__all__ = ["SOURCE_ASK_S", "LinkOpsError", "LinkTopic", "PauseReport", "TargetTopic", "describe_links",
           "mirror_topics", "set_paused"]

#: The most `describe` waits for the source (its log ends, one batch per lagging partition):
#: a source that does not answer makes its topics SOURCE_UNAVAILABLE, never a stuck command.
SOURCE_ASK_S = 5.0


class LinkOpsError(Exception):
    """The operation cannot be done as asked (an unknown mirror, a topic that is not its mirror
    topic); nothing was changed."""


@dataclass(frozen=True)
class TargetTopic:
    """A topic at the target and its link configs: the mirror that writes it (None: a normal
    topic, or promoted) and its link state (ACTIVE, PAUSED, PROMOTING)."""

    name: str
    mirror: str | None
    state: str = "ACTIVE"

    @property
    def paused(self) -> bool:
        return self.state == MIRROR_PAUSED


@dataclass
class PartitionLag:
    partition: int
    target_end: int
    source_end: int | None = None  # None: unknown (the source did not answer)
    lag_ms: int | None = None

    @property
    def lag(self) -> int | None:
        return None if self.source_end is None else max(0, self.source_end - self.target_end)


@dataclass
class LinkTopic:
    """One mirror topic as `describe` shows it."""

    topic: str
    mirror: str | None  # None: promoted (STOPPED)
    state: TopicState
    partitions: list[PartitionLag] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "mirror": self.mirror, **self.state.model_dump(),
                "partitions": [{"partition": p.partition, "target_end": p.target_end, "source_end": p.source_end,
                                "lag": p.lag, "lag_ms": p.lag_ms} for p in self.partitions]}


@dataclass
class PauseReport:
    changed: list[str] = field(default_factory=list)  # paused (or resumed) now
    already: list[str] = field(default_factory=list)  # were so already
    not_applied: dict[str, list[int]] = field(default_factory=dict)  # brokers that did not show it in time
    ends: dict[TopicPartition, int] = field(default_factory=dict)  # the copy's ends once applied


async def mirror_topics(target: Client) -> dict[str, TargetTopic]:
    """Every topic at the target with its link configs, by name."""
    out: dict[str, TargetTopic] = {}
    for name in sorted(await list_topics(target)):
        configs = await describe_configs(target, name, keys=[MIRROR_NAME_CONFIG, MIRROR_STATE_CONFIG])
        owner, state = configs.get(MIRROR_NAME_CONFIG), configs.get(MIRROR_STATE_CONFIG)
        mirror = owner.value if owner is not None and owner.value else None
        value = state.value if mirror is not None and state is not None else None
        known = value if value in (MIRROR_PAUSED, MIRROR_PROMOTING) else None
        out[name] = TargetTopic(name, mirror, known or "ACTIVE")
    return out


def _mirrors_there(topics: dict[str, TargetTopic]) -> str:
    names = sorted({t.mirror for t in topics.values() if t.mirror is not None})
    return ", ".join(names) or "none"


def select(topics: dict[str, TargetTopic], mirror: str, topics_regex: str | None) -> list[TargetTopic]:
    """`mirror`'s mirror topics at the target (those whose whole name matches `topics_regex`).
    Raises LinkOpsError when the mirror has none there, or when a matching topic is not its mirror
    topic (a normal or promoted topic, another mirror's): an operation names only its own."""
    own = [t for t in topics.values() if t.mirror == mirror]
    unknown = (f"the target has no mirror topics of mirror {mirror!r} (mirrors with topics there: "
               f"{_mirrors_there(topics)})")
    if topics_regex is None:
        if not own:
            raise LinkOpsError(unknown)
        return own
    pattern = re.compile(topics_regex)
    matching = [t for t in topics.values() if pattern.fullmatch(t.name)]
    if not matching:
        raise LinkOpsError(f"no topic at the target matches {topics_regex!r} (mirror {mirror}'s mirror topics: "
                           f"{', '.join(t.name for t in own) or 'none'})")
    others = [t for t in matching if t.mirror != mirror]
    if others:
        why = "; ".join(f"{t.name} is " + ("a normal topic (never a mirror topic, or promoted: STOPPED)"
                                            if t.mirror is None else f"the mirror topic of mirror {t.mirror}")
                        for t in others)
        raise LinkOpsError(f"not mirror {mirror}'s mirror topic(s): {why}; nothing was changed")
    return matching


async def set_paused(target_bootstrap: str, mirror: str, *, paused: bool, topics_regex: str | None = None,
                     target_security: ClientSecurity | None = None, say: Say = quiet) -> PauseReport:
    """Pause (`paused`) or resume `mirror`'s mirror topics at the target (those matching
    `topics_regex`): set or delete `causeway.mirror.state`, then wait until every broker has
    applied it (a paused topic then takes nothing more from the mirror) and read the copy's ends.
    Idempotent: a topic already so is reported in `already`. Raises LinkOpsError, changing
    nothing, as `select` does; ClientError / KafkaError when the target cannot be reached."""
    report = PauseReport()
    async with open_client(target_bootstrap, client_id="causeway-mirror-link", security=target_security) as target:
        selected = select(await mirror_topics(target), mirror, topics_regex)
        for topic in selected:
            if topic.paused == paused:
                report.already.append(topic.name)
                continue
            await alter_configs(target, topic.name, {MIRROR_STATE_CONFIG: MIRROR_PAUSED if paused else None})
            report.changed.append(topic.name)
            behind = await applied_everywhere(target, topic.name, key=MIRROR_STATE_CONFIG,
                                              value=MIRROR_PAUSED if paused else None)
            if behind:
                report.not_applied[topic.name] = behind
        counts = await list_topics(target)
        tps = {TopicPartition(t.name, p): LATEST for t in selected for p in range(counts.get(t.name, 0))}
        if tps:
            report.ends = {tp: o.offset for tp, o in (await list_offsets(target, tps)).items()}
    return report


async def describe_links(target_bootstrap: str, *, mirror: str | None = None, topics_regex: str | None = None,
                         source_bootstrap: str | None = None, stopped: list[str] | None = None,
                         reported: dict[str, TopicState] | None = None,
                         target_security: ClientSecurity | None = None,
                         source_security: ClientSecurity | None = None) -> list[LinkTopic]:
    """Each mirror topic at the target (of `mirror`, matching `topics_regex`) with its state and
    lag, and each of `stopped` (normal topics known to be the mirror's promoted ones: a topology's
    patterns say so) as STOPPED. `reported` is what the mirror process last said (its status
    file): a FAILED topic stays FAILED, with its reason. Without `source_bootstrap`, or while the
    source does not answer, lags are unknown (SOURCE_UNAVAILABLE when it was asked). Raises
    LinkOpsError for an unknown mirror."""
    pattern = re.compile(topics_regex) if topics_regex is not None else None
    async with open_client(target_bootstrap, client_id="causeway-mirror-link", security=target_security) as target:
        topics = await mirror_topics(target)
        chosen = [t for t in topics.values() if t.mirror is not None and (mirror is None or t.mirror == mirror)
                  and (pattern is None or pattern.fullmatch(t.name))]
        if mirror is not None and not any(t.mirror == mirror for t in topics.values()) and not stopped:
            raise LinkOpsError(f"the target has no mirror topics of mirror {mirror!r} (mirrors with topics there: "
                               f"{_mirrors_there(topics)})")
        promoted = [topics[name] for name in stopped or [] if name in topics and topics[name].mirror is None
                    and (pattern is None or pattern.fullmatch(name))]
        counts = await list_topics(target)
        wanted = {TopicPartition(t.name, p): LATEST for t in chosen + promoted for p in range(counts.get(t.name, 0))}
        target_ends = ({tp: o.offset for tp, o in (await list_offsets(target, wanted)).items()} if wanted else {})
    lags = {tp: PartitionLag(tp.partition, end) for tp, end in target_ends.items()}
    source_error: str | None = "no source given" if source_bootstrap is None else None
    if source_bootstrap is not None and chosen:
        source_error = await _ask_source(source_bootstrap, source_security,
                                         {tp: lag for tp, lag in lags.items() if tp.topic not in
                                          {t.name for t in promoted}})
    out: list[LinkTopic] = []
    for t in chosen:
        mine = [lags[tp] for tp in sorted(lags) if tp.topic == t.name]
        known = source_error is None and all(p.lag is not None for p in mine)
        lag = sum(p.lag or 0 for p in mine) if known else None
        times = [p.lag_ms for p in mine if p.lag]
        lag_ms = (max((x for x in times if x is not None), default=0) if known and None not in times else None)
        mirror_said = (reported or {}).get(t.name)
        if t.paused:
            state = TopicState(state="PAUSED", lag=lag, lag_ms=lag_ms)
        elif t.state == MIRROR_PROMOTING:
            state = TopicState(state="PROMOTING", lag=lag, lag_ms=lag_ms)
        elif mirror_said is not None and mirror_said.state == "FAILED":
            state = TopicState(state="FAILED", reason=mirror_said.reason, lag=lag, lag_ms=lag_ms)
        elif source_bootstrap is not None and source_error is not None:
            state = TopicState(state="SOURCE_UNAVAILABLE", reason=source_error)
        else:
            state = TopicState(state="ACTIVE", lag=lag, lag_ms=lag_ms)
        out.append(LinkTopic(t.name, t.mirror, state, mine))
    for t in promoted:
        out.append(LinkTopic(t.name, None, TopicState(state="STOPPED", reason="promoted: a normal writable topic"),
                             [lags[tp] for tp in sorted(lags) if tp.topic == t.name]))
    return sorted(out, key=lambda link: link.topic)


async def _ask_source(bootstrap: str, security: ClientSecurity | None,
                      lags: dict[TopicPartition, PartitionLag]) -> str | None:
    """Fill in the source's ends and each lagging partition's wait, within SOURCE_ASK_S; why the
    source could not say (None: it did)."""
    with trio.move_on_after(SOURCE_ASK_S) as bound:
        try:
            async with open_client(bootstrap, client_id="causeway-mirror-link", security=security,
                                   request_timeout_s=SOURCE_ASK_S, connect_timeout_s=2.0) as source:
                counts = await list_topics(source)
                here = {tp: LATEST for tp in lags if tp.partition < counts.get(tp.topic, 0)}
                ends = {tp: o.offset for tp, o in (await list_offsets(source, here)).items()} if here else {}
                for tp, lag in lags.items():
                    lag.source_end = ends.get(tp)
                behind = {tp: lag.target_end for tp, lag in lags.items() if lag.lag}
                if behind:
                    await _waits(source, behind, lags)
        except (ClientError, KafkaError) as exc:
            return str(exc) or type(exc).__name__
    if bound.cancelled_caught:
        return f"no answer within {SOURCE_ASK_S:g} s"
    return None


async def _waits(source: Client, positions: dict[TopicPartition, int], lags: dict[TopicPartition, PartitionLag]
                 ) -> None:
    """How long the first record each partition's copy lacks has waited: now minus the first
    timestamp of the source's batch holding it (one fetch, a small answer per partition)."""
    fetched = await fetch(source, positions, max_wait_ms=0, partition_max_bytes=64 * 1024)
    now = now_ms()
    for tp, got in fetched.items():
        if got.error != ErrorCode.NONE:
            continue  # below the source's log start, or moved: unknown
        for _pos, header in split_batches(whole_batches(got.records)):
            if header.last_offset >= positions[tp]:
                lags[tp].lag_ms = max(0, now - header.base_timestamp)
                break
