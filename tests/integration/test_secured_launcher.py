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
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
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


def _refused(config: dict[str, Any]) -> list[KafkaError]:
    """The errors a client gets from `config` when it asks for metadata; none: it got in."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append, "socket.timeout.ms": 5000})
    try:
        producer.list_topics(timeout=8)
    except KafkaException as exc:
        errors.append(exc.args[0])
    producer.poll(0)
    return errors


def test_a_secured_wan_link_through_causeway_up(tmp_path: Path) -> None:
    topology = tmp_path / "secured.yaml"
    topology.write_text(TOPOLOGY)
    state = tmp_path / "state"
    up = causeway("up", str(topology), "-d", "--state-dir", str(state))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        secured = state / "security" / "east"
        passwords: dict[str, str] = json.loads((secured / "passwords.json").read_text())
        assert set(passwords) == {"admin", "mirror-west", "alice"}
        doc = json.loads(causeway("status", "--json", "--state-dir", str(state)).stdout)
        assert doc["healthy"], doc
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
        wrong = _refused(_sasl_ssl(wan, ca, "alice", "not-" + passwords["alice"]))
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
        text = causeway("status", "--state-dir", str(state)).stdout
        public = [up.stdout, up.stderr, text, json.dumps(doc), (state / "state.json").read_text()]
        public += [p.read_text(errors="replace") for p in (state / "logs").glob("*.log")]
        for password in passwords.values():
            assert not any(password in t for t in public)
    finally:
        down = causeway("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
