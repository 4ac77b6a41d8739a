"""A broker joining a ZooKeeper-mode cluster: top-level paths, cluster id, registration.

    await ensure_persistent_paths(zk)                       # Kafka's PersistentZkPaths
    cluster_id = await get_or_create_cluster_id(zk, proposed=None)   # /cluster/id
    await check_meta_properties(config.log_dirs, broker_id, cluster_id)  # meta.properties vs ZooKeeper
    broker_epoch = await register_broker(zk, info, security_protocols)  # ephemeral /brokers/ids/<id>

All failures an operator must act on are StartupError with the message saying what to do.

Registration is Kafka's checked ephemeral create (KafkaZkClient.registerBroker): create
``/brokers/ids/<id>``; if it exists, look at its owner session. Ours (this client's current or an
earlier session: the answer to an earlier create was lost, or a stale read after an expiry): kept,
or replaced when it came from an earlier session. Another session's: a broker with this id is
registered. That is either another live broker, or this broker's previous run, killed without a
clean shutdown, whose session ZooKeeper keeps until it times out; so the registration waits
(`wait_s`, by default the session timeout and a half) for that znode to go, and then gives up
with StartupError "broker id N is already registered in ZooKeeper at ...". The returned broker
epoch is the znode's czxid, which Kafka sends as broker_epoch in inter-broker requests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from broker.config import StartupError
from broker.controller.meta_properties import META_PROPERTIES, read_meta_properties, write_meta_properties
from broker.controller.model import BrokerInfo
from broker.controller.standalone import new_cluster_id
from broker.controller.zk import znodes
from broker.controller.zk.client import ZkClient, ZkNodeExists, ZkNoNode, ZkUnavailable

__all__ = ["ensure_persistent_paths", "get_or_create_cluster_id", "check_meta_properties", "register_broker"]

log = logging.getLogger(__name__)


async def ensure_persistent_paths(zk: ZkClient) -> None:
    """Create Kafka's top-level znodes that are missing (ZkData.PersistentZkPaths)."""
    for path in znodes.PERSISTENT_PATHS:
        if await zk.exists(path) is None:
            await zk.ensure_path(path)


async def get_or_create_cluster_id(zk: ZkClient, proposed: str | None = None) -> str:
    """The cluster id in ``/cluster/id``; when there is none, `proposed` (say, the id in this
    broker's meta.properties) or a new one is written there, the first broker to do so winning."""
    for _ in range(3):  # created and deleted under us twice would be an operator at work
        try:
            data, _stat = await zk.get(znodes.CLUSTER_ID)
        except ZkNoNode:
            cluster_id = proposed or new_cluster_id()
            try:
                await zk.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(cluster_id), make_parents=True)
            except ZkNodeExists:
                continue  # another broker was first: read its id
            log.info("created cluster id %s in ZooKeeper at %s", cluster_id, zk.connect_string)
            return cluster_id
        try:
            return znodes.parse_cluster_id(znodes.CLUSTER_ID, data)
        except znodes.ZnodeError as exc:
            raise StartupError(f"{exc} (ZooKeeper at {zk.connect_string}); repair or delete it") from None
    raise StartupError(f"znode {znodes.CLUSTER_ID} keeps appearing and disappearing in ZooKeeper at "
                       f"{zk.connect_string}")


def _check_meta_properties(log_dirs: Sequence[Path], broker_id: int, cluster_id: str) -> None:
    for log_dir in log_dirs:
        stored_cluster = read_meta_properties(log_dir, broker_id)
        if stored_cluster and stored_cluster != cluster_id:
            # Kafka's InconsistentClusterIdException.
            raise StartupError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored_cluster} in "
                f"{log_dir / META_PROPERTIES}. The broker is trying to join the wrong cluster. Configured "
                "zookeeper.connect may be wrong.")
        if stored_cluster:
            continue
        log_dir.mkdir(parents=True, exist_ok=True)
        write_meta_properties(log_dir, broker_id, cluster_id)


async def check_meta_properties(log_dirs: Sequence[Path], broker_id: int, cluster_id: str) -> None:
    """Every log dir's meta.properties must name this broker and ZooKeeper's cluster id: a
    mismatch is StartupError naming both ids (Kafka's InconsistentClusterIdException). A missing
    file, or one without a cluster id, is written with them."""
    await trio.to_thread.run_sync(_check_meta_properties, tuple(log_dirs), broker_id, cluster_id)


async def register_broker(zk: ZkClient, info: BrokerInfo, security_protocols: Mapping[str, str], *,
                          wait_s: float | None = None) -> int:
    """Register `info` at the ephemeral ``/brokers/ids/<id>`` (see the module docstring);
    returns the broker epoch (the znode's czxid). Ensures Kafka's top-level paths first."""
    await ensure_persistent_paths(zk)
    path = znodes.broker_path(info.broker_id)
    data = znodes.encode_broker(info, security_protocols)
    deadline = trio.current_time() + (zk.session_timeout_s * 1.5 if wait_s is None else wait_s)
    told = False
    while True:
        try:
            await zk.create(path, data, ephemeral=True)
        except (ZkNodeExists, ZkUnavailable):
            pass  # there already, or maybe created before the connection dropped: look at its owner
        try:
            held, stat = await zk.get(path)
        except ZkNoNode:
            continue  # went away while we looked: create again
        if stat.ephemeral_owner == zk.session_id:
            if held != data:
                await zk.set(path, data, version=stat.version)
            log.info("registered broker %d at %s with addresses %s, broker epoch (czxid) %d", info.broker_id,
                     path, ",".join(str(e) for e in info.endpoints), stat.czxid)
            return stat.czxid
        if stat.ephemeral_owner in zk.own_sessions:
            log.info("replacing %s left by this broker's expired session 0x%x", path, stat.ephemeral_owner)
            try:
                await zk.delete(path, version=stat.version)
            except ZkNoNode:
                pass
            continue
        holder = _describe(path, held)
        if trio.current_time() >= deadline:
            raise StartupError(
                f"broker id {info.broker_id} is already registered in ZooKeeper at {zk.connect_string}{path} by "
                f"session 0x{stat.ephemeral_owner:x} ({holder}): another broker with broker.id={info.broker_id} "
                "is running; stop it, or give this broker another broker.id")
        if not told:
            told = True
            log.warning(
                "broker id %d is registered in ZooKeeper at %s%s by session 0x%x (%s); waiting up to %.1f s for "
                "it to go (a previous run of this broker that was killed keeps it until its session times out)",
                info.broker_id, zk.connect_string, path, stat.ephemeral_owner, holder,
                deadline - trio.current_time())
        await _wait_gone(zk, path, deadline)


async def _wait_gone(zk: ZkClient, path: str, deadline: float) -> None:
    with trio.move_on_at(deadline), zk.watch_data(path) as changes:
        async for value in changes:
            if value is None:
                return


def _describe(path: str, data: bytes) -> str:
    try:
        registration = znodes.parse_broker(path, data)
    except znodes.ZnodeError:
        return "an unreadable registration"
    return "endpoints " + ",".join(registration.endpoints or [f"{registration.host}:{registration.port}"])
