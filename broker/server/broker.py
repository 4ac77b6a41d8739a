"""A running broker: storage, controller, replicas and listeners under one trio task tree.

:func:`run_broker` is the whole broker. It reports readiness through ``task_status.started``
with the bound listener addresses, runs until cancelled, and on the way out writes its
checkpoints and closes its logs, so a clean stop needs no recovery on the next start.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import trio

from broker import log_limits
from broker.address import format_host_port
from broker.clock import now_ms
from broker.config import BrokerConfig, ListenerSpec, StartupError
from broker.controller.base import Controller
from broker.controller.model import BrokerInfo
from broker.controller.standalone import StandaloneController
from broker.coordinator import lag_metrics
from broker.coordinator.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.coordinator.offsets_store import InternalTopic, OffsetsStore
from broker.coordinator.txn_coordinator import TransactionCoordinator
from broker.coordinator.txn_records import TXN_STATE_TOPIC
from broker.faults import crash_point
from broker.metrics import MetricsServer, serve_metrics, track_fetch_sessions, track_open_segment_files
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import ReplicaManager, broker_log_config
from broker.server.acl_store import AclStore, FileAclStore
from broker.server.authenticator import SaslAuthenticator
from broker.server.connection import ConnectionLimits, serve_connection
from broker.server.context import BrokerServices, ConnectionInfo
from broker.server.dispatch import Dispatcher
from broker.server.fetch_sessions import TOTAL_PER_BROKER_PARTITION, FetchSessionCache
from broker.server.listeners import BoundListener, serve_listeners
from broker.server.memory import RequestMemoryPool, ResponseMemoryPool
from broker.server.scram_credentials import scram_credentials
from broker.server.txn_markers import MarkerSender
from broker.server.txn_verification import TxnVerifier
from broker.server.user_configs import FileUserConfigs, UserConfigs
from broker.storage import LogManager, cleaner
from broker.storage.flusher import Flusher
from broker.storage.handles import HANDLES, capacity_for, emfile_advice, raise_open_file_limit
from security.authorizer import Authorizer, parse_super_users
from security.client import ClientSecurity, inter_broker_security, zookeeper_client_context
from security.mechanisms import mechanism_servers
from security.tls import ANONYMOUS, TlsHandshakeFailed, TlsListener

if TYPE_CHECKING:
    from broker.controller.zk.metadata import ZkMetadata

__all__ = ["RunningBroker", "run_broker"]

log = logging.getLogger(__name__)
_limited_log = log_limits.limiter(log)

# The longest a stopping ZooKeeper-mode broker spends on its controlled shutdown.
_CONTROLLED_SHUTDOWN_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class RunningBroker:
    """What ``run_broker`` reports once it accepts connections."""

    broker_id: int
    cluster_id: str
    listeners: tuple[BoundListener, ...]
    services: BrokerServices
    metrics_url: str | None = None  # where Prometheus metrics are served (causeway.metrics.listener)

    def bootstrap(self, listener_name: str | None = None) -> str:
        """``host:port`` of the named listener (the first one by default)."""
        for bound in self.listeners:
            if listener_name is None or bound.spec.name == listener_name:
                return format_host_port(bound.host, bound.port)
        raise KeyError(listener_name)


def _advertised(config: BrokerConfig, bound: list[BoundListener]) -> tuple[ListenerSpec, ...]:
    """Advertised endpoints with port 0 and empty hosts replaced by what was actually bound."""
    by_name = {b.spec.name: b for b in bound}
    out = []
    for spec in config.advertised_listeners:
        actual = by_name.get(spec.name)
        host = spec.host or (actual.host if actual and actual.host else socket.getfqdn())
        port = spec.port if spec.port != 0 else (actual.port if actual else 0)
        out.append(ListenerSpec(spec.name, host, port))
    return tuple(out)


async def _every(interval_ms: int, job_name: str, job: Callable[[], Awaitable[object]]) -> None:
    """Run a housekeeping job every ``interval_ms``.

    Logs are not thread-safe: each job changes them on the broker's own thread, between
    requests, and leaves its disk waits (fsyncs, checkpoint files, unlinking deleted segments)
    to worker threads (broker/storage/flusher.py), so the event loop never waits on the disk.
    """
    while True:
        await trio.sleep(interval_ms / 1000)
        try:
            await job()
        except OSError as exc:
            # A full or failing disk (ENOSPC, EIO): one line per try, the disk is the news, not
            # a traceback (appends report the dir themselves, see replication/dir_health.py).
            log.warning("%s failed: %s; will retry", job_name, exc)
        except Exception:  # noqa: BLE001 - housekeeping must not stop the broker
            log.exception("%s failed; will retry", job_name)


async def _reload_certificates(tls_listeners: Mapping[str, TlsListener]) -> None:
    """New connections use a listener's renewed keystore or truststore once its files change;
    files that cannot be used are reported and the listener keeps serving with what it had."""
    for name, listener in tls_listeners.items():
        try:
            context = await trio.to_thread.run_sync(listener.reloaded)
        except StartupError as exc:
            log.error("listener %s keeps its certificates: the changed ones cannot be used: %s", name, exc)
            continue
        if context is not None:
            listener.context = context
            log.info("listener %s: reloaded its keystore and truststore (new connections use them)", name)


async def _compact_forever(logs: LogManager, backoff_ms: Callable[[], int]) -> None:
    """The log cleaner: plan on this thread, rewrite in a worker thread, swap on this thread.
    ``backoff_ms`` is read each round: log.cleaner.backoff.ms is a dynamic broker config."""
    while True:
        await trio.sleep(backoff_ms() / 1000)
        for partition_log in list(logs.logs().values()):
            work = cleaner.plan(partition_log, now_ms())
            if work is None:
                continue
            try:
                result = await trio.to_thread.run_sync(cleaner.build_cleaned, work, now_ms())
                crash_point("cleaner-before-swap")
                cleaner.swap(partition_log, work, result)
            except Exception:  # noqa: BLE001 - a bad segment must not stop the cleaner or the broker
                log.exception("compacting %s failed; will retry", partition_log.directory.name)


async def run_broker(
    config: BrokerConfig,
    *,
    initial_topics: Mapping[str, int] | None = None,
    task_status: trio.TaskStatus[RunningBroker] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker until cancelled: standalone, or in a ZooKeeper-mode cluster when
    ``zookeeper.connect`` is set.

    ``initial_topics`` (name -> partitions) are created if missing, before readiness is reported.
    Raises OSError naming the listener when an address cannot be bound, and RuntimeError when the
    data dir belongs to another broker or cluster.
    """
    # How this broker reaches its peers (TLS, SASL login), built once before anything else: a
    # keystore or JAAS config that does not do stops the start, naming its key.
    inter_broker: ClientSecurity | None = None
    zookeeper_tls: ssl.SSLContext | None = None
    if config.zookeeper_connect is not None:
        inter_broker = inter_broker_security(config)
        zookeeper_tls = zookeeper_client_context(config)
    soft, hard = raise_open_file_limit()
    HANDLES.set_capacity(capacity_for(soft))
    log.info("open-file limit %d (hard %d): up to %d segment files held open, %d of them by fetch answers "
             "being sent", soft, hard, HANDLES.capacity, HANDLES.slice_budget)
    logs = LogManager(list(config.log_dirs), broker_log_config(config))
    # Before anything in the dirs is read: a second broker on the same data dir stops here.
    logs.lock_dirs()
    try:
        await trio.to_thread.run_sync(logs.load_all, now_ms())
    except BaseException as exc:
        logs.unlock_dirs()
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            raise StartupError(f"loading the logs of {', '.join(map(str, config.log_dirs))} failed: "
                               f"{emfile_advice()}") from exc
        raise
    # From here on the logs leave fsyncs, epoch checkpoints and unlinks to worker threads.
    flusher = Flusher()
    logs.use_flusher(flusher)
    metrics_server: MetricsServer | None = None
    stack = AsyncExitStack()
    zk_metadata: ZkMetadata | None = None
    try:
        if config.metrics_listener is not None:
            metrics_server = serve_metrics(config.metrics_listener)
            track_open_segment_files(lambda: len(HANDLES))
            log.info("metrics served on %s", metrics_server.url)
        replicas = ReplicaManager(config, logs, security=inter_broker)
        controller: Controller
        if config.zookeeper_connect is None:
            # In a worker thread: it replays (and may cut or migrate) the metadata files.
            standalone = await trio.to_thread.run_sync(StandaloneController, config)
            standalone.set_listener(replicas)
            controller = standalone
            for topic in list(controller.topics().values()):
                await replicas.on_topic_changed(topic)
            await _create_initial_topics(controller, initial_topics, 1)
        else:
            # ZooKeeper mode: the metadata comes from the controller (UpdateMetadata), the logs
            # from LeaderAndIsr; nothing is created before this broker is registered. Imported
            # here: a standalone broker never loads kazoo.
            from broker.controller.zk.mode import zookeeper_mode

            zk_metadata = await stack.enter_async_context(
                zookeeper_mode(config, replicas, security=inter_broker, zookeeper_tls=zookeeper_tls))
            controller = zk_metadata
        offsets_store = OffsetsStore(config, controller, replicas)
        if zk_metadata is None:
            await offsets_store.ensure_topic()
        # The coordinator follows the `__consumer_offsets` leaders: it loads a partition's groups
        # when this broker becomes its leader and drops them when it stops leading. Standalone,
        # this broker leads every partition from here on; groups.run loads them before readiness.
        groups = GroupCoordinator.over(config, offsets_store)
        replicas.add_leadership_listener(groups)
        # The transaction coordinator follows the `__transaction_state` leaders the same way;
        # its markers reach partition leaders through MarkerSender (set once services exist).
        txn_store = OffsetsStore(config, controller, replicas, InternalTopic.transactions(config))
        markers: list[MarkerSender] = []  # made once the services it uses exist, below
        transactions = TransactionCoordinator(config, txn_store, controller.allocate_producer_id,
                                              lambda batch: markers[0](batch))
        replicas.add_leadership_listener(transactions)
        for partition, leader_epoch in txn_store.led_partitions():
            transactions.on_became_leader(TXN_STATE_TOPIC, partition, leader_epoch)
        lag_metrics.track_groups(lambda: groups.groups)
        for partition, leader_epoch in offsets_store.led_partitions():
            groups.on_became_leader(OFFSETS_TOPIC, partition, leader_epoch)
        fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                           TOTAL_PER_BROKER_PARTITION * config.max_broker_partitions)
        track_fetch_sessions(fetch_sessions.__len__, fetch_sessions.total_partitions)
        acls, follow_acls = await _acl_store(config, zk_metadata)
        users: UserConfigs
        if zk_metadata is not None:
            users = zk_metadata
        else:
            users = FileUserConfigs(config.log_dirs[0])
            await trio.to_thread.run_sync(users.load)
        services = BrokerServices(config, controller, replicas, groups, fetch_sessions=fetch_sessions, acls=acls,
                                  users=users, transactions=transactions)
        markers.append(MarkerSender(services, inter_broker))
        services.txn_verifier = TxnVerifier(services, markers[0])
        if zk_metadata is not None:
            # Dynamic broker configs: request handlers read the effective config from here.
            zk_metadata.on_broker_config(lambda changed: setattr(services, "config", changed))
            zk_metadata.on_broker_config(groups.reconfigure)  # message.max.bytes bounds a member's metadata
            zk_metadata.on_broker_config(transactions.reconfigure)
        dispatcher = Dispatcher(services)
        pool = RequestMemoryPool(config.queued_max_request_bytes, config.socket_request_max_bytes)
        responses = ResponseMemoryPool(config.fetch_max_bytes)
        limits = ConnectionLimits.from_config(config)
        # Built before anything listens: a keystore that cannot be read stops the start, naming it.
        tls_listeners = {spec.name: TlsListener.build(ssl_config, spec.name) for spec in config.listeners
                         if (ssl_config := config.ssl_for(spec.name)) is not None}
        handshake_timeout_s = min(limits.idle_timeout_s, limits.arrival_timeout_s)
        credentials = scram_credentials(users)
        sasl_mechanisms = {spec.name: mechanism_servers(sasl_config, credentials) for spec in config.listeners
                           if (sasl_config := config.sasl_for(spec.name)) is not None}
        failed_authentication_delay_s = config.connection_failed_authentication_delay_ms / 1000

        async def on_connection(stream: trio.SocketStream, spec: ListenerSpec) -> None:
            try:
                host, port = stream.socket.getpeername()[:2]
                peer = format_host_port(host, port)
            except OSError:
                peer = "?"
            served: trio.abc.Stream = stream
            principal = ANONYMOUS
            tls_listener = tls_listeners.get(spec.name)
            if tls_listener is not None:
                try:
                    served, principal = await tls_listener.accept(stream, handshake_timeout_s)
                except TlsHandshakeFailed as exc:
                    # One summary per listener and reason (OpenSSL's reasons are a bounded set).
                    _limited_log.warning(f"tls handshake {spec.name} {exc}", "TLS handshake with %s on listener "
                                         "%s failed: %s", peer, spec.name, exc)
                    await trio.aclose_forcefully(stream)
                    return
            info = ConnectionInfo(spec.name, peer, config.security_protocols[spec.name], principal)
            mechanisms = sasl_mechanisms.get(spec.name)
            authenticator = (SaslAuthenticator(mechanisms, failed_authentication_delay_s)
                             if mechanisms is not None else None)
            await serve_connection(served, info, dispatcher, pool, limits=limits, responses=responses,
                                   authenticator=authenticator)

        async with trio.open_nursery() as nursery:
            await nursery.start(replicas.run)
            await nursery.start(groups.run)
            await nursery.start(markers[0].run)
            await nursery.start(transactions.run)
            if follow_acls is not None:
                # Before anything listens: the changes announced since the load are in force.
                await nursery.start(follow_acls)
            bound: list[BoundListener] = await nursery.start(
                partial(serve_listeners, log_repeat_window_s=config.log_repeat_window_ms / 1000),
                config.listeners, on_connection)
            advertised = _advertised(config, bound)
            controller.register_local_broker(BrokerInfo(config.broker_id, advertised, config.rack))
            if zk_metadata is not None:
                # Registered once the listeners serve: the controller's first requests find them.
                await nursery.start(zk_metadata.run)
                replicas.set_isr_channel(zk_metadata.isr_channel())
                await _create_initial_topics(controller, initial_topics, config.default_replication_factor)
                nursery.start_soon(zk_metadata.ensure_offsets_topic, offsets_store.ensure_topic)
                # Ready means ready for admin requests too: wait for the controller's first
                # metadata (some broker is always elected), bounded so a broker still starts, and
                # says why, when ZooKeeper elects nobody in time.
                with trio.move_on_after(config.zookeeper_session_timeout_ms / 1000) as waiting:
                    await zk_metadata.wait_for_controller()
                if waiting.cancelled_caught:
                    log.warning("no controller has sent this broker metadata within %d ms "
                                "(zookeeper.session.timeout.ms); serving anyway",
                                config.zookeeper_session_timeout_ms)
            nursery.start_soon(flusher.run)
            if tls_listeners:
                nursery.start_soon(_every, config.ssl_reload_check_interval_ms, "certificate reload",
                                   partial(_reload_certificates, tls_listeners))

            async def retention() -> None:
                # Detaches expired segments here; the flusher unlinks their files in a worker. A
                # log start that moved is news for fetch sessions, which answer a partition only
                # when something about it changed (followers follow the leader's log start).
                starts = [(p, p.log.log_start_offset) for p in replicas.partitions()]
                logs.apply_retention(now_ms())
                for partition, start in starts:
                    if partition.log.log_start_offset != start:
                        partition.wake_fetches()

            nursery.start_soon(_every, config.log_retention_check_interval_ms, "retention", retention)
            nursery.start_soon(_every, config.log_flush_offset_checkpoint_interval_ms, "checkpoint",
                               logs.checkpoint_in_thread)
            flush_interval = min(config.log_flush_scheduler_interval_ms, 1000)
            nursery.start_soon(_every, flush_interval, "flush", lambda: logs.flush_due_in_thread(now_ms()))
            if config.log_cleaner_enable:
                nursery.start_soon(_compact_forever, logs, lambda: services.config.log_cleaner_backoff_ms)
            log.info("broker %d of cluster %s serving %s", config.broker_id, controller.cluster_id,
                     ", ".join(b.url for b in bound))
            task_status.started(RunningBroker(config.broker_id, controller.cluster_id, tuple(bound), services,
                                              metrics_server.url if metrics_server else None))
    except Exception as exc:
        # Out of descriptors while starting (creating __consumer_offsets, loading groups): one
        # clear line naming the limit, not a traceback from deep inside the nursery.
        if _caused_by_emfile(exc):
            raise StartupError(f"the broker cannot start: {emfile_advice()}") from exc
        raise
    finally:
        if metrics_server is not None:
            metrics_server.close()
        try:
            if zk_metadata is not None:
                # Leaderships move to other ISR members before this broker's session closes.
                with trio.CancelScope(shield=True), trio.move_on_after(_CONTROLLED_SHUTDOWN_MAX_S):
                    await zk_metadata.controlled_shutdown()
            # Closes the ZooKeeper session (its ephemerals go at once; the client shields that
            # itself). Not inside a shield of ours: the client's nursery must exit in its own scope.
            await stack.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_close_logs, logs)


async def _create_initial_topics(controller: Controller, initial_topics: Mapping[str, int] | None,
                                 replication_factor: int) -> None:
    for name, partitions in (initial_topics or {}).items():
        try:
            await controller.create_topic(name, partitions, replication_factor, {})
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise


def _caused_by_emfile(exc: BaseException) -> bool:
    """Whether EMFILE or ENFILE is somewhere in `exc`: its groups, causes and contexts."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return True
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def _close_logs(logs: LogManager) -> None:
    try:
        logs.checkpoint()
        logs.close()
    finally:
        logs.unlock_dirs()


async def _acl_store(config: BrokerConfig, zk_metadata: ZkMetadata | None
                     ) -> tuple[AclStore | None, Callable[..., Awaitable[None]] | None]:
    """The ACLs, loaded before anything listens (None: no authorizer, every request allowed),
    and in ZooKeeper mode the task that keeps them current (it runs as long as the broker)."""
    if not config.authorizer_class_name:
        return None, None
    authorizer = Authorizer(parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found)
    follow: Callable[..., Awaitable[None]] | None = None
    store: AclStore
    if zk_metadata is not None:
        # Imported here, as the rest of ZooKeeper mode: a standalone broker never loads kazoo.
        from broker.controller.zk.client import ZkError
        from broker.server.zk_acl_store import ZkAclStore

        zk_store = ZkAclStore(zk_metadata.acl_znodes(), authorizer)
        try:
            await zk_store.load()
        except ZkError as exc:
            raise StartupError(f"cannot load the ACLs from ZooKeeper: {exc}") from exc
        store, follow = zk_store, zk_store.follow
    else:
        file_store = FileAclStore(config.log_dirs[0], authorizer)
        await trio.to_thread.run_sync(file_store.load)
        store = file_store
    log.info("authorizer %s: %d ACLs, super users %s, allow.everyone.if.no.acl.found=%s",
             config.authorizer_class_name, sum(1 for _ in authorizer.bindings()),
             ", ".join(sorted(authorizer.super_users)) or "none", str(config.allow_everyone_if_no_acl_found).lower())
    return store, follow
