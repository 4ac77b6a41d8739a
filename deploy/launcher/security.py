"""A secured cluster's files and secrets, made by `causeway up` under `<state dir>/security/<cluster>/`.

- ``certs/``: a CA and certificates (security/certs.py) when a listener speaks TLS: one per broker
  (``broker-<id>``, naming localhost and 127.0.0.1, where every listener and WAN proxy is) and one
  per user, the launcher's own ``admin`` included (mutual TLS logs in with it).
- ``passwords.json`` (0600): the generated password of every user; a restart with the same state
  dir reuses them, so clients configured once keep working.
- ``broker-<id>.properties`` (0600): each broker's secret configs (JAAS with the PLAIN users'
  passwords, keystore, truststore, the authorizer and super.users), passed with
  ``causeway broker --config``. Never ``--override``: command lines are visible in ``ps`` and
  recorded in the state file.
- ``<user>.properties`` (0600): Kafka's client keys for the cluster's LOCAL listener, and
  ``<user>.wan.properties`` for its WAN listeners when it has any and they differ (``causeway topics
  --command-config``, a Java client's config, security/client.py's ``client_security``).

On a ZooKeeper cluster with SCRAM, the users' credentials are written to ``/config/users/<user>``
in Kafka's format (the password itself never) after ZooKeeper is up and before the brokers start.
Once the cluster is up, its ACLs (and what its mirrors need) are created through CreateAcls as
the ``admin`` user.

Every principal is ``User:<name>``: a client certificate's ``CN=<name>`` is mapped to ``<name>``
by ``ssl.principal.mapping.rules``, so one ACL covers a user whether it logs in with SASL or
with its certificate.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.atomic_file import write_atomically
from broker.client import KafkaError
from broker.client.cluster import Client
from broker.config import load_properties
from broker.protocol.errors import ErrorCode
from broker.protocol.messages import CreateAclsRequest
from deploy.launcher.plan import AclPlan, ClusterPlan, MirrorPlan, SecurityPlan
from mirror.naming import ReplicationPolicy
from security.acl import Operation, PatternType, Permission, ResourceType
from security.certs import CA_CERT, DEFAULT_HOSTS, Identity, ZookeeperCertificates, create_certificates
from security.client import ClientSecurity, client_security
from security.scram import ScramCredential
from security.znode_acls import secure_acls
from topology.schema import ADMIN_USER

__all__ = ["ACL_AUTHORIZER", "ACL_SYNC_GRANTS", "ADMIN_USER", "OFFSET_SYNCS_GRANTS", "SOURCE_GRANTS", "TARGET_GRANTS",
           "ClusterSecrets", "CredentialsError", "admin_security", "broker_user", "create_acls", "mirror_acls",
           "prepare_cluster", "read_client_security", "write_broker_config", "write_scram_credentials"]

log = logging.getLogger(__name__)
# kazoo's connection chatter (connecting, established, closed) is not news in `up`'s output.
_KAZOO_LOG = logging.getLogger(f"{__name__}.kazoo")
_KAZOO_LOG.setLevel(logging.WARNING)

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
_SECRET = 0o600
_PRIVATE_DIR = 0o700
# A client certificate's subject is CN=<user>; the principal is the user's name alone, as SASL's.
_PRINCIPAL_RULES = "RULE:^CN=([^,]+)$/$1/,DEFAULT"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: What a mirror's principal is granted at each end when that cluster has ACLs: reading the
#: source's topics, groups, configs and topic ACLs; creating and writing the target's (mirror)
#: topics (Alter: LinkAppend), committing offsets for the source's groups; and, while the mirror
#: syncs topic ACLs (MM2's sync.topic.acls.enabled, on by default), creating the source's topic
#: ACLs at the target (CreateAcls needs Alter on the cluster, as for MM2).
SOURCE_GRANTS = (("Topic", "*", ("Read", "Describe", "DescribeConfigs")), ("Group", "*", ("Describe",)),
                 ("Cluster", "kafka-cluster", ("Describe",)))
TARGET_GRANTS = (("Topic", "*", ("Alter", "Create", "Write", "Describe", "DescribeConfigs", "AlterConfigs")),
                 ("Group", "*", ("Read", "Describe")), ("Cluster", "kafka-cluster", ("Create", "Describe")))
ACL_SYNC_GRANTS = (("Cluster", "kafka-cluster", ("Alter",)),)
#: An mm2 mirror keeps its offset syncs on the source (MM2's offset-syncs.topic.location, source
#: by default): it creates, writes and reads that one topic there, and nothing else of the source.
OFFSET_SYNCS_GRANTS = ("Create", "Write", "Read", "Describe")


class CredentialsError(Exception):
    """The users' SCRAM credentials could not be written to ZooKeeper."""


def broker_user(broker_id: int) -> str:
    """A broker's certificate name and so its principal (User:broker-<id>)."""
    return f"broker-{broker_id}"


@dataclass(frozen=True)
class ClusterSecrets:
    """Where a secured cluster's files are; the passwords stay in memory and in passwords.json."""

    cluster: ClusterPlan
    directory: Path
    passwords: Mapping[str, str] = field(repr=False)

    @property
    def plan(self) -> SecurityPlan:
        assert self.cluster.security is not None
        return self.cluster.security

    @property
    def certs(self) -> Path:
        return self.directory / "certs"

    def broker_config(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}.properties"

    def client_config(self, user: str, *, wan: bool = False) -> Path:
        """The user's client properties file for the LOCAL listener, or for a WAN listener."""
        if wan and self.plan.wan != self.plan.local:
            return self.directory / f"{user}.wan.properties"
        return self.directory / f"{user}.properties"

    def client_properties(self, user: str, protocol: str) -> dict[str, str]:
        """Kafka's client keys that log `user` in over a `protocol` listener of this cluster."""
        props = {"security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            props.update({"ssl.truststore.type": "PEM",
                          "ssl.truststore.location": str((self.certs / CA_CERT).resolve())})
        if protocol == "SSL":  # mutual TLS: the user's certificate is its login
            props.update({"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": str((self.certs / f"{user}.pem").resolve())})
        if protocol.startswith("SASL_"):
            module = _PLAIN_MODULE if self.plan.mechanism == "PLAIN" else _SCRAM_MODULE
            props.update({"sasl.mechanism": self.plan.mechanism,
                          "sasl.jaas.config": f'{module} required username="{user}" '
                                              f'password="{self.passwords[user]}";'})
        return props

    def super_users(self) -> list[str]:
        users = [f"User:{ADMIN_USER}"]
        if self.plan.between_brokers == "SSL":
            users += [f"User:{broker_user(b)}" for b in self.cluster.broker_ids]
        brokers_in_plaintext = self.cluster.coordination == "zookeeper" and self.plan.between_brokers == "PLAINTEXT"
        if self.plan.local == "PLAINTEXT" or brokers_in_plaintext:
            # A PLAINTEXT listener cannot tell its clients apart: all are User:ANONYMOUS, the
            # launcher's on LOCAL and the brokers' own requests too while they reach each other
            # in plaintext (LeaderAndIsr, follower fetches need ClusterAction). Such a listener
            # is trusted whole; the ACLs bind who logs in on the secured ones.
            users.append("User:ANONYMOUS")
        return users

    def broker_properties(self, broker_id: int, listeners: Mapping[str, str]) -> dict[str, str]:
        """The broker's secret configs; `listeners` is listener name -> security protocol."""
        plan, props = self.plan, {}
        if plan.uses_tls:
            props.update({
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str((self.certs / f"{broker_user(broker_id)}.pem").resolve()),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str((self.certs / CA_CERT).resolve()),
                "ssl.principal.mapping.rules": _PRINCIPAL_RULES,
            })
        for name, protocol in listeners.items():
            prefix = f"listener.name.{name.lower()}."
            if protocol == "SSL":
                props[prefix + "ssl.client.auth"] = "required"  # mutual TLS: the certificate is the login
            if protocol.startswith("SASL_"):
                props[prefix + f"{plan.mechanism.lower()}.sasl.jaas.config"] = self._broker_jaas()
        if plan.uses_sasl:
            props["sasl.enabled.mechanisms"] = plan.mechanism
        if plan.acls is not None:
            props["authorizer.class.name"] = ACL_AUTHORIZER
            props["super.users"] = ";".join(self.super_users())
        return props

    def _broker_jaas(self) -> str:
        if self.plan.mechanism != "PLAIN":
            return f"{_SCRAM_MODULE} required;"  # credentials in ZooKeeper
        users = " ".join(f'user_{user}="{password}"' for user, password in self.passwords.items())
        return (f'{_PLAIN_MODULE} required username="{ADMIN_USER}" password="{self.passwords[ADMIN_USER]}" '
                f"{users};")


def _users(plan: SecurityPlan) -> list[str]:
    return [ADMIN_USER, *(u for u in plan.users if u != ADMIN_USER)]


def _passwords(path: Path, users: Sequence[str]) -> dict[str, str]:
    """The users' passwords from `path`, any missing one generated (and the file rewritten)."""
    known: dict[str, str] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            raise ValueError(f"{path} is not the launcher's passwords file; remove it to generate new passwords")
        known = loaded
    passwords = {user: known.get(user) or secrets.token_urlsafe(24) for user in users}
    if passwords != known:
        write_atomically(path, json.dumps(passwords, indent=2) + "\n", mode=_SECRET)
    return passwords


def _properties_text(props: Mapping[str, str], what: str) -> str:
    return f"# {what}: written by `causeway up`; secret (0600)\n" + "".join(f"{k}={v}\n" for k, v in props.items())


def prepare_cluster(directory: Path, cluster: ClusterPlan) -> ClusterSecrets:
    """Certificates, passwords and every user's client files of a secured cluster in
    `directory` (`<state dir>/security/<cluster>`; blocking: run it in a worker thread). Raises
    OSError, ValueError or security.certs.CertsError."""
    assert cluster.security is not None
    plan = cluster.security
    directory.mkdir(parents=True, exist_ok=True, mode=_PRIVATE_DIR)
    os.chmod(directory.parent, _PRIVATE_DIR)
    os.chmod(directory, _PRIVATE_DIR)
    users = _users(plan)
    secrets_ = ClusterSecrets(cluster, directory, _passwords(directory / "passwords.json", users))
    if plan.uses_tls:
        identities = [Identity(broker_user(b), "broker", DEFAULT_HOSTS) for b in cluster.broker_ids]
        identities += [Identity(user, "client") for user in users]
        create_certificates(secrets_.certs, identities)
    for user in users:
        files = {secrets_.client_config(user): plan.local}
        if cluster.remote_datacenters:  # only then has it WAN listeners (no file for one it lacks)
            files[secrets_.client_config(user, wan=True)] = plan.wan
        for path, protocol in files.items():
            write_atomically(path, _properties_text(secrets_.client_properties(user, protocol), f"user {user}"),
                             mode=_SECRET)
    return secrets_


def write_broker_config(secrets_: ClusterSecrets, broker_id: int, listeners: Mapping[str, str]) -> Path:
    """The broker's 0600 properties file (blocking)."""
    path = secrets_.broker_config(broker_id)
    write_atomically(path, _properties_text(secrets_.broker_properties(broker_id, listeners),
                                            f"broker {broker_id} of {secrets_.cluster.name}"), mode=_SECRET)
    return path


def write_scram_credentials(zookeeper_connect: str, secrets_: ClusterSecrets,
                            zookeeper_tls: ZookeeperCertificates | None = None) -> None:
    """Every user's SCRAM credential in ``/config/users/<user>`` (Kafka's znode JSON), as
    ``kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]'`` would. Blocking (kazoo);
    the brokers are not up yet, so no change notification is needed. Users' names are
    topology names ([A-Za-z0-9._-]), which Kafka's sanitizing leaves as they are.

    With `zookeeper_tls` (the cluster's ZooKeeper speaks TLS and its znodes carry ACLs), the
    launcher logs in as the brokers do, with their certificate, and creates each znode with the
    ACLs a broker would give it, so the brokers own them and nobody else reads the credentials."""
    from kazoo.client import KazooClient  # type: ignore[import-untyped]
    from kazoo.exceptions import KazooException, NodeExistsError  # type: ignore[import-untyped]
    from kazoo.handlers.threading import KazooTimeoutError  # type: ignore[import-untyped]

    mechanism = secrets_.plan.mechanism
    # The chroot is spelled out in each path rather than given to kazoo, which warns while it
    # does not exist yet (the brokers have not made it: they start after this).
    hosts, slash, chroot = zookeeper_connect.partition("/")
    root = f"/{chroot.strip('/')}" if slash and chroot.strip("/") else ""
    tls: dict[str, Any] = {}
    if zookeeper_tls is not None:
        keystore = str(zookeeper_tls.client_keystore)
        tls = {"use_ssl": True, "ca": str(zookeeper_tls.truststore), "certfile": keystore, "keyfile": keystore}
    zk = KazooClient(hosts=hosts, timeout=10.0, logger=_KAZOO_LOG, **tls)

    def ensure(path: str) -> None:
        # One znode at a time, each with the ACLs a broker gives it (the chroot gets the root's).
        parts = [part for part in path.split("/") if part]
        for depth in range(1, len(parts) + 1):
            absolute = "/" + "/".join(parts[:depth])
            if zk.exists(absolute):
                continue
            try:
                zk.create(absolute, b"", acl=secure_acls(absolute[len(root):] or "/"))
            except NodeExistsError:
                pass

    try:
        zk.start(timeout=30.0)
        for user, password in secrets_.passwords.items():
            credential = ScramCredential.from_password(mechanism, password).to_text()
            data = json.dumps({"version": 1, "config": {mechanism: credential}}).encode()
            path = f"{root}/config/users/{user}"
            if zk.exists(path):
                zk.set(path, data)
            elif zookeeper_tls is not None:
                ensure(path.rpartition("/")[0])
                zk.create(path, data, acl=secure_acls(path[len(root):]))
            else:
                zk.create(path, data, makepath=True)
    except (KazooException, KazooTimeoutError) as exc:
        raise CredentialsError(f"cannot write SCRAM credentials to ZooKeeper at {hosts}: {exc!r}") from exc
    finally:
        zk.stop()
        zk.close()


def read_client_security(path: Path) -> ClientSecurity:
    """The client security of a properties file the launcher wrote (the state file names the
    admin's). Raises OSError or broker.config.ConfigError."""
    return client_security(load_properties(path), str(path))


def admin_security(secrets_: ClusterSecrets | None) -> ClientSecurity | None:
    """How the launcher's own clients log in to the cluster's LOCAL listener (None: plaintext)."""
    if secrets_ is None or secrets_.plan.local == "PLAINTEXT":
        return None
    return read_client_security(secrets_.client_config(ADMIN_USER))


def mirror_acls(cluster: ClusterPlan, mirrors: Iterable[MirrorPlan]) -> list[AclPlan]:
    """What the mirrors reading or writing `cluster` need of it, when it has ACLs."""
    if cluster.security is None or cluster.security.acls is None:
        return []
    out: list[AclPlan] = []
    for mirror in mirrors:
        if mirror.principal is None:
            continue
        target_grants = TARGET_GRANTS + (ACL_SYNC_GRANTS if mirror.syncs_topic_acls else ())
        for end, grants in (("source", SOURCE_GRANTS), ("target", target_grants)):
            if getattr(mirror, end) != cluster.name:
                continue
            out += [AclPlan(f"User:{mirror.principal}", operation, kind, name)
                    for kind, name, operations in grants for operation in operations]
            if end == "source" and mirror.mode == "mm2" and mirror.settings.get(
                    "offset-syncs.topic.location", "source") == "source":
                syncs = ReplicationPolicy.offset_syncs_topic(mirror.target)
                out += [AclPlan(f"User:{mirror.principal}", operation, "Topic", syncs)
                        for operation in OFFSET_SYNCS_GRANTS]
    return out


def _creation(acl: AclPlan) -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(
        resource_type=ResourceType.from_title(acl.resource_type), resource_name=acl.resource_name,
        resource_pattern_type=PatternType.PREFIXED if acl.pattern == "prefixed" else PatternType.LITERAL,
        principal=acl.principal, host=acl.host, operation=Operation.from_title(acl.operation),
        permission_type=Permission.ALLOW if acl.permission == "allow" else Permission.DENY)


async def create_acls(client: Client, acls: Sequence[AclPlan]) -> None:
    """Create `acls` (CreateAcls: one that exists already is no error). Raises KafkaError with
    the first refusal, naming the binding."""
    if not acls:
        return
    response = await client.request_any(CreateAclsRequest(creations=[_creation(acl) for acl in acls]))
    for acl, result in zip(acls, response.results, strict=True):
        if result.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(result.error_code),
                             f"{acl.permission} {acl.principal} {acl.operation} on {acl.resource_type} "
                             f"{acl.resource_name!r}: {result.error_message or ErrorCode(result.error_code).name}")
    log.info("%d ACLs created", len(acls))

