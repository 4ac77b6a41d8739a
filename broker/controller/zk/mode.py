"""A broker's start in ZooKeeper mode: connect, agree on the cluster id, build its metadata.

    async with zookeeper_mode(config, replicas) as metadata:    # a ZkMetadata
        ...bind the listeners...
        await nursery.start(metadata.run)                       # register, elections, watches

ZooKeeper unreachable at start is retried with backoff and one log line per attempt (the client
does that) until ``zookeeper.connection.timeout.ms``; then the start fails with a StartupError
naming the address. The session is closed on the way out, so this broker's registration (and its
``/controller`` znode, if it was the controller) go at once rather than after the session timeout.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from broker.config import BrokerConfig, StartupError
from broker.controller.zk.client import ZkError, ZkUnavailable, open_zk_client
from broker.controller.zk.metadata import LocalReplicas, ZkMetadata
from broker.controller.zk.registration import (
    check_meta_properties,
    ensure_persistent_paths,
    get_or_create_cluster_id,
)

if TYPE_CHECKING:
    from broker.client.connection import ClientSecurity

__all__ = ["zookeeper_mode"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def zookeeper_mode(config: BrokerConfig, replicas: LocalReplicas, *, security: ClientSecurity | None = None,
                         zookeeper_tls: ssl.SSLContext | None = None) -> AsyncIterator[ZkMetadata]:
    """`security`: how this broker reaches its peers; `zookeeper_tls`: the TLS context of its
    ZooKeeper client (zookeeper.ssl.*; None: plaintext)."""
    connect = config.zookeeper_connect
    assert connect is not None
    client = open_zk_client(connect, session_timeout_ms=config.zookeeper_session_timeout_ms,
                            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
                            tls=zookeeper_tls, secure_acls=config.zookeeper_set_acl)
    try:
        zk = await client.__aenter__()
    except (ValueError, ZkUnavailable) as exc:
        raise StartupError(str(exc)) from None
    try:
        try:
            await ensure_persistent_paths(zk)
            cluster_id = await get_or_create_cluster_id(zk, proposed=config.cluster_id)
        except ZkError as exc:
            raise StartupError(f"cannot prepare the cluster's znodes in ZooKeeper at {connect}: {exc}") from exc
        if config.cluster_id and config.cluster_id != cluster_id:
            raise StartupError(f"cluster.id {config.cluster_id} is not the id of the cluster in ZooKeeper at "
                               f"{connect} ({cluster_id}); zookeeper.connect may be wrong")
        await check_meta_properties(config.log_dirs, config.broker_id, cluster_id)
        log.info("broker %d joins cluster %s in ZooKeeper at %s", config.broker_id, cluster_id, connect)
        yield ZkMetadata(config, zk, cluster_id, replicas, security=security)
    except BaseException as exc:
        if not await client.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await client.__aexit__(None, None, None)
