"""Promotion: a link-mode mirror topic becomes a normal, writable topic.

A mirror topic is a topic whose config `causeway.mirror.name` names the link-mode mirror that
writes it (broker/server/topic_configs.py): producers are refused, its offsets are the source's.
Deleting that config (IncrementalAlterConfigs DELETE, as `kafka-configs --alter --delete-config`
does) promotes it; the mirror then stops copying into it for good. Two ways, as Confluent's
cluster linking has them (`kafka-mirrors --promote` and `--failover`):

- **promote** (a planned switch-over): the source must answer (else refused: fail over); wait,
  under a deadline, until every selected topic has at the target the source's log end on every
  partition (the mirror copied everything the source holds; producers at the source should have
  stopped), promote topic by topic, then copy the groups' committed offsets one last time
  (mirror/link_groups.py). Nothing is promoted when the deadline passes first. While it waits,
  each topic's `causeway.mirror.state` is PROMOTING (its link state, mirror/link_ops.py; ACTIVE
  again when nothing is promoted); a paused topic is refused (it would never catch up).
- **failover** (the source is down, or must not be waited for): promote at once; meanwhile ask
  the source for its log ends and the groups' offsets, which are copied one last time once
  the promotion is done. The failover never
  waits on the source: one whose every bootstrap address refuses a connection (killed brokers)
  is unreachable at once, one that has not answered within FIRST_ANSWER_S (frozen, cut off) is
  left then, the promotion having gone on meanwhile, and only one that answered gets the rest
  of a short deadline (FAILOVER_SOURCE_S). Whatever the source did not answer is reported unknown and deferred:
  records not copied per partition (truncate-and-restore counts them, into its quarantine, when
  the source returns), and the groups whose last copy is what they resume from (named, with
  those offsets; the mirror copies them often, mirror/link_groups.py, so that is little).

The groups' last copy is written once every broker applied the promotion, by a plain
OffsetCommit. The mirror commits the groups' offsets with LinkOffsetCommit, which the target
refuses on a topic that is not (any more) its mirror topic: from the promotion on, nothing the
mirror sends lands there (a slow pass, a cut-off or stale mirror process), and what it sent
before is an earlier record than the last copy, which rewrites every offset. So the DR site
holds the offsets the report gives, until the moved consumers commit their own.

Run twice, either is idempotent: the second run finds the mirror's topics normal already and
says so (`already`). mirror/promote_mm2.py is the same command for an mm2-mode mirror.
`promote` is the function; `causeway mirror promote` (deploy/cli/mirror_promote.py) the command.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import trio

from broker.client import ClientError, KafkaError, TopicPartition
from broker.client.admin import LATEST, alter_configs, describe_configs, list_offsets, list_topics
from broker.client.cluster import Client, open_client
from broker.client.groups import fetch_offsets, list_groups
from broker.protocol.constants import MIRROR_NAME_CONFIG, MIRROR_PAUSED, MIRROR_PROMOTING, MIRROR_STATE_CONFIG
from mirror.config import INTERNAL_GROUPS, INTERNAL_TOPICS, MirrorConfig
from mirror.link_groups import Carried, commit_carried, matching_groups, source_offsets
from mirror.naming import ReplicationPolicy
from mirror.promote_mm2 import promote_mm2
from mirror.promotion import (
    CONNECT_PROBE_S,
    DEFERRED,
    FAILOVER_SOURCE_S,
    FIRST_ANSWER_S,
    SOURCE_PROBE_S,
    SOURCE_TIMEOUT_S,
    PartitionEnds,
    PromotionError,
    PromotionReport,
    Say,
    quiet,
    refused,
)
from security.client import ClientSecurity

__all__ = ["FAILOVER_SOURCE_S", "PartitionEnds", "PromotionError", "PromotionReport", "SOURCE_TIMEOUT_S",
           "Selection", "promote", "select_mirror_topics"]

#: How often the wait reads both clusters' log ends, and how often it prints a progress line.
POLL_S = 0.5
PROGRESS_EVERY_S = 3.0


#: The most a promotion waits for every broker of the target to have applied it: in a ZooKeeper-
#: mode cluster each broker applies a topic config change when its notification reaches it, and
#: until then refuses producers as before.
APPLIED_TIMEOUT_S = 10.0
#: How often it asks them meanwhile: a notification usually takes milliseconds, and a failover's
#: producers wait for it.
APPLIED_POLL_S = 0.05


@dataclass
class Selection:
    selected: dict[str, str] = field(default_factory=dict)  # mirror topic -> its mirror
    skipped: list[str] = field(default_factory=list)  # the other matching topics, each with why
    normal: list[str] = field(default_factory=list)  # the matching normal topics (promoted ones among them)


async def select_mirror_topics(client: Client, *, mirror: str | None = None,
                               topics_regex: str | None = None) -> Selection:
    """The target's mirror topics (of `mirror`, when given) whose names match `topics_regex`
    (whole name), each with its mirror's name; why the other matching topics are not selected
    (for a message when nothing is); and which of them are normal topics."""
    pattern = re.compile(topics_regex) if topics_regex is not None else None
    found = Selection()
    for name in await list_topics(client):
        if pattern is not None and not pattern.fullmatch(name):
            continue
        configs = await describe_configs(client, name, keys=[MIRROR_NAME_CONFIG])
        entry = configs.get(MIRROR_NAME_CONFIG)
        owner = entry.value if entry is not None else None
        if not owner:
            found.skipped.append(f"{name} (a normal topic: not a mirror topic, or promoted already)")
            found.normal.append(name)
        elif mirror is not None and owner != mirror:
            found.skipped.append(f"{name} (a mirror topic of mirror {owner})")
        else:
            found.selected[name] = owner
    return found


async def _target_ends(client: Client, topics: Iterable[str]) -> dict[TopicPartition, int]:
    counts = await list_topics(client)
    wanted = {TopicPartition(t, p): LATEST for t in topics if t in counts for p in range(counts[t])}
    return {tp: listed.offset for tp, listed in (await list_offsets(client, wanted)).items()} if wanted else {}


async def _source_ends(client: Client, topics: Iterable[str]) -> tuple[dict[TopicPartition, int], list[str]]:
    """The source's log end per partition of `topics`, and the topics the source does not have."""
    counts = await list_topics(client)
    names = list(topics)
    wanted = {TopicPartition(t, p): LATEST for t in names if t in counts for p in range(counts[t])}
    ends = {tp: listed.offset for tp, listed in (await list_offsets(client, wanted)).items()} if wanted else {}
    return ends, [t for t in names if t not in counts]


def _ends(topics: Iterable[str], target: Mapping[TopicPartition, int],
          source: Mapping[TopicPartition, int] | None) -> list[PartitionEnds]:
    """Both sides' ends per partition, over the partitions either side has."""
    tps = set(target) | set(source or {})
    wanted = set(topics)
    return [PartitionEnds(tp.topic, tp.partition, target.get(tp), None if source is None else source.get(tp))
            for tp in sorted(tps) if tp.topic in wanted]


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _group_filter(config: MirrorConfig | None) -> Callable[[str], bool]:
    """The groups the mirror copies (its config's patterns; every group but internal ones
    without a config, as its default patterns say; none when it does not copy offsets)."""
    if config is not None and not config.sync_group_offsets:
        return lambda _group: False
    if config is not None:
        return lambda group: config.groups.matches(group, INTERNAL_GROUPS)
    return lambda group: not any(re.fullmatch(p, group) for p in INTERNAL_GROUPS)


async def promote(target_bootstrap: str, *, source_bootstrap: str | None = None, mirror: str | None = None,
                  topics_regex: str | None = None, failover: bool = False, timeout_s: float = 60.0,
                  say: Say = quiet, progress: Say | None = None, progress_every_s: float = PROGRESS_EVERY_S,
                  on_behind: Callable[[int], None] | None = None,
                  target_security: ClientSecurity | None = None,
                  source_security: ClientSecurity | None = None,
                  config: MirrorConfig | None = None) -> PromotionReport:
    """Promote the target's mirror topics (of `mirror`, matching `topics_regex`); see the module.

    Without `failover`, refuses when the source does not answer within SOURCE_PROBE_S, waits up
    to `timeout_s` for the target to hold the source's log end on every partition of every
    selected topic, copies the groups' offsets once more, then promotes them one by one; with
    it, promotes at once while the source is asked (its ends, the groups' offsets) for at most
    min(`timeout_s`, FAILOVER_SOURCE_S). `config` is the mirror's (a topology gives it): its
    group patterns choose the groups, its topic patterns say which normal topics a second run
    reports as promoted already, and an mm2-mode mirror is promoted by mirror/promote_mm2.py.
    `say` gets the report's lines (what was promoted, the groups' offsets, the records not
    copied), `progress` (`say` when None) the lines of the work meanwhile (what it starts, the
    wait for the copy), which a command's --quiet silences; `on_behind`, when given, gets the
    records still behind across the selected partitions at every poll of the wait (a progress
    bar's), and the periodic "records behind" line is left to it; `target_security` and
    `source_security` log in to each cluster (None: plaintext). Returns the report: `ok` when
    every selected topic was promoted (or all were already). Raises PromotionError when nothing
    can be selected or waited for, ClientError / KafkaError when the target cannot be read.
    """
    if config is not None and config.mode == "mm2":
        return await promote_mm2(target_bootstrap, config, source_bootstrap=source_bootstrap,
                                 topics_regex=topics_regex, failover=failover, timeout_s=timeout_s, say=say,
                                 progress=progress, target_security=target_security, source_security=source_security)
    if not failover and source_bootstrap is None:
        raise PromotionError("promotion without --failover waits for the source's log end: name the source "
                             "(--source-bootstrap, or a topology and its mirror), or use --failover")
    progress = say if progress is None else progress
    deadline = trio.current_time() + timeout_s
    groups = _group_filter(config)
    async with open_client(target_bootstrap, client_id="causeway-promote", security=target_security,
                           request_timeout_s=min(30.0, max(1.0, timeout_s))) as target:
        try:
            with trio.fail_after(max(1.0, timeout_s)):
                found = await select_mirror_topics(target, mirror=mirror, topics_regex=topics_regex)
        except trio.TooSlowError:
            raise PromotionError(f"{target_bootstrap} did not list its topics and their configs within "
                                 f"{max(1.0, timeout_s):g} s") from None
        selected = found.selected
        report = PromotionReport(target_bootstrap, source_bootstrap, failover, selected)
        report.already = _already_promoted(found.normal, config, mirror, topics_regex)
        if report.already:
            say(f"already promoted (normal topics at {target_bootstrap}): {', '.join(report.already)}")
        if not selected:
            if report.already:
                return report  # a second run: done already
            whose = f"mirror {mirror}'s mirror topics" if mirror is not None else "mirror topics"
            matching = f" matching {topics_regex!r}" if topics_regex is not None else ""
            seen = f"; found {', '.join(found.skipped)}" if found.skipped else ""
            raise PromotionError(f"{target_bootstrap} has none of {whose}{matching}: nothing to promote{seen}")
        listed = ", ".join(sorted(selected))
        progress(f"{'failover' if failover else 'promotion'} of {len(selected)} mirror topic(s) at "
                 f"{target_bootstrap}: {listed}")
        if failover:
            await _fail_over(target, report, min(timeout_s, FAILOVER_SOURCE_S), say, source_security, groups)
            return report
        assert source_bootstrap is not None
        await _refuse_paused(target, selected)
        # PROMOTING while it waits (the copy goes on): `causeway mirror describe` and the mirror's
        # status show it, and a promotion killed meanwhile leaves it said; back to ACTIVE when
        # nothing is promoted.
        await _set_state(target, selected, MIRROR_PROMOTING)
        try:
            caught_up = await _wait_caught_up(target, source_bootstrap, report, deadline, progress, progress_every_s,
                                              source_security, on_behind)
        except BaseException:
            await _set_state(target, selected, None, shielded=True)
            raise
        if not caught_up:
            await _set_state(target, selected, None, shielded=True)
            return report
        ceilings = {TopicPartition(p.topic, p.partition): p.target_end or 0 for p in report.partitions}
        await _promote_each(target, report, say)
        await _set_state(target, [t for t in selected if t in report.failed], None, shielded=True)
        # The source's producers stopped and the copy holds all it has: its groups' offsets, once
        # more, so a group moved now resumes exactly where it stopped. After the promotion, which
        # every broker applied: the mirror's own copies of them are refused from then on
        # (LinkOffsetCommit), so this is the last word (_sync_groups).
        wanted: dict[str, Carried] | None = None
        with trio.move_on_after(SOURCE_TIMEOUT_S) as bound:
            async with open_client(source_bootstrap, client_id="causeway-promote", security=source_security,
                                   request_timeout_s=SOURCE_TIMEOUT_S, connect_timeout_s=2.0) as source:
                wanted = await _source_groups(source, report, ceilings, groups)
        if bound.cancelled_caught:
            report.groups_error = f"the source did not answer within {SOURCE_TIMEOUT_S:g} s"
        elif wanted is not None:
            await _sync_groups(target, report, wanted, ceilings)
        await _unsynced_groups(target, report, groups)
        _say_groups(report, say)
        # What reached the source after the check and was not copied (its producers still ran).
        with trio.move_on_after(min(SOURCE_TIMEOUT_S, max(1.0, deadline - trio.current_time()))):
            try:
                after = await _read_both(target, source_bootstrap, report.promoted, SOURCE_TIMEOUT_S, source_security)
            except (ClientError, KafkaError, trio.TooSlowError):
                after = []  # only a note: the promotion is done
            late = [p for p in after if p.behind]
            for p in late:
                say(f"note: {p.topic}-{p.partition}: {p.behind} record(s) written at the source after the copy "
                    "caught up were not copied (its producers were still writing)")
        return report


async def _refuse_paused(target: Client, topics: Iterable[str]) -> None:
    """Raise PromotionError when a selected topic is paused: a planned promotion waits for a copy
    that a paused topic does not make. Nothing is changed."""
    paused = []
    for topic in sorted(topics):
        entry = (await describe_configs(target, topic, keys=[MIRROR_STATE_CONFIG])).get(MIRROR_STATE_CONFIG)
        if entry is not None and entry.value == MIRROR_PAUSED:
            paused.append(topic)
    if paused:
        raise PromotionError(f"mirror topic(s) {', '.join(paused)} paused: a planned promotion waits for the copy to "
                             f"catch up, which a paused topic does not; resume it (causeway mirror resume) or fail "
                             f"over (--failover); nothing was promoted")


async def _set_state(target: Client, topics: Iterable[str], state: str | None, *, shielded: bool = False) -> None:
    """Set (None: delete) each topic's `causeway.mirror.state`. `shielded`: a clean-up, done even
    when the command is being cancelled, within SOURCE_TIMEOUT_S, a failure only logged in the
    state it leaves (PROMOTING: a later promote or resume puts it right)."""
    with trio.CancelScope(shield=shielded):
        with trio.move_on_after(SOURCE_TIMEOUT_S if shielded else math.inf):
            for topic in sorted(topics):
                try:
                    await alter_configs(target, topic, {MIRROR_STATE_CONFIG: state})
                except (KafkaError, ClientError):
                    if not shielded:
                        raise


def _already_promoted(normal: list[str], config: MirrorConfig | None, mirror: str | None,
                      topics_regex: str | None) -> list[str]:
    """The normal topics at the target that this promotion would have selected as mirror
    topics: the mirror's topics (by its config's patterns; link mode keeps names), or, without
    a config, the topics `topics_regex` names when no mirror is named (a named mirror's topics
    cannot be told from the target's own without its config): unknown (none) otherwise."""
    if config is not None:  # the mirror's own heartbeats are never a mirror topic
        return [t for t in normal
                if config.topics.matches(t, INTERNAL_TOPICS) and not ReplicationPolicy.is_heartbeats(t)]
    return list(normal) if topics_regex is not None and mirror is None else []


async def _source_groups(source: Client, report: PromotionReport, ceilings: Mapping[TopicPartition, int],
                         groups: Callable[[str], bool]) -> dict[str, Carried] | None:
    """The source's groups' committed offsets on `ceilings`' partitions (None, with
    `report.groups_error`, when the source does not answer)."""
    try:
        return await source_offsets(source, await matching_groups(source, groups), set(ceilings))
    except (ClientError, KafkaError) as exc:
        report.groups_error = _why(exc)
        return None


async def _sync_groups(target: Client, report: PromotionReport, wanted: Mapping[str, Carried],
                       ceilings: Mapping[TopicPartition, int]) -> None:
    """Commit the source's groups' offsets (`wanted`) on the promoted topics one last time, each
    at most the copy's end there (`ceilings`: what the copy held before the topic became
    writable, so a group never skips a record written at the target after the promotion).

    Called once every broker applied the promotion: the mirror's commits are refused from then
    on, and one it made before is an earlier record of `__consumer_offsets` than this commit,
    which writes every offset again (even one the target holds: a commit of the mirror not yet
    replicated may not show yet), so the target holds what the report says."""
    promoted = set(report.promoted)
    mine = {group: kept for group, offsets in wanted.items()
            if (kept := {tp: c for tp, c in offsets.items() if tp.topic in promoted})}
    try:
        carried = await commit_carried(target, mine, ceilings=ceilings, rewrite=True)
    except (ClientError, KafkaError) as exc:
        report.groups_error = _why(exc)
        return
    report.groups_synced, report.groups_active = carried.offsets, carried.active


async def _unsynced_groups(target: Client, report: PromotionReport, groups: Callable[[str], bool]) -> None:
    """When the last copy of the groups' offsets did not happen: each group's offsets at the
    target on the selected topics (the copy it resumes from). Bounded: the target answers."""
    if report.groups_error is None:
        return
    topics = set(report.selected)
    with trio.move_on_after(SOURCE_TIMEOUT_S):
        try:
            for listing in await list_groups(target):
                if listing.group_id in report.groups_synced or not groups(listing.group_id):
                    continue
                # Stable: a commit of the mirror appended before the promotion applied and not
                # yet replicated is waited for, so what is said is what the target holds.
                offsets = await fetch_offsets(target, listing.group_id, require_stable=True)
                mine = {tp: c.offset for tp, c in offsets.items() if tp.topic in topics and c.offset >= 0}
                if mine:
                    report.groups_unsynced[listing.group_id] = mine
        except (ClientError, KafkaError):
            pass  # a note only: the groups are named as unknown below


def _say_groups(report: PromotionReport, say: Say) -> None:
    for group, offsets in sorted(report.groups_synced.items()):
        say(f"group {group}: offsets copied one last time: {_offsets(offsets)}")
    for group in report.groups_active:
        say(f"group {group}: consumers are live at the target: its offsets there are its own, left alone")
    if report.groups_error is None:
        return
    if not report.groups_unsynced:
        say(f"groups: not copied at the end ({report.groups_error}); no group has offsets on these topics "
            "at the target")
        return
    say(f"groups NOT copied at the end ({report.groups_error}): they resume from their last copied offsets, "
        "and re-read what they consumed at the source since")
    for group, offsets in sorted(report.groups_unsynced.items()):
        say(f"  group {group}: last copied {_offsets(offsets)}")


def _offsets(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition} {offset}" for tp, offset in sorted(offsets.items())) or "none"


async def _read_both(target: Client, source_bootstrap: str, topics: list[str],
                     source_timeout_s: float, source_security: ClientSecurity | None) -> list[PartitionEnds]:
    target_ends = await _target_ends(target, topics)
    async with open_client(source_bootstrap, client_id="causeway-promote", security=source_security,
                           request_timeout_s=source_timeout_s, connect_timeout_s=min(2.0, source_timeout_s)) as source:
        with trio.fail_after(source_timeout_s):
            source_ends, _missing = await _source_ends(source, topics)
    return _ends(topics, target_ends, source_ends)


async def _refuse_without_source(source: Client, source_bootstrap: str, topics: list[str]) -> None:
    """Raise PromotionError (use --failover) when the source does not answer within
    SOURCE_PROBE_S: a planned promotion is checked against the source, and one that is gone
    would only be waited for until the deadline."""
    why = f"no answer within {SOURCE_PROBE_S:g} s"
    with trio.move_on_after(SOURCE_PROBE_S):
        try:
            await _source_ends(source, topics)
            return
        except (ClientError, KafkaError) as exc:
            why = _why(exc)
    raise PromotionError(f"the source {source_bootstrap} does not answer ({why}): a planned promotion checks the "
                         "copy against the source's log ends and copies the groups' offsets from it. If the source "
                         "is lost, fail over instead: the same command with --failover")


async def _wait_caught_up(target: Client, source_bootstrap: str, report: PromotionReport, deadline: float,
                          say: Say, progress_every_s: float, source_security: ClientSecurity | None,
                          on_behind: Callable[[int], None] | None = None) -> bool:
    """Poll both clusters' log ends until every selected partition is caught up (True) or the
    deadline passes (False, with `report.failed` naming what is behind and why); `on_behind`
    gets the records behind at each poll the source answered."""
    topics = sorted(report.selected)
    last: list[PartitionEnds] = []
    next_line = -math.inf
    missing: list[str] = []
    total_s = max(0.0, deadline - trio.current_time())
    say(f"waiting up to {total_s:.0f} s for the copy to reach the source's log end on every partition")
    async with open_client(source_bootstrap, client_id="causeway-promote", request_timeout_s=5.0,
                           connect_timeout_s=2.0, security=source_security) as source:
        await _refuse_without_source(source, source_bootstrap, topics)
        with trio.move_on_after(max(0.0, deadline - trio.current_time())):
            while True:
                target_ends = await _target_ends(target, topics)
                try:
                    source_ends, missing = await _source_ends(source, topics)
                    report.source_error = None
                except (ClientError, KafkaError) as exc:
                    source_ends, report.source_error = None, _why(exc)
                last = _ends(topics, target_ends, source_ends)
                if missing:
                    break  # waiting cannot help: the source lost the topic
                done = sum(p.caught_up for p in last)
                if source_ends is not None and on_behind is not None:
                    on_behind(sum(p.behind or 0 for p in last))
                if source_ends is not None and done == len(last):
                    report.partitions = last
                    say(f"caught up: {done}/{len(last)} partitions at the source's log end")
                    return True
                now = trio.current_time()
                if now >= next_line:
                    next_line = now + progress_every_s
                    left = max(0.0, deadline - now)
                    if source_ends is None:
                        say(f"  the source does not answer ({report.source_error}); {left:.0f} s left")
                    elif on_behind is None:
                        records = sum(p.behind or 0 for p in last)
                        say(f"  {done}/{len(last)} partitions caught up, {records} record(s) behind; "
                            f"{left:.0f} s left")
                await trio.sleep(POLL_S)
    report.partitions = last
    if missing:
        for topic in topics:
            report.failed[topic] = ("not promoted: the source has no topic " + ", ".join(missing)
                                    + " (deleted there?), so the copy cannot be checked; --failover promotes anyway")
        return False
    report.timed_out = True
    behind = [p for p in last if not p.caught_up]
    for topic in topics:
        mine = [p for p in behind if p.topic == topic]
        if report.source_error is not None:
            why = f"after {total_s:.0f} s the source did not answer ({report.source_error})"
        elif mine:
            why = f"after {total_s:.0f} s still behind: " + "; ".join(
                f"partition {p.partition} {p.behind if p.behind is not None else 'unknown'} record(s)" for p in mine)
        else:
            why = f"caught up, but other selected topics were still behind after {total_s:.0f} s"
        report.failed[topic] = f"not promoted: {why}"
    return False


async def _promote_each(target: Client, report: PromotionReport, say: Say) -> None:
    """Delete `causeway.mirror.name` topic by topic (a refusal is recorded and the rest go on),
    then wait for every broker to apply them, all topics at once."""
    for topic in sorted(report.selected):
        try:
            # Its link state goes with it: a promoted topic is no link's to pause (STOPPED).
            await alter_configs(target, topic, {MIRROR_NAME_CONFIG: None, MIRROR_STATE_CONFIG: None})
        except (KafkaError, ClientError) as exc:
            report.failed[topic] = f"the target refused its promotion: {_why(exc)}"
            say(f"NOT promoted {topic}: {report.failed[topic]}")
            continue
        report.promoted.append(topic)
    behind: dict[str, list[int]] = {}

    async def wait_applied(topic: str) -> None:
        behind[topic] = await applied_everywhere(target, topic)

    async with trio.open_nursery() as nursery:
        for topic in report.promoted:
            nursery.start_soon(wait_applied, topic)
    for topic in report.promoted:
        if behind[topic]:
            say(f"promoted {topic}, but broker(s) {', '.join(map(str, behind[topic]))} did not show it within "
                f"{APPLIED_TIMEOUT_S:g} s: they refuse producers until they do")
        else:
            say(f"promoted {topic}: a normal writable topic now (mirror {report.selected[topic]} no longer writes it)")


async def applied_everywhere(target: Client, topic: str, timeout_s: float = APPLIED_TIMEOUT_S, *,
                             key: str = MIRROR_NAME_CONFIG, value: str | None = None) -> list[int]:
    """Wait until every broker of `target` describes `topic` with config `key` at `value` (None:
    unset; by default, without `causeway.mirror.name`: promoted), each answering from what it
    has applied, at most `timeout_s`; the brokers that still do not."""
    try:
        metadata = await target.refresh_metadata([topic])
    except (KafkaError, ClientError):
        return []  # nobody to ask: the alter itself was answered, which is all there is to know
    pending = set(metadata.brokers)
    with trio.move_on_after(timeout_s):
        while pending:
            for node in sorted(pending):
                try:
                    configs = await describe_configs(target, topic, keys=[key], node_id=node)
                except (KafkaError, ClientError):
                    continue  # down or busy: asked again until the deadline
                entry = configs.get(key)
                if (entry.value if entry is not None and entry.value else None) == value:
                    pending.discard(node)
            if pending:
                await trio.sleep(APPLIED_POLL_S)
    return sorted(pending)


async def _fail_over(target: Client, report: PromotionReport, source_timeout_s: float, say: Say,
                     source_security: ClientSecurity | None, groups: Callable[[str], bool]) -> None:
    """Promote at once; meanwhile ask the source for its log ends and the groups' offsets once
    more. The source is never waited for: a source that refuses connections is left at once,
    one that has not answered within FIRST_ANSWER_S (the promotion going on meanwhile) is left
    then, and one that answered is given at most `source_timeout_s` in all. What it did not answer is reported
    unknown (deferred: truncate-and-restore counts the records when it returns)."""
    topics = sorted(report.selected)
    # The copy's ends before anything can be written at the target: the ceiling of the groups'
    # offsets copied from the source (which may hold more than the copy).
    ceilings = await _target_ends(target, topics)
    source_ends: dict[TopicPartition, int] | None = None
    wanted: dict[str, Carried] | None = None  # the source's groups' offsets, when it answered
    answered = False  # the source's first answer: it is alive, worth its short bound
    settled = trio.Event()  # that answer, or the ask over (refused, failed, done)
    asking = trio.CancelScope()

    async def ask_source() -> None:
        try:
            await ask()
        finally:
            settled.set()

    async def ask() -> None:
        nonlocal source_ends, answered, wanted
        if report.source is None:
            report.source_error = report.groups_error = "no source given"
            return
        with asking, trio.move_on_after(source_timeout_s) as bound:
            why = await refused(report.source, min(CONNECT_PROBE_S, source_timeout_s))
            if why is not None:
                report.source_error = report.groups_error = f"source unreachable, {why}"
                return
            try:
                async with open_client(report.source, client_id="causeway-promote", security=source_security,
                                       request_timeout_s=source_timeout_s,
                                       connect_timeout_s=min(2.0, source_timeout_s)) as source:
                    source_ends, _missing = await _source_ends(source, topics)
                    answered = True
                    settled.set()
                    wanted = await _source_groups(source, report, ceilings, groups)
            except (ClientError, KafkaError) as exc:
                report.source_error = report.groups_error = _why(exc)
                return
        if asking.cancelled_caught:
            why = f"source unreachable, no answer within {min(FIRST_ANSWER_S, source_timeout_s):g} s"
        elif bound.cancelled_caught:
            why = f"no answer within {source_timeout_s:g} s"
        else:
            return
        report.source_error = report.source_error if source_ends is not None else why
        report.groups_error = report.groups_error or why

    async with trio.open_nursery() as nursery:
        asked_at = trio.current_time()
        nursery.start_soon(ask_source)
        await _promote_each(target, report, say)
        # A live source over a long link may answer just after the promotion: it gets until
        # FIRST_ANSWER_S from the ask. One that said nothing by then is not waited for.
        with trio.move_on_at(asked_at + min(FIRST_ANSWER_S, source_timeout_s)):
            await settled.wait()
        if not answered:
            asking.cancel()
    if wanted is not None and report.groups_error is None:
        # Once every broker applied the promotion: the mirror's commits are fenced by then.
        await _sync_groups(target, report, wanted, ceilings)
    await _report_not_copied(target, report, source_ends, say)
    await _unsynced_groups(target, report, groups)
    _say_groups(report, say)


async def _report_not_copied(target: Client, report: PromotionReport,
                             source_ends: Mapping[TopicPartition, int] | None, say: Say) -> None:
    """After a failover: each promoted partition's records not copied (unknown without a source)."""
    topics = report.promoted
    if not topics:
        return
    target_ends = await _target_ends(target, topics)
    report.partitions = _ends(topics, target_ends, source_ends)
    if source_ends is None:
        say(f"records not copied: unknown ({report.source_error}); {DEFERRED}")
    else:
        say(f"records not copied: {sum(p.behind or 0 for p in report.partitions)} in all")
    for p in report.partitions:
        say(f"  {p}")
