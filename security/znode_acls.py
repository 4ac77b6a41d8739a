"""The ACLs a broker puts on the znodes it creates when ``zookeeper.set.acl`` is on, as Kafka does.

Every znode gets ``CREATOR_ALL``: every right for the identity the creating session authenticated
as (with TLS, the distinguished name of the broker's ZooKeeper client certificate, which
ZooKeeper's x509 provider reads as ``x509:CN=...``). All but the sensitive ones also get read for
anyone, since tools read topics, partitions and brokers without logging in. The sensitive roots,
Kafka's: users' SCRAM credentials and quotas (``/config/users``), brokers' dynamic configs, which
may hold passwords (``/config/brokers``), and delegation tokens (``/delegation_token``).

So every broker of a cluster must present the same identity to ZooKeeper (one client
certificate, or certificates with one subject): a znode created by broker 1 is written later by
broker 2 when it becomes the controller.
"""

from __future__ import annotations

from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE  # type: ignore[import-untyped]

__all__ = ["SENSITIVE_ROOTS", "is_sensitive", "secure_acls"]

SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token")


def is_sensitive(path: str) -> bool:
    """Whether `path` (below the chroot) is one only the brokers may read."""
    return any(path == root or path.startswith(f"{root}/") for root in SENSITIVE_ROOTS)


def secure_acls(path: str) -> list[object]:
    """kazoo's ACL list for a new znode at `path` (below the chroot)."""
    return list(CREATOR_ALL_ACL) if is_sensitive(path) else [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
