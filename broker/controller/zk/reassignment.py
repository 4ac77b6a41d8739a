"""Partition reassignment as Kafka's ZooKeeper-mode controller does it (KIP-455).

A reassignment moves a partition from its original replicas (ORS) to target replicas (TRS).
Asked through AlterPartitionReassignments (API 45: ``kafka-reassign-partitions --execute``) or
the legacy ``/admin/reassign_partitions`` znode, it runs on the controller's event loop in two
phases (KafkaController.onPartitionReassignment):

1. While some of TRS is not in the ISR: the topic znode gets the full replica set
   RS = TRS + ORS (target first) with ``adding_replicas`` (TRS - ORS) and ``removing_replicas``
   (ORS - TRS); the leader epoch goes one up and every replica in RS gets LeaderAndIsr, so the
   leader knows its new followers and the new replicas start fetching.
2. Once all of TRS is in the ISR (checked after every ISR change the leader makes through
   AlterPartition): the leader stays if it is in TRS and alive, else the first live TRS member
   in the ISR takes over; the removed replicas leave the ISR; RS = TRS in the state and topic
   znodes; LeaderAndIsr to TRS, StopReplica with delete to the removed replicas (their logs go),
   UpdateMetadata to every broker, and the partition leaves ``/admin/reassign_partitions``.

A new request for a partition being moved replaces the target (replicas being added that the
new target drops are stopped and deleted); ``replicas: null`` cancels: the target becomes the
original replicas again. Checks and errors are Kafka's: INVALID_REPLICA_ASSIGNMENT (empty,
duplicate, negative, or new replicas on brokers that are not alive), UNKNOWN_TOPIC_OR_PARTITION,
NO_REASSIGNMENT_IN_PROGRESS (a cancel with nothing to cancel); and KIP-578's POLICY_VIOLATION when a
new replica would take its broker past ``max.broker.partitions`` (replicas being added count from
the moment the move starts, as they do on disk). A new controller resumes the
reassignments it finds in the topic znodes' ``adding_replicas``/``removing_replicas``.

A topic with a reassignment in progress is not deleted (Kafka's markTopicIneligibleForDeletion):
its deletion stays queued (controller.py) until the reassignments of its partitions complete or
are cancelled, and a new reassignment of a topic queued for deletion is refused with
UNKNOWN_TOPIC_OR_PARTITION (Kafka's isTopicQueuedUpForDeletion). Unlike Kafka, a cancel is still
taken: it is the operator's way to let a deletion stuck behind a move that cannot finish proceed.
Replicas a reassignment removed whose brokers have not confirmed their deletion yet are
remembered, so that a deletion of the topic also waits for those brokers and deletes them there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from broker.controller.assignment import check_partition_limits, replicas_per_broker
from broker.controller.model import Reassignment
from broker.controller.zk import znodes
from broker.controller.zk.client import ZkError, ZkNoNode
from broker.controller.zk.context import ControllerContext, PartitionEntry
from broker.controller.zk.election import NO_LEADER
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["Reassignments"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
Answer = tuple[ErrorCode, "str | None"]


class Reassignments:
    """The controller's ongoing reassignments; every method runs on its event loop."""

    def __init__(self, ctx: ControllerContext, *, resume_deletion: Callable[[str], Awaitable[None]]) -> None:
        self._ctx = ctx
        # The controller's: a queued deletion of the topic proceeds once none of its moves is left.
        self._resume_deletion = resume_deletion
        self.ongoing: dict[Key, Reassignment] = {}
        # Removed replicas whose brokers have not answered their StopReplica (delete) yet.
        self._unconfirmed: dict[Key, set[int]] = {}

    def partitions_moving(self, name: str) -> list[int]:
        return sorted(p for t, p in self.ongoing if t == name)

    def unconfirmed(self, name: str, p: int, broker_id: int) -> bool:
        return broker_id in self._unconfirmed.get((name, p), ())

    def unconfirmed_brokers(self, name: str) -> set[int]:
        return {b for (t, _), brokers in self._unconfirmed.items() if t == name for b in brokers}

    def _ended(self, name: str) -> None:
        """A reassignment of ``name`` is over: a deletion waiting for it may proceed (its own event)."""
        if self._ctx.is_queued_for_deletion(name):
            self._ctx.submit(partial(self._resume_deletion, name))

    # -- requests ------------------------------------------------------------------------------

    async def alter(self, requests: Sequence[tuple[str, int, Sequence[int] | None]], *,
                    from_znode: bool = False) -> dict[Key, Answer]:
        """Start, replace or (``None``) cancel the reassignment of each partition."""
        ctx = self._ctx
        results: dict[Key, Answer] = {}
        # Replicas per broker, every topic's full replica sets (moves under way included).
        held = replicas_per_broker(e.replicas for topic in ctx.topics.values() for e in topic.partitions.values())
        for name, p, replicas in requests:
            key = (name, p)
            topic = ctx.topics.get(name)
            entry = topic.partitions.get(p) if topic is not None and name not in ctx.deleting else None
            if entry is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if replicas is not None and ctx.is_queued_for_deletion(name):
                log.info("skipping the reassignment of %s-%d: the topic is queued for deletion", name, p)
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            current = self.ongoing.get(key)
            if current is not None and current.from_znode and not from_znode:
                await self._remove_from_znode({key})  # the latest request wins, as in Kafka
            origin = current.origin if current is not None else entry.replicas
            if replicas is None:
                if current is None:
                    results[key] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                    continue
                target = origin
            else:
                target = tuple(replicas)
                problem = self._invalid(origin, target)
                if problem is not None:
                    results[key] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
                    continue
            adding = {b: 1 for b in target if b not in entry.replicas}
            try:
                check_partition_limits(ctx.config, held, 0, adding, 0)
            except KafkaError as exc:
                results[key] = (exc.code, exc.message)
                continue
            held.update(adding)
            await self._start(name, p, entry, Reassignment(origin, target, from_znode))
            results[key] = (ErrorCode.NONE, None)
        return results

    def _invalid(self, origin: tuple[int, ...], target: tuple[int, ...]) -> str | None:
        if not target:
            return "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        if any(b < 0 for b in target):
            return f"Invalid broker id in replica list: {list(target)}"
        adding = [b for b in target if b not in origin]
        if not set(adding) <= set(self._ctx.brokers):
            return (f"Replica assignment has brokers that are not alive. Replica list: {adding}, live broker list: "
                    f"{sorted(self._ctx.brokers)}")
        return None

    def list(self, partitions: Iterable[Key] | None) -> dict[Key, Reassignment]:
        ctx = self._ctx
        for key in [k for k in self.ongoing if k[0] not in ctx.topics or k[0] in ctx.deleting]:
            del self.ongoing[key]  # its topic was deleted meanwhile
        if partitions is None:
            return dict(sorted(self.ongoing.items()))
        return {key: self.ongoing[key] for key in partitions if key in self.ongoing}

    # -- phase 1 -------------------------------------------------------------------------------

    async def _start(self, name: str, p: int, entry: PartitionEntry, reassignment: Reassignment) -> None:
        ctx = self._ctx
        key = (name, p)
        previous = self.ongoing.get(key)
        # Replicas a replaced reassignment was adding that nobody wants any more.
        dropped = [b for b in (previous.full if previous is not None else ()) if b not in reassignment.full]
        self.ongoing[key] = reassignment
        entry.replicas = reassignment.full
        unconfirmed = self._unconfirmed.get(key)
        if unconfirmed is not None:
            unconfirmed -= set(reassignment.full)  # replicas wanted again are no longer strays
        await self._write_assignment(name)
        log.info("reassigning %s-%d from %s to %s (adding %s, removing %s)", name, p, list(reassignment.origin),
                 list(reassignment.target), list(reassignment.adding), list(reassignment.removing))
        if dropped:
            self._stop_and_delete(name, p, dropped, entry.state.leader_epoch if entry.state else -1)
        if await self._maybe_complete(name, p):
            return
        state = entry.state
        if state is not None and await ctx.write_state(name, p, entry, state.changed(state.leader, state.isr)):
            pass  # a new leader epoch: the leader learns its new followers
        ctx.announce([key])

    # -- phase 2 -------------------------------------------------------------------------------

    async def on_isr_changed(self, name: str, p: int) -> None:
        await self._maybe_complete(name, p)

    async def _maybe_complete(self, name: str, p: int) -> bool:
        """Finish the reassignment of ``name``-``p`` when all of its target is in the ISR."""
        ctx = self._ctx
        key = (name, p)
        reassignment = self.ongoing.get(key)
        topic = ctx.topics.get(name)
        entry = topic.partitions.get(p) if topic is not None else None
        if reassignment is None or entry is None or name in ctx.deleting:
            if self.ongoing.pop(key, None) is not None:
                self._ended(name)
            return reassignment is None
        state = entry.state
        if state is None or not set(reassignment.target) <= set(state.isr):
            return False
        live = ctx.online(name, p, ctx.live())
        leader = state.leader
        if leader not in reassignment.target or leader not in live:
            leader = next((b for b in reassignment.target if b in state.isr and b in live), NO_LEADER)
            if leader == NO_LEADER:
                log.warning("reassignment of %s-%d waits: no live replica of %s in the ISR %s can lead", name, p,
                            list(reassignment.target), list(state.isr))
                return False
        isr = [b for b in state.isr if b in reassignment.target]
        if not await ctx.write_state(name, p, entry, state.changed(leader, isr)):
            return False  # the state moved on meanwhile; the next ISR change tries again
        del self.ongoing[key]
        entry.replicas = reassignment.target
        assert entry.state is not None
        ctx.send_leader_and_isr([key])
        if reassignment.removing:
            self._stop_and_delete(name, p, list(reassignment.removing), entry.state.leader_epoch)
        await self._write_assignment(name)
        ctx.send_update_metadata(set(ctx.brokers), [key])
        if reassignment.from_znode:
            await self._remove_from_znode({key})
        log.info("reassignment of %s-%d to %s completed (leader %d, leader epoch %d)", name, p,
                 list(reassignment.target), leader, entry.state.leader_epoch)
        self._ended(name)
        return True

    def _stop_and_delete(self, name: str, p: int, brokers: Iterable[int], leader_epoch: int) -> None:
        """StopReplica with delete to each live broker of ``brokers`` for ``name``-``p``. A broker
        that is down keeps its copy (as Kafka's ZooKeeper mode does) and is told nothing of it,
        unless the topic is deleted: each copy not confirmed deleted is remembered (in this
        controller's term), and the topic's deletion deletes it when its broker is back."""
        for broker_id in brokers:
            self._unconfirmed.setdefault((name, p), set()).add(broker_id)
            if broker_id not in self._ctx.brokers:
                log.warning("broker %d is down: its replica of %s-%d is not deleted", broker_id, name, p)
                continue
            self._ctx.send_stop_replica_delete(broker_id, name, {p: leader_epoch}, self._stopped(broker_id, name, p))

    def _stopped(self, broker_id: int, name: str, p: int) -> Any:
        def check(response: Any) -> None:
            errors = [e.error_code for e in response.partition_errors if e.error_code]
            if response.error_code or errors:
                log.warning("broker %d could not delete its removed replica of %s-%d: %s", broker_id, name, p,
                            ErrorCode(response.error_code or errors[0]).name)
            else:
                log.info("broker %d deleted its removed replica of %s-%d", broker_id, name, p)
                self._ctx.submit(partial(self._confirmed, (name, p), broker_id))
        return check

    async def _confirmed(self, key: Key, broker_id: int) -> None:
        brokers = self._unconfirmed.get(key)
        if brokers is not None:
            brokers.discard(broker_id)
            if not brokers:
                del self._unconfirmed[key]

    async def forget_topic(self, name: str) -> None:
        """The topic is deleted: nothing of it stays, here or in ``/admin/reassign_partitions``
        (an entry left there would move a new topic of the same name)."""
        for key in [k for k in self.ongoing if k[0] == name]:
            del self.ongoing[key]
        for key in [k for k in self._unconfirmed if k[0] == name]:
            del self._unconfirmed[key]
        try:
            data, _ = await self._ctx.zk.get(znodes.REASSIGN_PARTITIONS)
            listed = znodes.parse_reassign_partitions(znodes.REASSIGN_PARTITIONS, data)
        except (ZkNoNode, znodes.ZnodeError):
            return
        mine = {key for key in listed if key[0] == name}
        if mine:
            await self._remove_from_znode(mine)

    async def _write_assignment(self, name: str) -> None:
        """The topic znode from the controller's view: replicas, adding_replicas, removing_replicas."""
        ctx = self._ctx
        topic = ctx.topics[name]
        path = znodes.topic_path(name)
        _, stat = await ctx.zk.get(path)
        ongoing = {p: r for (t, p), r in self.ongoing.items() if t == name}
        data = znodes.encode_topic(topic.topic_id, {p: e.replicas for p, e in topic.partitions.items()},
                                   adding={p: r.adding for p, r in ongoing.items()},
                                   removing={p: r.removing for p, r in ongoing.items()})
        await ctx.fenced_set(path, data, stat.version)

    # -- a new controller ----------------------------------------------------------------------

    async def resume(self) -> None:
        """Take over the reassignments the topic znodes show in progress."""
        ctx = self._ctx
        for name in list(ctx.topics):
            path = znodes.topic_path(name)
            try:
                data, _ = await ctx.zk.get(path)
                assignment = znodes.parse_topic(path, data)
            except ZkNoNode:
                continue
            except znodes.ZnodeError as exc:
                log.error("cannot resume reassignments of %s: %s", name, exc)
                continue
            adding, removing = assignment.adding(), assignment.removing()
            for p, replicas in assignment.replicas().items():
                if p in adding or p in removing:
                    origin = tuple(b for b in replicas if b not in adding.get(p, ()))
                    target = tuple(b for b in replicas if b not in removing.get(p, ()))
                    self.ongoing[(name, p)] = Reassignment(origin, target)
                    log.info("resuming the reassignment of %s-%d from %s to %s", name, p, list(origin), list(target))

    async def complete_resumed(self) -> None:
        for name, p in list(self.ongoing):
            await self._maybe_complete(name, p)

    # -- /admin/reassign_partitions ------------------------------------------------------------

    async def follow_znode(self) -> None:
        """Reassignments asked through the legacy znode, for the controller's term."""
        ctx = self._ctx
        with ctx.zk.watch_data(znodes.REASSIGN_PARTITIONS) as changes:
            async for data in changes:
                if data is not None:
                    ctx.submit(partial(self._from_znode, data))

    async def _from_znode(self, data: bytes) -> None:
        try:
            targets = znodes.parse_reassign_partitions(znodes.REASSIGN_PARTITIONS, data)
        except znodes.ZnodeError as exc:
            log.error("ignoring a partition reassignment: %s", exc)
            await self._remove_from_znode(None)
            return
        fresh = [(t, p, r) for (t, p), r in targets.items()
                 if (t, p) not in self.ongoing or self.ongoing[(t, p)].target != r]
        for key in targets:
            # A move this znode asked for that a new controller resumed from the topic znode: it
            # leaves the znode when it completes, as any other of the znode's moves.
            current = self.ongoing.get(key)
            if current is not None and current.target == tuple(targets[key]) and not current.from_znode:
                self.ongoing[key] = replace(current, from_znode=True)
        results = await self.alter(fresh, from_znode=True)
        failed = {key for key, (code, _) in results.items() if code != ErrorCode.NONE}
        for key in sorted(failed):
            log.warning("reassignment of %s-%d through %s failed: %s %s", *key, znodes.REASSIGN_PARTITIONS,
                        results[key][0].name, results[key][1] or "")
        await self._remove_from_znode(failed | {key for key in targets if key not in self.ongoing})

    async def _remove_from_znode(self, done: set[Key] | None) -> None:
        """Drop ``done`` (None: everything) from the znode; the znode goes once it is empty."""
        ctx = self._ctx
        path = znodes.REASSIGN_PARTITIONS
        try:
            data, stat = await ctx.zk.get(path)
            targets = {} if done is None else znodes.parse_reassign_partitions(path, data)
        except ZkNoNode:
            return
        except znodes.ZnodeError:
            targets = {}
        left = {key: r for key, r in targets.items() if done is not None and key not in done}
        if left and left == targets:
            return  # nothing done: no write (it would wake the watch for nothing)
        try:
            if left:
                await ctx.zk.set(path, znodes.encode_reassign_partitions(left), version=stat.version)
            else:
                await ctx.zk.delete(path, version=stat.version)
        except ZkError as exc:
            log.warning("cannot update %s: %s", path, exc)
