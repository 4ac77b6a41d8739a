"""A ZooKeeper client for trio: kazoo underneath, our own types above.

    async with open_zk_client("127.0.0.1:2181,127.0.0.1:2182/kafka",
                              session_timeout_ms=18000, connection_timeout_ms=18000) as zk:
        data, stat = await zk.get(path)                  # ZkNoNode when absent
        names = await zk.get_children(path)              # sorted
        stat = await zk.exists(path)                     # ZnodeStat | None
        created = await zk.create(path, data, ephemeral=False, sequence=False, make_parents=False)
        stat = await zk.set(path, data, version=-1)      # ZkBadVersion when the version moved on
        await zk.delete(path, version=-1, recursive=False)
        await zk.ensure_path(path)
        stat = await zk.set_checked(path, data, version=v, check=("/controller_epoch", epoch_version))
        epoch_version = await zk.create_controller("/controller", data, "/controller_epoch", epoch, version)
        results = await zk.transaction([CheckVersionOp(p, 3), SetOp(q, b"..", version=7),
                                        CreateOp(r, b".."), DeleteOp(s)])   # all or nothing
        children = zk.watch_children(path)   # MemoryReceiveChannel[list[str]]: now, then on change
        data = zk.watch_data(path)           # MemoryReceiveChannel[bytes | None]: None = absent
        events = zk.session_events()         # MemoryReceiveChannel[ZkSessionEvent]
        zk.session_id                        # the current session's id
        zk.state                             # ZkSessionState now
        zk.own_sessions                      # every session id this client has had
        zk.session_timeout_s, zk.connect_string

``connect`` is Kafka's ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``. The chroot
is created when missing, as Kafka does, and every path above is relative to it. ZooKeeper not
reachable at start is retried with backoff (broker.retry), one log line per attempt naming the
address; after ``connection_timeout_ms`` the start fails with ZkUnavailable.

Errors are this module's (ZkError and its subclasses), never kazoo's: nothing above imports kazoo.
Reads (get, get_children, exists) wait for a lost connection to come back, up to the connection
timeout, and retry; writes fail with ZkUnavailable when the connection drops under them, since
their outcome is then unknown (the caller reads back, as Kafka's checked creates do).

Sessions: CONNECTED; SUSPENDED when the connection is lost (the session, its ephemeral znodes and
watches survive if the client reconnects within the session timeout); LOST when the session
expired (its ephemerals are gone). After LOST, kazoo starts a new session on its own: a CONNECTED
with a new session id follows, and whoever owns ephemerals creates them again.

Threads: kazoo runs its own threads. No call here blocks trio: requests go out through kazoo's
asynchronous API, and their completions, watch callbacks and session changes come back through
``TrioToken.run_sync_soon`` (never blocking kazoo's threads). A watch keeps only the latest state:
a ZooKeeper watch fires once and is set again only by our next read, so however often a znode
changes, at most one read is in flight and one value waits in the channel. Session events keep
every transition until the buffer fills, then collapse to the last expiry and the newest state.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import trio
from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import (  # type: ignore[import-untyped]
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import SequentialThreadingHandler  # type: ignore[import-untyped]
from kazoo.protocol.states import KazooState  # type: ignore[import-untyped]
from kazoo.retry import KazooRetry  # type: ignore[import-untyped]

from broker.address import format_host_port, parse_host_port
from broker.retry import Backoff, retry
from broker.tasks import leaves
from security.znode_acls import secure_acls

__all__ = [
    "ZkClient", "open_zk_client", "parse_connect", "ConnectString",
    "ZnodeStat", "ZkSessionState", "ZkSessionEvent",
    "CheckVersionOp", "CreateOp", "SetOp", "DeleteOp", "ZkOp",
    "ZkError", "ZkNoNode", "ZkNodeExists", "ZkBadVersion", "ZkNotEmpty", "ZkUnavailable", "ZkSessionExpired",
]

log = logging.getLogger(__name__)
# kazoo logs every failed reconnect attempt; our own lines say what matters (lost, expired,
# back), so its chatter is kept to errors.
_KAZOO_LOG = logging.getLogger(f"{__name__}.kazoo")
_KAZOO_LOG.setLevel(logging.ERROR)

DEFAULT_PORT = 2181
# Between start attempts: 0.5 s, doubling to 5 s (each attempt tries every host once).
CONNECT_BACKOFF = Backoff(initial_s=0.5, max_s=5.0)
# kazoo's own reconnects once a session exists: 0.1 s doubling to 1 s, forever (its default
# ceiling is an hour, which would leave a broker disconnected long after ZooKeeper is back).
_RECONNECT = dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
_PROBE_TIMEOUT_S = 3.0
_SESSION_BUFFER = 8

T = TypeVar("T")


# -- errors --------------------------------------------------------------------------------


class ZkError(Exception):
    """A ZooKeeper request failed; `path` is the znode it was about (None: none in particular)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ZkNoNode(ZkError):
    """The znode (or, for a create, its parent) does not exist."""


class ZkNodeExists(ZkError):
    """A create found the znode already there."""


class ZkBadVersion(ZkError):
    """A conditional write's expected version is not the znode's: someone else wrote first."""


class ZkNotEmpty(ZkError):
    """A non-recursive delete of a znode that has children."""


class ZkUnavailable(ZkError):
    """Not connected to ZooKeeper (within the connection timeout), or the connection dropped
    under a write, whose outcome is then unknown."""


class ZkSessionExpired(ZkError):
    """The session expired under the request; its ephemeral znodes are gone."""


def _translate(exc: BaseException, path: str | None, what: str) -> ZkError:
    where = f" {path}" if path else ""
    if isinstance(exc, NoNodeError):
        return ZkNoNode(f"{what}{where}: no such znode (or no parent)", path)
    if isinstance(exc, NodeExistsError):
        return ZkNodeExists(f"{what}{where}: the znode already exists", path)
    if isinstance(exc, BadVersionError):
        return ZkBadVersion(f"{what}{where}: the znode's version is not the one expected", path)
    if isinstance(exc, NotEmptyError):
        return ZkNotEmpty(f"{what}{where}: the znode has children", path)
    if isinstance(exc, SessionExpiredError):
        return ZkSessionExpired(f"{what}{where}: the ZooKeeper session expired", path)
    if isinstance(exc, ConnectionLoss | ConnectionClosedError | OperationTimeoutError):
        return ZkUnavailable(f"{what}{where}: the connection to ZooKeeper was lost ({type(exc).__name__}); "
                             "the request may or may not have been applied", path)
    return ZkError(f"{what}{where}: {type(exc).__name__} {exc}", path)


_RETRIABLE_READ = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


# -- values --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    """A znode's metadata. `version` is what conditional writes compare (Kafka's zkVersion);
    `czxid` of a broker's registration is its broker epoch; `ephemeral_owner` is the session
    that owns an ephemeral znode (0 for a persistent one)."""

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    pzxid: int

    @classmethod
    def _of(cls, stat: Any) -> ZnodeStat:
        return cls(stat.czxid, stat.mzxid, stat.ctime, stat.mtime, stat.version, stat.cversion, stat.aversion,
                   stat.ephemeralOwner, stat.dataLength, stat.numChildren, stat.pzxid)


class ZkSessionState(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost; the session may survive
    LOST = "LOST"            # the session expired: its ephemeral znodes are gone


@dataclass(frozen=True, slots=True)
class ZkSessionEvent:
    state: ZkSessionState
    session_id: int  # the session this is about (for LOST: the one that expired)


@dataclass(frozen=True, slots=True)
class CheckVersionOp:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


ZkOp = CheckVersionOp | CreateOp | SetOp | DeleteOp


# -- the connect string --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectString:
    hosts: tuple[tuple[str, int], ...]
    chroot: str  # "" when none

    @property
    def hosts_text(self) -> str:
        return ",".join(format_host_port(h, p) for h, p in self.hosts)

    def __str__(self) -> str:
        return self.hosts_text + self.chroot


def parse_connect(connect: str) -> ConnectString:
    """Parse ``zookeeper.connect``; ValueError saying what is wrong."""
    text = connect.strip()
    slash = text.find("/")
    hosts_part, chroot = (text, "") if slash < 0 else (text[:slash], text[slash:])
    if chroot == "/":
        chroot = ""
    if chroot and (chroot.endswith("/") or "//" in chroot or any(s in (".", "..") for s in chroot.split("/"))):
        raise ValueError(f"zookeeper.connect: chroot {chroot!r} is not a valid znode path")
    hosts: list[tuple[str, int]] = []
    for raw in hosts_part.split(","):
        entry = raw.strip()
        if not entry:
            continue
        # An entry without a port ("zk", "[::1]") names ZooKeeper's.
        no_port = ":" not in entry or (entry.startswith("[") and entry.endswith("]"))
        host, port = parse_host_port(f"{entry}:{DEFAULT_PORT}" if no_port else entry, "zookeeper.connect:")
        if port == 0:
            raise ValueError(f"zookeeper.connect: {entry!r} has no valid port")
        if not host:
            raise ValueError(f"zookeeper.connect: {entry!r} has no host")
        hosts.append((host, port))
    if not hosts:
        raise ValueError(f"zookeeper.connect: {connect!r} names no host")
    return ConnectString(tuple(hosts), chroot)


# -- the client ----------------------------------------------------------------------------


class _Watch:
    """One watch_children/watch_data subscription: a task that reads (arming ZooKeeper's
    one-shot watch) whenever the watch fired, and offers the latest value."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind = kind
        self.path = path
        self.dirty = trio.Event()
        self.dirty.set()  # the first read at once
        self.send, self.keep = trio.open_memory_channel[Any](1)
        self.last: Any = _UNSET
        self.stopped = False

    def mark(self) -> None:
        self.dirty.set()

    def consumer_gone(self) -> bool:
        # `keep` is our own receive end; when it is the last one open, nobody listens.
        return self.keep.statistics().open_receive_channels <= 1

    def offer(self, value: Any) -> None:
        """Make `value` the one waiting in the channel, replacing an unread older one."""
        try:
            self.send.send_nowait(value)
        except trio.WouldBlock:
            try:
                self.keep.receive_nowait()
            except trio.WouldBlock:
                pass
            self.send.send_nowait(value)

    def close(self) -> None:
        self.stopped = True
        self.send.close()
        self.keep.close()


_UNSET = object()


class ZkClient:
    """See the module docstring. Made by `open_zk_client`, which owns its tasks."""

    def __init__(self, kazoo: Any, connect: ConnectString, *, session_timeout_s: float,
                 connection_timeout_s: float, nursery: trio.Nursery, secure_acls: bool = False) -> None:
        self._kazoo = kazoo
        self._secure_acls = secure_acls
        self._connect = connect
        self._chroot = connect.chroot
        self._session_timeout_s = session_timeout_s
        self._connection_timeout_s = connection_timeout_s
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()
        self._closing = False
        self._watches: set[_Watch] = set()
        self._subscribers: list[tuple[trio.MemorySendChannel[ZkSessionEvent],
                                      trio.MemoryReceiveChannel[ZkSessionEvent]]] = []
        self._connected = trio.Event()
        client_id = kazoo.client_id
        self._session_id: int = client_id[0] if client_id else 0
        self._own_sessions: set[int] = {self._session_id} if self._session_id else set()
        self._state = ZkSessionState.CONNECTED if kazoo.connected else ZkSessionState.SUSPENDED
        if self._state is ZkSessionState.CONNECTED:
            self._connected.set()
        kazoo.add_listener(self._on_kazoo_state)

    # -- kazoo's threads -> trio ----------------------------------------------------------

    def _from_thread(self, fn: Callable[..., object], *args: Any) -> None:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass  # trio is gone: nobody to tell

    def _on_kazoo_state(self, state: Any) -> None:
        # On kazoo's connection thread: read what belongs to this moment, hand it to trio.
        client_id = self._kazoo.client_id
        session_id = client_id[0] if client_id else self._session_id
        if not self._closing:
            self._from_thread(self._session_changed, state, session_id)

    def _session_changed(self, kazoo_state: Any, session_id: int) -> None:
        if self._closing:
            return
        state = {KazooState.CONNECTED: ZkSessionState.CONNECTED, KazooState.SUSPENDED: ZkSessionState.SUSPENDED,
                 KazooState.LOST: ZkSessionState.LOST}[kazoo_state]
        if state is ZkSessionState.LOST:
            log.error("ZooKeeper session 0x%x at %s expired: its ephemeral znodes are gone; starting a new "
                      "session", session_id, self._connect)
        elif state is ZkSessionState.SUSPENDED:
            log.warning("lost the connection to ZooKeeper at %s (session 0x%x); reconnecting: the session "
                        "survives if this takes less than %.0f ms", self._connect, session_id,
                        self._session_timeout_s * 1000)
        elif state is not self._state or session_id != self._session_id:
            log.info("connected to ZooKeeper at %s, session 0x%x", self._connect, session_id)
        self._state = state
        if state is ZkSessionState.CONNECTED:
            self._session_id = session_id
            self._own_sessions.add(session_id)
            self._connected.set()
            for watch in self._watches:
                watch.mark()  # watches of an expired session are gone; read (and arm) again
        elif self._connected.is_set():
            self._connected = trio.Event()
        self._publish(ZkSessionEvent(state, session_id))

    def _publish(self, event: ZkSessionEvent) -> None:
        alive = []
        for send, keep in self._subscribers:
            if keep.statistics().open_receive_channels <= 1:
                send.close()
                keep.close()
                continue
            alive.append((send, keep))
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                pending = []
                while True:
                    try:
                        pending.append(keep.receive_nowait())
                    except trio.WouldBlock:
                        break
                for kept in collapse_session_events([*pending, event]):
                    send.send_nowait(kept)
        self._subscribers = alive

    async def _await(self, async_result: Any) -> Any:
        """The outcome of a kazoo asynchronous request, waited for without a thread."""
        done = trio.Event()

        def completed(_result: Any) -> None:
            self._from_thread(done.set)

        async_result.rawlink(completed)
        try:
            await done.wait()
        finally:
            async_result.unlink(completed)
        return async_result.get_nowait()

    # -- requests ---------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def own_sessions(self) -> frozenset[int]:
        """Every session id this client has had (a znode owned by one of them is ours)."""
        return frozenset(self._own_sessions)

    @property
    def session_timeout_s(self) -> float:
        return self._session_timeout_s

    @property
    def state(self) -> ZkSessionState:
        return self._state

    @property
    def connect_string(self) -> str:
        return str(self._connect)

    def _abs(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"znode path {path!r} does not start with '/'")
        if not self._chroot:
            return path
        return self._chroot if path == "/" else self._chroot + path

    def _rel(self, path: str) -> str:
        if self._chroot and path.startswith(self._chroot):
            return path[len(self._chroot):] or "/"
        return path

    async def _wait_connected(self, deadline: float, path: str | None, what: str) -> None:
        if self._closing:
            raise ZkError(f"{what} {path}: the ZooKeeper client is closed", path)
        if self._state is ZkSessionState.CONNECTED:
            return
        with trio.move_on_at(deadline):
            await self._connected.wait()
        if not self._connected.is_set():
            raise ZkUnavailable(
                f"{what} {path}: not connected to ZooKeeper at {self._connect} within "
                f"{self._connection_timeout_s * 1000:.0f} ms (zookeeper.connection.timeout.ms)", path)

    async def _request(self, start: Callable[[], Any], path: str | None, what: str, *, read: bool) -> Any:
        deadline = trio.current_time() + self._connection_timeout_s
        while True:
            await self._wait_connected(deadline, path, what)
            try:
                return await self._await(start())
            except KazooException as exc:
                # A read is safe to send again once connected (bounded by the deadline, and
                # never a spin: kazoo holds requests while it reconnects).
                if read and isinstance(exc, _RETRIABLE_READ) and trio.current_time() < deadline:
                    await trio.lowlevel.checkpoint()
                    continue
                raise _translate(exc, path, what) from None

    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._request(lambda: self._kazoo.get_async(self._abs(path)), path, "get", read=True)
        return (data or b""), ZnodeStat._of(stat)

    async def get_children(self, path: str) -> list[str]:
        children = await self._request(lambda: self._kazoo.get_children_async(self._abs(path)), path,
                                       "get children of", read=True)
        return sorted(children)

    async def exists(self, path: str) -> ZnodeStat | None:
        stat = await self._request(lambda: self._kazoo.exists_async(self._abs(path)), path, "exists", read=True)
        return None if stat is None else ZnodeStat._of(stat)

    def _acl(self, path: str) -> list[object] | None:
        """The ACLs of a new znode at `path`: kazoo's default (open to all) unless zookeeper.set.acl."""
        return secure_acls(path) if self._secure_acls else None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     make_parents: bool = False) -> str:
        """Create a znode; returns its path (with the sequence number for a sequential one)."""
        if make_parents and self._secure_acls:
            # kazoo would give the parents this znode's ACLs; each gets its own instead.
            parent = path.rstrip("/").rpartition("/")[0]
            if parent:
                await self.ensure_path(parent)
            make_parents = False
        created = await self._request(
            lambda: self._kazoo.create_async(self._abs(path), bytes(data), acl=self._acl(path), ephemeral=ephemeral,
                                             sequence=sequence, makepath=make_parents), path, "create", read=False)
        return self._rel(created)

    async def set(self, path: str, data: bytes, *, version: int = -1) -> ZnodeStat:
        stat = await self._request(lambda: self._kazoo.set_async(self._abs(path), bytes(data), version), path,
                                   "set", read=False)
        return ZnodeStat._of(stat)

    async def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            try:
                children = await self.get_children(path)
            except ZkNoNode:
                children = []
            for child in children:
                try:
                    await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
                except ZkNoNode:
                    pass  # someone else deleted it meanwhile: what we wanted
        await self._request(lambda: self._kazoo.delete_async(self._abs(path), version), path, "delete", read=False)

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its missing parents, with empty data; nothing if it exists."""
        if not self._secure_acls:
            await self._request(lambda: self._kazoo.ensure_path_async(self._abs(path)), path, "ensure", read=False)
            return
        # One znode at a time, each with its own ACLs (a sensitive leaf must not make its
        # parents unreadable, nor an open parent make the leaf readable).
        parts = [part for part in path.split("/") if part]
        for depth in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:depth])
            if await self.exists(prefix) is None:
                try:
                    await self.create(prefix)
                except ZkNodeExists:
                    pass  # made meanwhile by another broker: what we wanted

    async def transaction(self, ops: Sequence[ZkOp]) -> list[str | ZnodeStat | None]:
        """Apply `ops` atomically (ZooKeeper's multi): all or none. Returns per op the created path
        (CreateOp), the new stat (SetOp) or None; raises the failing op's error (ZkBadVersion for a
        CheckVersionOp or SetOp whose version moved on), naming the op."""
        if not ops:
            return []

        def start() -> Any:
            tx = self._kazoo.transaction()
            for op in ops:
                if isinstance(op, CheckVersionOp):
                    tx.check(self._abs(op.path), op.version)
                elif isinstance(op, CreateOp):
                    tx.create(self._abs(op.path), bytes(op.data), acl=self._acl(op.path), ephemeral=op.ephemeral,
                              sequence=op.sequence)
                elif isinstance(op, SetOp):
                    tx.set_data(self._abs(op.path), bytes(op.data), op.version)
                else:
                    tx.delete(self._abs(op.path), op.version)
            return tx.commit_async()

        results = await self._request(start, None, "transaction", read=False)
        out: list[str | ZnodeStat | None] = []
        for index, (op, result) in enumerate(zip(ops, results, strict=True)):
            if isinstance(result, BaseException):
                if isinstance(result, RolledBackError):
                    continue
                name = type(op).__name__.removesuffix("Op").lower()
                raise _translate(result, op.path, f"transaction op {index} ({name})")
            if isinstance(op, CreateOp):
                out.append(self._rel(result))
            elif isinstance(op, SetOp):
                out.append(ZnodeStat._of(result))
            else:
                out.append(None)
        if len(out) != len(ops):  # every op rolled back, none named as the cause
            raise ZkError("transaction: rolled back", None)
        return out

    async def set_checked(self, path: str, data: bytes, *, version: int, check: tuple[str, int]) -> ZnodeStat:
        """``set`` at `version`, applied only if znode ``check[0]`` is still at version ``check[1]``
        (one transaction: Kafka's controller-epoch fenced writes). ZkBadVersion when either moved."""
        results = await self.transaction([CheckVersionOp(check[0], check[1]), SetOp(path, data, version)])
        stat = results[1]
        assert isinstance(stat, ZnodeStat)
        return stat

    async def create_controller(self, controller_path: str, controller_data: bytes, epoch_path: str,
                                epoch_data: bytes, epoch_version: int) -> int:
        """Kafka's registerControllerAndIncrementControllerEpoch: create the ephemeral
        `controller_path` and set `epoch_path` at `epoch_version`, atomically; returns the epoch
        znode's new version. ZkNodeExists: another broker is controller; ZkBadVersion: the epoch
        moved on meanwhile."""
        results = await self.transaction([CreateOp(controller_path, controller_data, ephemeral=True),
                                          SetOp(epoch_path, epoch_data, epoch_version)])
        stat = results[1]
        assert isinstance(stat, ZnodeStat)
        return stat.version

    # -- watches ----------------------------------------------------------------------------

    def watch_children(self, path: str) -> trio.MemoryReceiveChannel[list[str]]:
        """The children of `path` (sorted) at once, then after every change; [] while `path` does
        not exist (the watch goes on and reports it once created). Only the latest list waits in
        the channel. Close the channel to stop watching."""
        return self._watch("children", path)

    def watch_data(self, path: str) -> trio.MemoryReceiveChannel[bytes | None]:
        """The data of `path` at once, then after every change; None while it does not exist.
        Only the latest value waits in the channel. Close the channel to stop watching."""
        return self._watch("data", path)

    def _watch(self, kind: str, path: str) -> trio.MemoryReceiveChannel[Any]:
        self._abs(path)  # a bad path fails here, not in the task
        watch = _Watch(kind, path)
        consumer = watch.keep.clone()
        self._watches.add(watch)
        self._nursery.start_soon(self._run_watch, watch)
        return consumer

    async def _run_watch(self, watch: _Watch) -> None:
        def fired(_event: Any) -> None:  # on kazoo's thread: one-shot, so at most once per read
            self._from_thread(watch.mark)

        try:
            while not self._closing:
                await watch.dirty.wait()
                watch.dirty = trio.Event()
                if watch.consumer_gone():
                    return
                try:
                    value = await self._read_watched(watch, fired)
                except (ZkUnavailable, ZkSessionExpired):
                    continue  # CONNECTED marks every watch dirty again
                except ZkError as exc:
                    log.warning("watch on %s: %s", watch.path, exc)
                    continue
                if value != watch.last:
                    watch.last = value
                    watch.offer(value)
        finally:
            self._watches.discard(watch)
            watch.close()

    async def _read_watched(self, watch: _Watch, fired: Callable[[Any], None]) -> Any:
        path = self._abs(watch.path)
        while True:
            try:
                if watch.kind == "children":
                    children = await self._request(lambda: self._kazoo.get_children_async(path, watch=fired),
                                                   watch.path, "watch children of", read=True)
                    return sorted(children)
                data, _stat = await self._request(lambda: self._kazoo.get_async(path, watch=fired), watch.path,
                                                  "watch", read=True)
                return data or b""
            except ZkNoNode:
                # Absent: an exists watch reports its creation. Created meanwhile: read again.
                stat = await self._request(lambda: self._kazoo.exists_async(path, watch=fired), watch.path,
                                           "watch", read=True)
                if stat is None:
                    return [] if watch.kind == "children" else None

    # -- session events ---------------------------------------------------------------------

    def session_events(self) -> trio.MemoryReceiveChannel[ZkSessionEvent]:
        """The current state at once, then every change. Close the channel to unsubscribe."""
        send, keep = trio.open_memory_channel[ZkSessionEvent](_SESSION_BUFFER)
        consumer = keep.clone()
        send.send_nowait(ZkSessionEvent(self._state, self._session_id))
        self._subscribers.append((send, keep))
        return consumer

    async def _aclose(self) -> None:
        self._closing = True
        for watch in list(self._watches):
            watch.close()
        for send, keep in self._subscribers:
            send.close()
            keep.close()
        self._subscribers.clear()
        self._kazoo.remove_listener(self._on_kazoo_state)
        with trio.CancelScope(shield=True):
            # Closing the session deletes its ephemerals at once (not after the timeout).
            await trio.to_thread.run_sync(_stop_kazoo, self._kazoo)


def collapse_session_events(events: list[ZkSessionEvent]) -> list[ZkSessionEvent]:
    """Unread session events that no longer fit: the last expiry (nobody may miss that its
    ephemerals are gone) and the newest state."""
    last = events[-1]
    lost = next((e for e in reversed(events) if e.state is ZkSessionState.LOST), None)
    return [last] if lost is None or lost is last else [lost, last]


def _stop_kazoo(kazoo: Any) -> None:
    try:
        kazoo.stop()
    finally:
        kazoo.close()


# -- connecting ----------------------------------------------------------------------------


class _Unreachable(Exception):
    pass


def _reason(exc: OSError) -> str:
    # trio wraps the per-address errors ("all attempts to connect ... failed"): show the first.
    cause = None if exc.__cause__ is None else leaves(exc.__cause__)[0]
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno).lower()
    return (exc.strerror or str(exc)).lower()


class _TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler with connections made over TLS from our own context, so the
    stores, protocols and ciphers are the ``zookeeper.ssl.*`` configs as security/ reads them
    (kazoo's own TLS option takes PEM file paths only)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_kazoo_tls_options: Any) -> ssl.SSLSocket:
        sock = socket.create_connection(address, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self._context.wrap_socket(sock, server_hostname=hostname)  # handshakes within `timeout`
        except BaseException:
            sock.close()
            raise


async def _probe(connect: ConnectString, deadline: float, tls: ssl.SSLContext | None) -> None:
    """Return once some host accepts a TCP connection (and with `tls`, completes a handshake, so a
    certificate ZooKeeper refuses or that does not check out is named here); _Unreachable naming
    each host's error."""
    problems = []
    for host, port in connect.hosts:
        with trio.move_on_at(min(deadline, trio.current_time() + _PROBE_TIMEOUT_S)) as scope:
            try:
                stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                problems.append(f"{format_host_port(host, port)}: {_reason(exc)}")
                continue
            try:
                if tls is not None:
                    stream = trio.SSLStream(stream, tls, server_hostname=host)
                    await stream.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError) as exc:
                cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
                if isinstance(cause, ssl.SSLCertVerificationError):
                    reason = f"ZooKeeper's certificate does not verify: {cause.verify_message}"
                else:
                    reason = str(getattr(cause, "reason", None) or cause or "the connection closed")
                problems.append(f"{format_host_port(host, port)}: TLS handshake failed ({reason}); check "
                                "zookeeper.ssl.truststore.location, zookeeper.ssl.keystore.location and that "
                                "the port is ZooKeeper's secureClientPort")
                continue
            finally:
                await trio.aclose_forcefully(stream)
            return
        if scope.cancelled_caught:
            problems.append(f"{format_host_port(host, port)}: no answer within {_PROBE_TIMEOUT_S:.0f} s")
    raise _Unreachable("; ".join(problems))


async def _start_kazoo(connect: ConnectString, session_timeout_s: float, deadline: float,
                       tls: ssl.SSLContext | None) -> Any:
    tls_options: dict[str, Any] = {} if tls is None else {"handler": _TlsHandler(tls), "use_ssl": True}
    kazoo = KazooClient(hosts=connect.hosts_text, timeout=session_timeout_s,
                        connection_retry=KazooRetry(**_RECONNECT), logger=_KAZOO_LOG, **tls_options)
    connected = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def on_state(state: Any) -> None:
        if state == KazooState.CONNECTED:
            try:
                token.run_sync_soon(connected.set)
            except trio.RunFinishedError:
                pass

    kazoo.add_listener(on_state)
    try:
        await trio.to_thread.run_sync(kazoo.start_async)
        window = max(2.0, session_timeout_s)
        with trio.move_on_at(min(deadline, trio.current_time() + window)):
            await connected.wait()
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_stop_kazoo, kazoo)
        raise
    finally:
        kazoo.remove_listener(on_state)
    if not kazoo.connected:
        await trio.to_thread.run_sync(_stop_kazoo, kazoo)
        raise _Unreachable("it accepts connections but gave no session")
    return kazoo


@asynccontextmanager
async def open_zk_client(connect: str, *, session_timeout_ms: int, connection_timeout_ms: int | None = None,
                         tls: ssl.SSLContext | None = None, secure_acls: bool = False) -> AsyncIterator[ZkClient]:
    """Connect to ZooKeeper (see the module docstring); the session is closed on exit, which
    deletes its ephemeral znodes at once. ValueError for a malformed `connect`; ZkUnavailable
    when no host gave a session within `connection_timeout_ms` (default: the session timeout).

    `tls`: connect over TLS with this client context (zookeeper.ssl.*; the hosts are ZooKeeper's
    secure client ports). `secure_acls`: create znodes with Kafka's ACLs (zookeeper.set.acl; see
    security/znode_acls.py), which needs an identity ZooKeeper authenticates, here the TLS client certificate."""
    target = parse_connect(connect)
    session_timeout_s = session_timeout_ms / 1000
    connection_timeout_s = (session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms) / 1000
    deadline = trio.current_time() + connection_timeout_s

    async def attempt() -> Any:
        await _probe(target, deadline, tls)
        return await _start_kazoo(target, session_timeout_s, deadline, tls)

    def report(exc: Exception, failures: int) -> None:
        left = max(0.0, deadline - trio.current_time())
        log.warning("cannot connect to ZooKeeper at %s (attempt %d: %s); retrying for up to %.1f s more "
                    "(zookeeper.connection.timeout.ms)", target.hosts_text, failures, exc, left)

    try:
        kazoo = await retry(attempt, retriable=_Unreachable, backoff=CONNECT_BACKOFF, on_failure=report,
                            deadline=deadline)
    except _Unreachable as exc:
        raise ZkUnavailable(
            f"cannot connect to ZooKeeper at {target.hosts_text} within {connection_timeout_s * 1000:.0f} ms "
            f"(zookeeper.connection.timeout.ms): {exc}") from None
    async with trio.open_nursery() as nursery:
        zk = ZkClient(kazoo, target, session_timeout_s=session_timeout_s,
                      connection_timeout_s=connection_timeout_s, nursery=nursery, secure_acls=secure_acls)
        log.info("connected to ZooKeeper at %s%s, session 0x%x%s", target, " over TLS" if tls else "", zk.session_id,
                 "; new znodes get ACLs (zookeeper.set.acl)" if secure_acls else "")
        try:
            if target.chroot:
                await _ensure_chroot(zk, kazoo, target.chroot)
            yield zk
        finally:
            nursery.cancel_scope.cancel()
            await zk._aclose()


async def _ensure_chroot(zk: ZkClient, kazoo: Any, chroot: str) -> None:
    # Outside the chroot (Kafka creates it with a client without one).
    if await zk._request(lambda: kazoo.exists_async(chroot), chroot, "exists", read=True) is None:
        acl = secure_acls("/") if zk._secure_acls else None  # readable by all, as Kafka makes it
        await zk._request(lambda: kazoo.ensure_path_async(chroot, acl=acl), chroot, "create chroot", read=False)
        log.info("created the ZooKeeper chroot %s", chroot)

