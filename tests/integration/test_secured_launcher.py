"""`causeway up` with a `security:` section, real processes: east's WAN listener is SASL_SSL
(PLAIN, passwords and certificates generated) while its LOCAL listener stays PLAINTEXT; ACLs are
on; a link-mode mirror in west logs in across the WAN link as its principal and copies.

What must hold: the copy arrives, a client without credentials on the WAN listener is refused,
the users' generated client files work, the topology's ACLs and the mirror's grants exist, every
secret file is 0600 (its directory 0700), and no password is in `status`, the state file, a
command line or a log.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.test_link_mode_launcher import ends, produce
from tests.support.polling import wait_until
from tests.support.refusal import ask_metadata

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = """\
name: secured
datacenters: {east: {}, west: {}}
clusters:
  east:
    datacenter: east
    topics: {orders: 2}
    security:
      wan: SASL_SSL
      users: [mirror-west, alice]
      acls:
        - {principal: "User:alice", operations: [Read, Describe], topic: orders}
        - {principal: "User:alice", operations: [Read], group: app, pattern: prefixed}
  west: {datacenter: west}
links:
  - between: [east, west]
    latency: 5ms
mirrors:
  east-to-west: {source: east, target: west, mode: link, principal: mirror-west}
"""
DEADLINE_S = 90.0


def causeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def _sasl_ssl(wan: str, ca: Path, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": wan, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(ca)}


def _refused(config: dict[str, Any], *until: int) -> list[KafkaError]:
    """The errors a client gets from `config` when it asks for metadata (until one with a code of
    `until` is reported, any when none is named); none: it got in."""
    attempt = ask_metadata({**config, "socket.timeout.ms": 5000}, until=until)
    return attempt.errors if attempt.failure is None else [*attempt.errors, attempt.failure]


@dataclass
class Launched:
    state: Path
    up: subprocess.CompletedProcess[str]
    secured: Path  # east's security dir
    passwords: dict[str, str]
    status: dict[str, Any]

    def assert_no_password_in_public(self, *texts: str) -> None:
        """No generated password in what `up` printed, `status`, the state file or a log."""
        public = [self.up.stdout, self.up.stderr, json.dumps(self.status), (self.state / "state.json").read_text(),
                  *texts, *(p.read_text(errors="replace") for p in (self.state / "logs").glob("*.log"))]
        for user, password in self.passwords.items():
            assert not any(password in t for t in public), f"{user}'s password is out"


@contextmanager
def launched(tmp_path: Path, topology_text: str) -> Iterator[Launched]:
    """`causeway up -d` of the topology, healthy; `causeway down` after."""
    topology = tmp_path / "topology.yaml"
    topology.write_text(topology_text)
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        secured = state / "security" / "east"
        passwords: dict[str, str] = json.loads((secured / "passwords.json").read_text())
        doc = json.loads(causeway("status", "--json", "--state-dir", str(state)).stdout)
        assert doc["healthy"], doc
        yield Launched(state, up, secured, passwords, doc)
    finally:
        down = causeway("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stdout + down.stderr


def test_a_secured_wan_link_through_causeway_up(tmp_path: Path) -> None:
    with launched(tmp_path, TOPOLOGY) as run:
        state, secured, passwords, doc = run.state, run.secured, run.passwords, run.status
        assert set(passwords) == {"admin", "mirror-west", "alice"}
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]
        wan = doc["clusters"]["east"]["wan"]["west"]
        ca = secured / "certs" / "ca.crt"

        # The mirror reads east through the SASL_SSL WAN listener as mirror-west.
        produce(east, "orders", 2, 40)
        wait_until(lambda: ends(west, "orders", 2) == ends(east, "orders", 2),
                   what="west's mirror topic to reach east's log ends", timeout_s=DEADLINE_S, interval_s=0.5)
        mirror = json.loads((state / "mirrors" / "east-to-west.yaml").read_text())
        assert mirror["source"]["properties"]["security.protocol"] == "SASL_SSL"
        assert "properties" not in mirror["target"]  # west is not secured

        # The WAN listener: no credentials, or a wrong password, gets nobody in; alice does.
        assert _refused({"bootstrap.servers": wan}), "a plaintext client got through the SASL_SSL listener"
        wrong = _refused(_sasl_ssl(wan, ca, "alice", "not-" + passwords["alice"]), KafkaError._AUTHENTICATION)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong
        assert _refused(_sasl_ssl(wan, ca, "alice", passwords["alice"])) == []
        # alice's generated client file works with the tools as it is.
        listed = causeway("topics", "--bootstrap-server", wan, "--command-config",
                          str(secured / "alice.wan.properties"), "--list")
        assert listed.returncode == 0 and "orders" in listed.stdout, listed.stdout + listed.stderr

        # The topology's ACLs and the mirror's grants were created (seen by the admin user).
        admin = AdminClient(_sasl_ssl(wan, ca, "admin", passwords["admin"]))
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        acls = {(a.principal, a.restype, a.name, a.resource_pattern_type, a.operation)
                for a in admin.describe_acls(every, request_timeout=30).result(timeout=30)}
        assert ("User:alice", ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, AclOperation.READ) in acls
        assert ("User:alice", ResourceType.GROUP, "app", ResourcePatternType.PREFIXED, AclOperation.READ) in acls
        assert ("User:mirror-west", ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, AclOperation.READ) in acls
        assert ("User:mirror-west", ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                AclOperation.DESCRIBE) in acls

        # Secret files are the owner's alone.
        secret_files = [secured / "passwords.json", secured / "broker-0.properties", secured / "admin.properties",
                        secured / "alice.properties", secured / "alice.wan.properties",
                        secured / "certs" / "broker-0.key", secured / "certs" / "alice.pem",
                        state / "mirrors" / "east-to-west.yaml"]
        for path in secret_files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        for directory in (state / "security", secured):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        broker_config = (secured / "broker-0.properties").read_text()
        assert passwords["alice"] in broker_config  # PLAIN: the broker's JAAS holds them (0600)

        # No password in what others may read or what the launcher prints and records.
        run.assert_no_password_in_public(causeway("status", "--state-dir", str(state)).stdout)


SCRAM_TOPOLOGY = """\
name: scram
datacenters: {east: {}, west: {}}
clusters:
  east:
    datacenter: east
    coordination: zookeeper
    configs: {offsets.topic.replication.factor: 1}
    topics: {orders: 2}
    security:
      local: SASL_PLAINTEXT     # the launcher itself must log in (as admin)
      wan: SASL_SSL
      users: [mirror-west]      # SCRAM-SHA-512, the default with ZooKeeper
  west: {datacenter: west}
links:
  - between: [east, west]
mirrors:
  east-to-west: {source: east, target: west, principal: mirror-west}
"""


def test_scram_users_in_zookeeper_and_a_launcher_that_logs_in(tmp_path: Path) -> None:
    """A ZooKeeper cluster whose LOCAL listener asks for a SCRAM login too: the credentials are
    in /config/users in Kafka's format before the brokers start, the launcher creates topics and
    `status` reads Metadata as its admin user (the state file names the admin's client file),
    brokers reach each other on a PLAINTEXT BROKER listener, the mirror logs in on both ends; a
    second `up` on the same state dir keeps the passwords."""
    from kazoo.client import KazooClient  # type: ignore[import-untyped]

    from security.scram import ScramCredential

    with launched(tmp_path, SCRAM_TOPOLOGY) as run:
        state, secured, passwords, doc = run.state, run.secured, run.passwords, run.status
        assert doc["clusters"]["east"]["partitions"] >= 2  # Metadata answered the admin login
        recorded = json.loads((state / "state.json").read_text())["clusters"]["east"]
        assert recorded["command_config"] == str(secured / "admin.properties")
        east, west = doc["clusters"]["east"]["bootstrap"], doc["clusters"]["west"]["bootstrap"]

        zk = KazooClient(hosts=doc["clusters"]["east"]["zookeeper"]["connect"])
        zk.start(timeout=30)
        try:
            stored = json.loads(zk.get("/config/users/mirror-west")[0])["config"]
        finally:
            zk.stop()
            zk.close()
        assert set(stored) == {"SCRAM-SHA-512"}
        assert ScramCredential.from_text(stored["SCRAM-SHA-512"]).iterations >= 4096

        # LOCAL asks for a login: a client without one is refused; the admin's file works.
        assert _refused({"bootstrap.servers": east}), "a plaintext client got through the SASL_PLAINTEXT listener"
        admin = {"bootstrap.servers": east, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                 "sasl.username": "admin", "sasl.password": passwords["admin"]}
        assert _refused(admin) == []
        producer = Producer(admin)
        for i in range(20):
            producer.produce("orders", value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        wait_until(lambda: ends(west, "east.orders", 2) == {0: 10, 1: 10},
                   what="the mirror to copy east's orders to west", timeout_s=DEADLINE_S, interval_s=0.5)
        run.assert_no_password_in_public()
    # Up again on the same state dir: the same passwords (clients configured once keep working),
    # credentials written again, and the launcher logs in as before (status healthy).
    with launched(tmp_path, SCRAM_TOPOLOGY) as again:
        assert again.passwords == passwords
        assert _refused({**admin, "bootstrap.servers": again.status["clusters"]["east"]["bootstrap"]}) == []


MUTUAL_TLS_TOPOLOGY = """\
name: mtls
datacenters: {east: {}}
clusters:
  east:
    datacenter: east
    topics: {orders: 1}
    security:
      local: SSL                # mutual TLS: the launcher logs in with admin's certificate
      users: [alice]
      acls:
        - {principal: "User:alice", operations: [Describe], topic: orders}
"""


def test_mutual_tls_on_the_local_listener_makes_the_launchers_certificate_a_super_user(tmp_path: Path) -> None:
    """The launcher's admin certificate (CN=admin) maps to User:admin, a super user: `up` could
    create the topic and the ACL, and `status` reads Metadata with it. Without a certificate
    nobody gets in; alice's generated client file works with the tools."""
    with launched(tmp_path, MUTUAL_TLS_TOPOLOGY) as run:
        east = run.status["clusters"]["east"]["bootstrap"]
        assert run.status["clusters"]["east"]["partitions"] >= 1
        certs = run.secured / "certs"
        assert _refused({"bootstrap.servers": east, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs / "ca.crt")}), "a client without a certificate got in"
        listed = causeway("topics", "--bootstrap-server", east, "--command-config",
                          str(run.secured / "alice.properties"), "--list")
        assert listed.returncode == 0 and "orders" in listed.stdout, listed.stdout + listed.stderr
        admin = AdminClient({"bootstrap.servers": east, "security.protocol": "SSL",
                             "ssl.ca.location": str(certs / "ca.crt"),
                             "ssl.certificate.location": str(certs / "admin.crt"),
                             "ssl.key.location": str(certs / "admin.key")})
        every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        acls = admin.describe_acls(every, request_timeout=30).result(timeout=30)
        assert [(a.principal, a.name, a.operation) for a in acls] == [("User:alice", "orders", AclOperation.DESCRIBE)]
        run.assert_no_password_in_public()
