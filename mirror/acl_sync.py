"""Topic ACL sync, as MirrorMaker 2's MirrorSourceConnector does it: every
`sync.topic.acls.interval.seconds` (with `sync.topic.acls.enabled`), the source's topic ACLs are
created at the target for the topics' names there, in both modes.

What is copied follows MM2 (its syncTopicAcls, shouldReplicateAcl and targetAclBinding):

- the source's ACLs on topics (DescribeAcls: resource type Topic, any pattern) whose pattern is
  LITERAL and whose name the mirror selects: in mm2 mode, as MM2, a name its topic filters
  select, whether or not the source has that topic yet; in link mode, a mirror topic it writes
  (a topic of that name at the target that is not its own keeps its owner's ACLs). PREFIXED
  ones are left out, as MM2 leaves them;
- Allow Write is left out: a copy is written by the mirror alone;
- Allow All becomes Allow Read, for the same reason;
- every other ACL (Deny ones included: what the source forbids stays forbidden on the copy) keeps
  its principal, host, operation and permission;
- the pattern becomes LITERAL on the topic's name at the target (`east.orders` with default
  naming, `orders` with identity naming and in link mode). In mm2 mode a literal `*` (every
  topic) is a name like any other, as in MM2: `east.*` names no topic, while under identity
  naming `*` covers every topic at the target.

Unlike MM2, which creates every converted ACL each round, a round creates only those the target
lacks (it reads the target's literal topic ACLs first): an unchanged source costs two reads and
no write, and an ACL deleted at the target comes back at the next round. As in MM2, nothing is
ever deleted at the target: an ACL removed at the source stays on the copy until an operator
removes it.

The first round follows the mirror's first topic discovery round, as MM2's follows its topic
creation. A cluster that answers SECURITY_DISABLED (no authorizer) has nothing to sync: said once in the
log, as MM2 says it, and asked again only at the next round. Any other failure is in the status
(`problems["topic ACL sync"]`) and the log, and is tried again at the next round, never sooner:
ACLs are not worth hammering a cluster for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from broker.client import Client, ClientError, ErrorCode, KafkaError
from broker.client.admin import create_acls, describe_acls
from broker.retry import worth_reporting
from security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

__all__ = ["PROBLEM", "TopicAclSync", "target_acl", "target_acls"]

log = logging.getLogger(__name__)

PROBLEM = "topic ACL sync"  # its key in the status's problems

_SOURCE_TOPIC_ACLS = AclBindingFilter(ResourceType.TOPIC, None, PatternType.ANY)
_TARGET_TOPIC_ACLS = AclBindingFilter(ResourceType.TOPIC, None, PatternType.LITERAL)


def target_acl(binding: AclBinding, target_topic: Callable[[str], str | None]) -> AclBinding | None:
    """The ACL the target gets for source ACL `binding` (see the module's docstring), None when
    it gets none. `target_topic` gives a source topic's name at the target, None when the mirror
    does not select it."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type is not ResourceType.TOPIC or pattern.pattern_type is not PatternType.LITERAL:
        return None
    if entry.permission is Permission.ALLOW and entry.operation is Operation.WRITE:
        return None
    name = target_topic(pattern.name)
    if name is None:
        return None
    if entry.permission is Permission.ALLOW and entry.operation is Operation.ALL:
        entry = AccessControlEntry(entry.principal, entry.host, Operation.READ, entry.permission)
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL), entry)


def target_acls(bindings: Iterable[AclBinding], target_topic: Callable[[str], str | None]) -> list[AclBinding]:
    """`target_acl` of each of `bindings`, without repeats (Allow All and Allow Read of one
    principal both become Allow Read), sorted."""
    converted = (target_acl(b, target_topic) for b in bindings)
    return sorted({b for b in converted if b is not None})


@dataclass
class TopicAclSync:
    """What syncing topic ACLs needs of a mirror (mirror/runtime.py builds it), and the little
    it remembers between rounds."""

    source: Client
    target: Client
    source_alias: str
    target_alias: str
    interval_s: float  # sync.topic.acls.interval.seconds
    target_topic: Callable[[str], str | None]  # a source topic's name at the target, None when not selected
    problems: dict[str, str]  # the mirror's status problems: a failed round is shown under PROBLEM
    start_after: trio.Event  # the mirror's first topic discovery round: the first sync round follows it
    # The clusters (by alias) already said to have no authorizer: said once, as MM2 says it.
    said_disabled: set[str] = field(default_factory=set)
    failures: int = 0  # rounds failed in a row

    async def run(self) -> None:
        """A round now and every `interval_s`, until cancelled; a failed round is reported and
        tried again at the next."""
        await self.start_after.wait()
        while True:
            try:
                await self.sync_once()
            except (ClientError, KafkaError) as exc:
                self.failures += 1
                self.problems[PROBLEM] = str(exc)
                if worth_reporting(self.failures):
                    log.warning("topic ACL sync from %s to %s failed (%s); %d rounds in a row, trying again in %gs",
                                self.source_alias, self.target_alias, exc, self.failures, self.interval_s)
            else:
                if self.problems.pop(PROBLEM, None) is not None:
                    log.info("topic ACL sync works again after %d failed rounds", self.failures)
                self.failures = 0
            await trio.sleep(self.interval_s)

    async def sync_once(self) -> int:
        """One round: create at the target the converted source ACLs it lacks; returns how many
        were created. Raises KafkaError or ClientError when a cluster cannot be read, or when the
        target refused any of them (the others are in force)."""
        source = await self._described(self.source, self.source_alias, _SOURCE_TOPIC_ACLS)
        if source is None:
            return 0
        wanted = target_acls(source, self.target_topic)
        if not wanted:
            return 0
        present = await self._described(self.target, self.target_alias, _TARGET_TOPIC_ACLS)
        if present is None:
            return 0
        have = set(present)
        missing = [b for b in wanted if b not in have]
        if not missing:
            return 0
        results = await create_acls(self.target, missing)
        refused = [(b, exc) for b, exc in zip(missing, results, strict=True) if exc is not None]
        if refused and all(exc.code == ErrorCode.SECURITY_DISABLED for _, exc in refused):
            self._say_disabled(self.target_alias, "target")  # its authorizer went away since the read
            return 0
        created = [b for b, exc in zip(missing, results, strict=True) if exc is None]
        if created:
            log.info("topic ACLs synced from %s to %s: %s", self.source_alias, self.target_alias,
                     "; ".join(map(str, created)))
        if refused:
            raise KafkaError(refused[0][1].code, f"{len(refused)} of {len(missing)} topic ACLs refused by "
                                                 f"{self.target_alias}, first: {refused[0][1]}")
        return len(created)

    async def _described(self, client: Client, alias: str, selected: AclBindingFilter) -> list[AclBinding] | None:
        """The ACLs `selected` matches at the cluster `alias`; None when it has no authorizer."""
        try:
            return await describe_acls(client, selected)
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
        self._say_disabled(alias, "source" if client is self.source else "target")
        return None

    def _say_disabled(self, alias: str, side: str) -> None:
        if alias in self.said_disabled:
            log.debug("still no ACL authorizer at the %s cluster %s; no topic ACL sync", side, alias)
            return
        self.said_disabled.add(alias)
        log.info("no ACL authorizer is configured at the %s cluster %s, so no topic ACLs are synced; "
                 "consider setting sync.topic.acls.enabled: false", side, alias)
