"""The elected controller of a ZooKeeper-mode cluster (Kafka's KafkaController).

Every broker runs :func:`run_controller_election`: whoever creates the ephemeral ``/controller``
znode first is the controller, until its ZooKeeper session ends. On winning it increments
``/controller_epoch`` by a conditional write (a zombie controller's later writes and requests are
refused by that epoch), reads the brokers, topics and partition states, and from then on reacts
to ZooKeeper, one event at a time, as Kafka's controller event thread does:

* ``/brokers/ids`` changed: a broker whose session ended (or that re-registered, a new broker
  epoch) loses its leaderships to the next live ISR member and leaves every ISR; a new broker is
  told the metadata and its replicas, and offline partitions it can lead get a leader again;
* ``/brokers/topics`` changed, or a topic's assignment grew: the new partitions get their first
  leader and ISR (the live replicas) in a new state znode;
* ``/admin/delete_topics``: the replicas are stopped and deleted (StopReplica), then the znodes go;
  a topic with a partition reassignment in progress stays queued (Kafka's "ineligible for
  deletion") until the reassignments of its partitions are finished or cancelled;
* AlterPartition from a leader (KIP-497): checked against the leader epoch and the partition
  epoch, written, answered;
* ControlledShutdown from a broker: its leaderships move away first.
* ``/log_dir_event_notification`` (a broker's log dir went offline, or came back): the broker gets
  LeaderAndIsr for every replica it holds, as Kafka's onBrokerLogDirFailure sends; the replicas it
  answers KAFKA_STORAGE_ERROR for are offline (every LeaderAndIsr answer says so, Kafka's
  replicasOnOfflineDirs): they leave leadership and ISR as if their broker had died, and count as
  dead in every election until an answer says they are back (then offline partitions they can
  lead get them as leader again; the leader takes them back into the ISR once they catch up).
* ElectLeaders and ``/admin/preferred_replica_election``: preferred or unclean elections on
  request (leader_election.py); AlterPartitionReassignments and ``/admin/reassign_partitions``:
  replicas moved between brokers (reassignment.py).

The term's state (brokers, topics, deletions, shutdowns) and the actions taken with it (state
znode writes, requests to brokers, jobs on the event loop) are a ControllerContext (context.py),
which is all that the helpers (leader_election.py, reassignment.py) see of the controller.

Partition state znodes are only ever written conditionally on their zkVersion, in a transaction
that also checks ``/controller_epoch`` is still ours; the new zkVersion is the partition epoch the
brokers receive in LeaderAndIsr and UpdateMetadata. A lost session (or a write that finds a newer
controller) ends the term: the controller resigns and its brokers' queues are dropped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from broker.config import BrokerConfig
from broker.controller import controller_metrics
from broker.controller.model import PartitionInfo, Reassignment, is_internal_topic, validate_topic_name
from broker.controller.zk import znodes
from broker.controller.zk.client import (
    CreateOp,
    SetOp,
    ZkBadVersion,
    ZkClient,
    ZkError,
    ZkNodeExists,
    ZkNoNode,
    ZkSessionExpired,
    ZnodeStat,
)
from broker.controller.zk.context import (
    EPOCH_DURING_DELETE,
    BrokerEntry,
    ControllerContext,
    PartitionEntry,
    Resigned,
    TopicEntry,
)
from broker.controller.zk.election import (
    NO_LEADER,
    LeaderAndIsr,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    initial_leader_and_isr,
    on_broker_loss,
)
from broker.controller.zk.leader_election import elect_leaders, follow_preferred_replica_election
from broker.controller.zk.leader_epochs import raise_leader_epochs
from broker.controller.zk.reassignment import Reassignments
from broker.ids import random_uuid
from broker.protocol.errors import ErrorCode, KafkaError
from broker.tasks import leaves

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["ZkController", "run_controller_election"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The least time between two terms of this broker as controller.
_MIN_TERM_S = 1.0


class ZkController:
    """One term of this broker as the controller; see the module docstring."""

    def __init__(self, config: BrokerConfig, zk: ZkClient, *, security: ClientSecurity | None = None) -> None:
        """`security`: how requests reach the brokers' inter-broker listener; None: PLAINTEXT."""
        self.broker_id = config.broker_id
        self._ctx = ControllerContext(config, zk, self._replica_states, security=security)
        self._reassignments = Reassignments(self._ctx, resume_deletion=self._resume_deletion)
        self._nursery: trio.Nursery | None = None
        self._ready = trio.Event()
        self._ended = trio.Event()

    # -- the term ---------------------------------------------------------------------------

    async def serve(self, epoch: int, epoch_version: int, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Act as controller with ``epoch`` until cancelled; raises Resigned when a newer
        controller shows up."""
        self._ctx.epoch, self._ctx.epoch_version = epoch, epoch_version
        controller_metrics.serving(self, self._ctx.leaders)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self._ctx.channel.run)
                await self._failover()
                nursery.start_soon(self._watch, znodes.BROKER_IDS, self._on_brokers)
                nursery.start_soon(self._watch, znodes.BROKER_TOPICS, self._on_topics)
                nursery.start_soon(self._watch, znodes.DELETE_TOPICS, self._on_delete_topics)
                nursery.start_soon(self._watch, znodes.LOG_DIR_EVENT_NOTIFICATION, self._on_log_dir_events)
                nursery.start_soon(follow_preferred_replica_election, self._ctx)
                nursery.start_soon(self._reassignments.follow_znode)
                if self._ctx.config.auto_leader_rebalance_enable:
                    nursery.start_soon(self._rebalance_forever)
                self._ready.set()
                task_status.started()
                async for job in self._ctx.jobs:
                    try:
                        await job()
                    except (Resigned, ZkError):
                        raise  # the term ends (a newer controller, or ZooKeeper failing under a write)
                    except Exception:  # noqa: BLE001 - one bad event must not stop the controller
                        log.exception("controller %d: an event failed; carrying on", self.broker_id)
        finally:
            # Requests waiting on this term are answered NOT_CONTROLLER (see _call).
            self._ended.set()
            controller_metrics.resigned(self)

    async def _call(self, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` on the controller's event loop (one event at a time) and return its result."""
        done = trio.Event()
        box: list[Any] = []

        async def run() -> None:
            try:
                box.append((True, await job()))
            except (Resigned, ZkSessionExpired) as exc:
                box.append((False, KafkaError(ErrorCode.NOT_CONTROLLER, str(exc))))
                raise  # the term is over
            except ZkError as exc:
                box.append((False, KafkaError(ErrorCode.NOT_CONTROLLER, f"ZooKeeper: {exc}")))
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        await _first_of(self._ready, self._ended)
        if self._ended.is_set():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is no longer the controller")
        self._ctx.submit(run)
        await _first_of(done, self._ended)
        if not box:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is no longer the controller")
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    async def _watch(self, path: str, handle: Callable[[list[str]], Awaitable[None]]) -> None:
        with self._ctx.zk.watch_children(path) as changes:
            async for children in changes:
                self._ctx.submit(partial(handle, children))

    # -- failover: read everything, tell everyone --------------------------------------------

    async def _failover(self) -> None:
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self._ctx.epoch)
        for broker_id in await self._ctx.zk.get_children(znodes.BROKER_IDS):
            await self._load_broker(broker_id)
        for name in await self._ctx.zk.get_children(znodes.BROKER_TOPICS):
            await self._load_topic(name)
        await self._reassignments.resume()
        for broker in self._ctx.brokers.values():
            self._ctx.add_to_channel(broker)
        # Brokers that died while nobody was controller leave leaderships and ISRs; offline and
        # new partitions get leaders; then everyone learns the whole state under this epoch.
        await self._on_brokers_failed(set(), notify=False)
        await self._elect_where_needed(notify=False)
        self._ctx.announce(self._ctx.all_partitions())
        await self._reassignments.complete_resumed()

    async def _load_broker(self, child: str) -> BrokerEntry | None:
        path = f"{znodes.BROKER_IDS}/{child}"
        try:
            data, stat = await self._ctx.zk.get(path)
            registration = znodes.parse_broker(path, data)
        except ZkNoNode:
            return None
        except znodes.ZnodeError as exc:
            log.error("ignoring broker registration: %s", exc)
            return None
        broker = BrokerEntry(registration.broker_info(int(child)), stat.czxid, registration.security_protocols())
        self._ctx.brokers[int(child)] = broker
        return broker

    async def _load_topic(self, name: str) -> TopicEntry | None:
        path = f"{znodes.BROKER_TOPICS}/{name}"
        problem = validate_topic_name(name)
        if problem is not None:
            log.error("ignoring znode %s: %s", path, problem)
            return None
        try:
            data, _ = await self._ctx.zk.get(path)
            assignment = znodes.parse_topic(path, data)
        except ZkNoNode:
            return None
        except (znodes.ZnodeError, ValueError) as exc:
            log.error("ignoring topic: %s", exc)
            return None
        topic_id = assignment.uuid()
        if topic_id is None:
            # A topic written by a tool without topic ids (version 1/2): give it one, as Kafka does.
            topic_id = random_uuid()
            try:
                _, stat = await self._ctx.zk.get(path)
                await self._ctx.zk.set(path, znodes.encode_topic(topic_id, assignment.replicas()), version=stat.version)
            except ZkError as exc:
                log.warning("cannot add a topic id to %s: %s", path, exc)
        topic = self._ctx.topics.get(name)
        if topic is None:
            topic = TopicEntry(name, topic_id)
            self._ctx.topics[name] = topic
            assert self._nursery is not None
            self._nursery.start_soon(self._watch_assignment, topic)
        for partition, replicas in assignment.replicas().items():
            if partition in topic.partitions:
                continue
            entry = PartitionEntry(tuple(replicas))
            await self._ctx.read_state(name, partition, entry)
            topic.partitions[partition] = entry
        return topic

    async def _watch_assignment(self, topic: TopicEntry) -> None:
        with topic.watch:
            path = znodes.topic_path(topic.name)
            # The first value too: the assignment may have grown since _load_topic read it
            # (_on_assignment changes nothing when it did not).
            with self._ctx.zk.watch_data(path) as changes:
                async for data in changes:
                    if data is not None:
                        self._ctx.submit(partial(self._on_assignment, topic.name))

    # -- events ------------------------------------------------------------------------------

    async def _on_brokers(self, children: list[str]) -> None:
        before = {b: broker.epoch for b, broker in self._ctx.brokers.items()}
        now: dict[int, BrokerEntry] = {}
        for child in children:
            if not child.isdigit():
                continue
            broker = await self._load_broker(child)
            if broker is not None:
                now[int(child)] = broker
        self._ctx.brokers = now
        dead = {b for b in before if b not in now}
        bounced = {b for b in before if b in now and now[b].epoch != before[b]}
        new = {b for b in now if b not in before}
        if not (dead or bounced or new):
            return
        log.info("brokers changed: live %s, new %s, gone %s, re-registered %s", sorted(now), sorted(new),
                 sorted(dead), sorted(bounced))
        for b in dead | bounced:
            self._ctx.channel.remove_broker(b)
            self._ctx.shutting_down.discard(b)
            self._ctx.offline.pop(b, None)  # a restarted broker's answers say afresh what is offline
        for b in new | bounced:
            self._ctx.add_to_channel(now[b])
        if dead or bounced:
            await self._on_brokers_failed(dead | bounced)
        if new or bounced:
            await self._on_brokers_started(new | bounced)

    async def _on_brokers_failed(self, failed: set[int], *, notify: bool = True) -> None:
        """Partitions led by, or with ISR members among, brokers outside the live set (and
        ``failed``, which may have re-registered) or replicas in offline log dirs get a new leader
        and ISR."""
        live = set(self._ctx.brokers) - failed
        changed = []
        for topic, p, entry in self._ctx.iter_partitions():
            if entry.state is None:
                continue
            online = self._ctx.online(topic, p, live)
            gone = (entry.state.leader != NO_LEADER and entry.state.leader not in online) or any(
                b not in online for b in entry.state.isr)
            if not gone:
                continue
            new = on_broker_loss(entry.replicas, entry.state, online, unclean=False)
            if new is not None and new.leader == NO_LEADER and await self._unclean(topic):
                new = on_broker_loss(entry.replicas, entry.state, online, unclean=True)
            if new is not None and await self._ctx.write_state(topic, p, entry, new):
                changed.append((topic, p))
                if new.leader == NO_LEADER:
                    log.warning("partition %s-%d is offline: no live replica in its ISR %s", topic, p, list(new.isr))
        if notify:
            self._ctx.announce(changed)

    async def _on_brokers_started(self, started: set[int]) -> None:
        # The new brokers learn everything; the others learn the new broker list.
        self._ctx.send_update_metadata(started, self._ctx.all_partitions())
        self._ctx.send_update_metadata(set(self._ctx.brokers) - started, [])
        mine = [(t, p) for t, p, entry in self._ctx.iter_partitions() if started & set(entry.replicas)]
        self._ctx.send_leader_and_isr(mine, only=started)
        # Deletions waiting for these brokers: their replicas go now.
        for name, pending in list(self._ctx.deleting.items()):
            for broker_id in sorted(pending & started):
                self._send_stop_replica_delete(self._ctx.topics[name], broker_id)
        await self._elect_where_needed()

    async def _on_topics(self, children: list[str]) -> None:
        new = [name for name in children if name not in self._ctx.topics]
        for name in new:
            topic = await self._load_topic(name)
            if topic is not None:
                log.info("new topic %s with %d partitions", name, len(topic.partitions))
        if new:
            await self._elect_where_needed()

    async def _on_assignment(self, name: str) -> None:
        if name not in self._ctx.topics or name in self._ctx.deleting:
            return
        before = set(self._ctx.topics[name].partitions)
        topic = await self._load_topic(name)
        if topic is not None and set(topic.partitions) != before:
            log.info("topic %s grew to %d partitions", name, len(topic.partitions))
            await self._elect_where_needed()

    async def _on_delete_topics(self, children: list[str]) -> None:
        self._ctx.queued &= set(children)  # an operator may withdraw a queued deletion (its znode gone)
        for name in children:
            if name in self._ctx.deleting or name in self._ctx.queued:
                continue
            if await self._refused_deletion(name):
                continue
            topic = self._ctx.topics.get(name)
            if topic is None:
                await self._delete_quietly(f"{znodes.DELETE_TOPICS}/{name}")
                continue
            moving = self._reassignments.partitions_moving(name)
            if moving:
                # Deleting now would lose the move's state (and leave its znode entries and the
                # replicas it adds or removes behind): the deletion waits for it, as in Kafka.
                self._ctx.queued.add(name)
                log.warning("deletion of topic %s waits: partitions %s are being reassigned; it proceeds once "
                            "their reassignments complete or are cancelled", name, moving)
                continue
            await self._start_deletion(topic)

    async def _refused_deletion(self, name: str) -> bool:
        """Refuse a deletion asked for through the znode past the broker's DeleteTopics (zkCli,
        ``kafka-topics --zookeeper``): the request znode goes and the log says why. Internal topics
        are never deleted (every group's committed offsets live in ``__consumer_offsets``: DeleteTopics
        answers INVALID_TOPIC_EXCEPTION, the controller holds the same line); with
        delete.topic.enable=false nothing is, as Kafka's controller removes the entries then."""
        path = f"{znodes.DELETE_TOPICS}/{name}"  # a child's name, as ZooKeeper listed it
        if is_internal_topic(name):
            log.error("refused the deletion of topic %s asked through %s: it is a kafka internal topic and is not "
                      "allowed to be marked for deletion (its loss would take every group's committed offsets); "
                      "the request znode is removed", name, path)
        elif not self._ctx.config.delete_topic_enable:
            log.warning("removed %s: topic deletion is disabled (delete.topic.enable=false)", path)
        else:
            return False
        await self._delete_quietly(path)
        return True

    async def _resume_deletion(self, name: str) -> None:
        """A reassignment of ``name`` ended: its queued deletion proceeds once none is left."""
        topic = self._ctx.topics.get(name)
        if name not in self._ctx.queued or self._reassignments.partitions_moving(name) or topic is None:
            return
        self._ctx.queued.discard(name)
        log.info("no partition of topic %s is being reassigned any more; its deletion proceeds", name)
        await self._start_deletion(topic)

    async def _start_deletion(self, topic: TopicEntry) -> None:
        """Kafka's TopicDeletionManager: every replica is stopped and deleted (StopReplica with
        delete); the topic's znodes go only once each replica's broker has answered. A broker that
        is down meanwhile gets its StopReplica when it registers again, so no stale log of the
        topic survives it (to be taken, say, for a new topic of the same name)."""
        log.info("deleting topic %s", topic.name)
        topic.watch.cancel()
        # Every replica, and those a reassignment removed that their brokers have not confirmed
        # deleting yet (down, or not answered): no copy of the topic may outlive it.
        pending = {b for entry in topic.partitions.values() for b in entry.replicas}
        pending |= self._reassignments.unconfirmed_brokers(topic.name)
        self._ctx.deleting[topic.name] = pending
        # Clients stop seeing it now (leader -2 marks a deleted partition in UpdateMetadata).
        self._ctx.send_update_metadata(set(self._ctx.brokers), [(topic.name, p) for p in topic.partitions],
                                       deleting=True)
        for broker_id in sorted(pending & set(self._ctx.brokers)):
            self._send_stop_replica_delete(topic, broker_id)
        waiting = sorted(pending - set(self._ctx.brokers))
        if waiting:
            log.warning("deletion of topic %s waits for brokers %s to come back and delete their replicas",
                        topic.name, waiting)
        if not pending:
            await self._finish_deletion(topic.name)

    def _send_stop_replica_delete(self, topic: TopicEntry, broker_id: int) -> None:
        partitions = sorted(p for p, entry in topic.partitions.items()
                            if broker_id in entry.replicas or self._reassignments.unconfirmed(topic.name, p, broker_id))

        def answered(response: Any) -> None:
            self._ctx.submit(partial(self._replicas_deleted, topic.name, broker_id, response))

        self._ctx.send_stop_replica_delete(broker_id, topic.name, dict.fromkeys(partitions, EPOCH_DURING_DELETE),
                                           answered)

    async def _replicas_deleted(self, name: str, broker_id: int, response: Any) -> None:
        pending = self._ctx.deleting.get(name)
        if pending is None:
            return
        failed = [p.partition_index for p in response.partition_errors if p.error_code]
        if response.error_code or failed:
            log.warning("broker %d could not delete the replicas of %s (%s); retried when it registers again",
                        broker_id, name, ErrorCode(response.error_code).name if response.error_code else failed)
            return
        pending.discard(broker_id)
        if not pending:
            await self._finish_deletion(name)

    async def _finish_deletion(self, name: str) -> None:
        self._ctx.deleting.pop(name, None)
        self._ctx.topics.pop(name, None)
        await self._reassignments.forget_topic(name)
        await self._delete_quietly(znodes.topic_path(name), recursive=True)
        await self._delete_quietly(znodes.topic_config_path(name))
        await self._delete_quietly(znodes.delete_topic_path(name))
        log.info("deleted topic %s", name)

    async def _delete_quietly(self, path: str, *, recursive: bool = False) -> None:
        try:
            await self._ctx.zk.delete(path, recursive=recursive)
        except ZkNoNode:
            pass

    # -- log dir failures ----------------------------------------------------------------------

    async def _on_log_dir_events(self, children: list[str]) -> None:
        """Kafka's processLogDirEventNotification: each notifying broker gets LeaderAndIsr for all
        its replicas; its answers (_replica_states) say which are offline or back. The
        notifications are removed once read."""
        brokers: set[int] = set()
        for child in children:
            path = f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{child}"
            try:
                data, _ = await self._ctx.zk.get(path)
                brokers.add(znodes.parse_log_dir_event(path, data))
            except ZkNoNode:
                continue
            except znodes.ZnodeError as exc:
                log.error("ignoring a log dir event notification: %s", exc)
            await self._delete_quietly(path)
        for broker_id in sorted(brokers & set(self._ctx.brokers)):
            mine = [(t, p) for t, p, entry in self._ctx.iter_partitions() if broker_id in entry.replicas]
            log.info("log dir event from broker %d: asking for the state of its %d replicas", broker_id, len(mine))
            self._ctx.send_leader_and_isr(mine, only={broker_id})

    async def _replica_states(self, broker_id: int, response: Any) -> None:
        """A LeaderAndIsr answer of ``broker_id``: KAFKA_STORAGE_ERROR marks a replica offline,
        NONE online (Kafka's processLeaderAndIsrResponseReceived). Replicas newly offline lose
        leadership and ISR membership as if their broker had died; replicas back may lead
        offline partitions again."""
        if broker_id not in self._ctx.brokers or response.error_code:
            return
        names = {topic.topic_id: name for name, topic in self._ctx.topics.items()}
        offline: set[tuple[str, int]] = set()
        online: set[tuple[str, int]] = set()
        for topic in response.topics:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for p in topic.partition_errors:
                if p.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                    offline.add((name, p.partition_index))
                elif p.error_code == ErrorCode.NONE:
                    online.add((name, p.partition_index))
        before = self._ctx.offline.get(broker_id, set())
        now = (before - online) | offline
        if now:
            self._ctx.offline[broker_id] = now
        else:
            self._ctx.offline.pop(broker_id, None)
        gone, back = now - before, before - now
        if gone:
            log.warning("broker %d: %d replicas are in an offline log dir (%s); their leadership and ISR "
                        "membership move to other replicas", broker_id, len(gone), _sample(gone))
            await self._on_brokers_failed(set())
        if back:
            log.info("broker %d: %d replicas are back from an offline log dir (%s)", broker_id, len(back),
                     _sample(back))
            self._ctx.send_update_metadata(set(self._ctx.brokers), sorted(back))
            await self._elect_where_needed()

    # -- elections ---------------------------------------------------------------------------

    async def _elect_where_needed(self, *, notify: bool = True) -> None:
        """New partitions get their first state; offline ones a leader if one is eligible now."""
        live = self._ctx.live()
        changed: list[tuple[str, int]] = []
        new: list[tuple[str, int]] = []
        for topic, p, entry in self._ctx.iter_partitions():
            if topic in self._ctx.deleting:
                continue
            if entry.state is None:
                first = initial_leader_and_isr(entry.replicas, live)
                if first is None:
                    continue
                if await self._ctx.create_state(topic, p, entry, first):
                    new.append((topic, p))
            elif entry.state.leader == NO_LEADER or entry.state.leader not in self._ctx.brokers:
                online = self._ctx.online(topic, p, live)
                elected = elect_offline(entry.replicas, entry.state, online, unclean=False)
                if elected is None and await self._unclean(topic):
                    elected = elect_offline(entry.replicas, entry.state, online, unclean=True)
                    if elected is not None:
                        log.warning("unclean leader election: %s-%d is led by %d, outside its ISR %s; records "
                                    "only the old ISR had are lost", topic, p, elected.leader, list(entry.state.isr))
                if elected is not None and await self._ctx.write_state(topic, p, entry, elected):
                    changed.append((topic, p))
        if notify:
            self._ctx.send_leader_and_isr(new, is_new=True)
            self._ctx.send_leader_and_isr(changed)
            if new or changed:
                self._ctx.send_update_metadata(set(self._ctx.brokers), new + changed)

    async def _rebalance_forever(self) -> None:
        """Preferred leaders take their partitions back (auto.leader.rebalance.enable): every
        leader.imbalance.check.interval.seconds, on brokers whose share of partitions led by
        others passes leader.imbalance.per.broker.percentage."""
        while True:
            await trio.sleep(self._ctx.config.leader_imbalance_check_interval_seconds)
            self._ctx.submit(self._rebalance)

    async def _rebalance(self) -> None:
        live = self._ctx.live()
        preferred: dict[int, list[tuple[str, int, PartitionEntry]]] = {}
        for topic, p, entry in self._ctx.iter_partitions():
            if entry.replicas and entry.state is not None:
                preferred.setdefault(entry.replicas[0], []).append((topic, p, entry))
        changed = []
        for broker, partitions in preferred.items():
            if broker not in live:
                continue
            elsewhere = [x for x in partitions if x[2].state is not None and x[2].state.leader != broker]
            if len(elsewhere) * 100 <= self._ctx.config.leader_imbalance_per_broker_percentage * len(partitions):
                continue
            for topic, p, entry in elsewhere:
                assert entry.state is not None
                elected = elect_preferred(entry.replicas, entry.state, self._ctx.online(topic, p, live))
                if elected is not None and await self._ctx.write_state(topic, p, entry, elected):
                    changed.append((topic, p))
        if changed:
            log.info("moved %d partitions back to their preferred leaders", len(changed))
            self._ctx.announce(changed)

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None, *, unclean: bool
                            ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """ElectLeaders (KIP-460): see broker/controller/zk/leader_election.py."""
        return await self._call(lambda: elect_leaders(self._ctx, partitions, unclean=unclean))

    async def raise_leader_epochs(self, wanted: Mapping[tuple[str, int], int]
                                  ) -> dict[tuple[str, int], tuple[ErrorCode, str | None, int]]:
        """LinkLeaderEpoch: see broker/controller/zk/leader_epochs.py."""
        return await self._call(lambda: raise_leader_epochs(self._ctx, wanted))

    async def alter_partition_reassignments(self, requests: Sequence[tuple[str, int, Sequence[int] | None]]
                                            ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments (KIP-455): see broker/controller/zk/reassignment.py."""
        return await self._call(lambda: self._reassignments.alter(requests))

    async def list_partition_reassignments(self, partitions: Sequence[tuple[str, int]] | None
                                           ) -> dict[tuple[str, int], Reassignment]:
        return await self._call(lambda: self._list_reassignments(partitions))

    async def _list_reassignments(self, partitions: Sequence[tuple[str, int]] | None
                                  ) -> dict[tuple[str, int], Reassignment]:
        return self._reassignments.list(partitions)

    def reconfigure(self, config: BrokerConfig) -> None:
        """Dynamic broker configs changed (ZkMetadata): unclean.leader.election.enable is read
        from here at each election."""
        self._ctx.config = config

    async def _unclean(self, topic: str) -> bool:
        """unclean.leader.election.enable for ``topic``: its override in ``/config/topics/<t>``,
        else the broker's. Read only when a clean election found nobody (rare)."""
        path = znodes.topic_config_path(topic)
        try:
            data, _ = await self._ctx.zk.get(path)
            override = znodes.parse_config(path, data).get("unclean.leader.election.enable")
        except ZkNoNode:
            override = None
        except znodes.ZnodeError as exc:
            log.error("%s; using the broker's unclean.leader.election.enable", exc)
            override = None
        if override is not None:
            return override.strip().lower() == "true"
        return self._ctx.config.unclean_leader_election_enable

    # -- requests from brokers ---------------------------------------------------------------

    async def broker_epoch_is_current(self, broker_id: int, broker_epoch: int) -> bool:
        broker = self._ctx.brokers.get(broker_id)
        return broker is not None and broker.epoch == broker_epoch

    async def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                              new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        return await self._call(lambda: self._alter_partition(broker_id, topic_id, partition, leader_epoch,
                                                              new_isr, partition_epoch))

    async def _alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                               new_isr: Sequence[int], partition_epoch: int) -> PartitionInfo:
        topic = next((t for t in self._ctx.topics.values() if t.topic_id == topic_id), None)
        if topic is None or topic.name in self._ctx.deleting:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        entry = topic.partitions.get(partition)
        if entry is None or entry.state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        state = entry.state
        if state.leader != broker_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {broker_id} does not lead {topic.name}-{partition}")
        if leader_epoch < state.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if leader_epoch > state.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if partition_epoch != entry.zk_version:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION)
        isr = list(dict.fromkeys(new_isr))
        if broker_id not in isr or any(b not in entry.replicas for b in isr):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"ISR {isr} is not a set of replicas {list(entry.replicas)} "
                                                         "that includes the leader")
        online = self._ctx.online(topic.name, partition, self._ctx.live())
        if any(b not in online for b in isr if b not in state.isr):
            raise KafkaError(ErrorCode.INELIGIBLE_REPLICA)
        if tuple(isr) != state.isr:
            # An ISR change keeps the leader epoch (KIP-497); the zkVersion moves on.
            new = LeaderAndIsr(state.leader, state.leader_epoch, tuple(isr))
            if not await self._ctx.write_state(topic.name, partition, entry, new):
                raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION)
            log.info("ISR of %s-%d is now %s (partition epoch %d)", topic.name, partition, isr, entry.zk_version)
            self._ctx.send_update_metadata(set(self._ctx.brokers), [(topic.name, partition)])
            # A reassignment may be complete now (its own event, after this answer).
            self._ctx.submit(partial(self._reassignments.on_isr_changed, topic.name, partition))
        assert entry.state is not None
        return PartitionInfo(partition, entry.state.leader, entry.state.leader_epoch, entry.replicas,
                             entry.state.isr, entry.zk_version)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        return await self._call(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        broker = self._ctx.brokers.get(broker_id)
        if broker is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        if broker.epoch != broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH)
        self._ctx.shutting_down.add(broker_id)
        live = set(self._ctx.brokers)
        changed = []
        for topic, p, entry in self._ctx.iter_partitions():
            state = entry.state
            if state is None or broker_id not in entry.replicas:
                continue
            if state.leader == broker_id:
                new = elect_controlled_shutdown(entry.replicas, state, self._ctx.online(topic, p, live),
                                                self._ctx.shutting_down)
            elif broker_id in state.isr and len(state.isr) > 1:
                new = state.changed(state.leader, [b for b in state.isr if b != broker_id])
            else:
                continue
            if new is not None and await self._ctx.write_state(topic, p, entry, new):
                changed.append((topic, p))
        self._ctx.announce(changed)
        # Partitions of one replica cannot move: they are not waited for (as Kafka).
        remaining = [(t, p) for t, p, e in self._ctx.iter_partitions()
                     if e.state is not None and e.state.leader == broker_id and len(e.replicas) > 1]
        log.info("controlled shutdown of broker %d: %d leaderships moved, %d remain", broker_id, len(changed),
                 len(remaining))
        return remaining


def _sample(partitions: Iterable[tuple[str, int]], shown: int = 10) -> str:
    """A few partitions by name, for a log line."""
    listed = sorted(partitions)
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    return ", ".join(f"{t}-{p}" for t, p in listed[:shown]) + more


async def _first_of(*events: trio.Event) -> None:
    """Return once any of ``events`` is set."""
    async with trio.open_nursery() as nursery:
        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


async def run_controller_election(config: BrokerConfig, zk: ZkClient,
                                  on_term: Callable[[ZkController | None], None], *,
                                  security: ClientSecurity | None = None) -> None:
    """Take part in controller elections until cancelled; ``on_term`` hears of each term this
    broker starts (the controller) and ends (None). `security`: how a term's controller reaches
    the brokers' inter-broker listener."""
    with zk.watch_data(znodes.CONTROLLER) as changes:
        async for data in changes:
            if data is None:
                await _election_round(config, zk, on_term, security)


async def _election_round(config: BrokerConfig, zk: ZkClient,
                          on_term: Callable[[ZkController | None], None], security: ClientSecurity | None) -> None:
    me = config.broker_id
    try:
        epoch, version = await _become_controller(zk, me)
    except ZkNodeExists:
        return  # someone else won; wait for its znode to go
    except ZkError as exc:
        log.warning("controller election failed: %s; waiting for the next one", exc)
        return
    except znodes.ZnodeError as exc:
        log.error("no controller can be elected while %s; repair the znode", exc)
        return
    controller = ZkController(config, zk, security=security)
    started = trio.current_time()
    on_term(controller)
    try:
        await _serve_term(zk, controller, epoch, version)
    finally:
        on_term(None)
    # Still our znode (we resigned on a newer epoch, the session lives on): let someone else in.
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        try:
            raw, _ = await zk.get(znodes.CONTROLLER)
            if znodes.parse_controller(znodes.CONTROLLER, raw).brokerid == me:
                await zk.delete(znodes.CONTROLLER)
        except (ZkError, znodes.ZnodeError):
            pass
    # A term that ended at once (a fault that keeps recurring) is not tried again at once: the
    # others get their chance, and nobody spins through epochs.
    await trio.sleep_until(started + _MIN_TERM_S)


async def _serve_term(zk: ZkClient, controller: ZkController, epoch: int, version: int) -> None:
    try:
        await controller.serve(epoch, version)
    except* Resigned as group:
        log.warning("controller %d resigns: %s", controller.broker_id, leaves(group)[0])
    except* ZkError as group:
        log.warning("controller %d resigns after a ZooKeeper error: %s", controller.broker_id, leaves(group)[0])
    except* Exception as group:
        # A bug must not take the broker down with it: another term starts from ZooKeeper's state.
        log.error("controller %d failed and resigns", controller.broker_id, exc_info=leaves(group)[0])


async def _become_controller(zk: ZkClient, me: int) -> tuple[int, int]:
    """Create ``/controller`` and move ``/controller_epoch`` one up, conditionally on the version
    read, in one transaction (Kafka's registerControllerAndIncrementControllerEpoch). Raises
    ZkNodeExists when another broker is the controller."""
    while True:
        try:
            raw, stat = await zk.get(znodes.CONTROLLER_EPOCH)
            current, version = znodes.parse_controller_epoch(znodes.CONTROLLER_EPOCH, raw), stat.version
        except ZkNoNode:
            try:
                await zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(0))
            except ZkNodeExists:
                pass
            continue
        try:
            results = await zk.transaction([
                CreateOp(znodes.CONTROLLER, znodes.encode_controller(me), ephemeral=True),
                SetOp(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(current + 1), version)])
        except ZkBadVersion:
            continue  # another broker moved the epoch meanwhile: read again
        written = results[1]
        assert isinstance(written, ZnodeStat)
        return current + 1, written.version


