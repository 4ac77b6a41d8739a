"""A cluster's `security:` section and a mirror's `principal:`: what the schema and the checks
accept, and each mistake named by line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from security.acl import Operation
from tests.unit.topology.files import assert_refused_at, write
from topology import load_topology
from topology.schema import ACL_OPERATIONS

SECURED = """\
name: s
datacenters: {east: {}, west: {}}
clusters:
  east:
    datacenter: east
    security:
      wan: SASL_SSL
      users: [mirror-west, alice]
      acls:
        - {principal: "User:alice", operations: [Read, Describe], topic: orders, pattern: prefixed}
        - {principal: "User:alice", operations: [Read], group: app}
  west: {datacenter: west}
links:
  - between: [east, west]
mirrors:
  e2w: {source: east, target: west, mode: link, principal: mirror-west}
"""


def test_a_secured_cluster_and_its_mirror_principal_load(tmp_path: Path) -> None:
    topology = load_topology(write(tmp_path, SECURED))
    security = topology.clusters["east"].security
    assert security is not None
    assert (security.local, security.wan, security.between_brokers) == ("PLAINTEXT", "SASL_SSL", "PLAINTEXT")
    assert security.sasl_mechanism("standalone") == "PLAIN" and security.sasl_mechanism("zookeeper") == "SCRAM-SHA-512"
    assert security.acls is not None and security.acls[0].resources == [("Topic", "orders")]
    assert security.acls[1].resources == [("Group", "app")] and security.acls[1].permission == "allow"
    assert topology.mirrors["e2w"].principal == "mirror-west"
    assert topology.clusters["west"].security is None


def test_the_operation_names_are_kafkas() -> None:
    kafka = {op.title for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)}
    assert set(ACL_OPERATIONS) <= kafka


BROKEN = [
    ("scram standalone", SECURED.replace("wan: SASL_SSL", "wan: SASL_SSL\n      mechanism: SCRAM-SHA-512"),
     "8:7: clusters.east.security.mechanism:", "needs coordination: zookeeper"),
    ("unknown protocol", SECURED.replace("wan: SASL_SSL", "wan: TLS"),
     "7:7: clusters.east.security.wan:", "'SASL_SSL'"),
    ("between brokers standalone", SECURED.replace("wan: SASL_SSL", "wan: SASL_SSL\n      between_brokers: SSL"),
     "8:7: clusters.east.security.between_brokers:", "standalone cluster is one broker"),
    ("zookeeper tls standalone", SECURED.replace("wan: SASL_SSL", "wan: SASL_SSL\n      zookeeper: SSL"),
     "8:7: clusters.east.security.zookeeper:", "a standalone cluster has no ZooKeeper"),
    ("zookeeper protocol unknown", SECURED.replace("wan: SASL_SSL", "wan: SASL_SSL\n      zookeeper: SASL_SSL"),
     "8:7: clusters.east.security.zookeeper:", "'SSL'"),
    ("admin user", SECURED.replace("users: [mirror-west, alice]", "users: [mirror-west, admin]"),
     "8:28: clusters.east.security.users[1]:", "the launcher's own user"),
    ("user twice", SECURED.replace("users: [mirror-west, alice]", "users: [alice, mirror-west, alice]"),
     "8:35: clusters.east.security.users[2]:", "listed twice"),
    ("two resources", SECURED.replace("group: app}", "group: app, topic: x}"),
     "11:11: clusters.east.security.acls[1]:", "exactly one resource"),
    ("no resource", SECURED.replace(", group: app}", "}"),
     "11:11: clusters.east.security.acls[1]:", "exactly one resource"),
    ("unknown operation", SECURED.replace("operations: [Read]", "operations: [Reed]"),
     "11:50: clusters.east.security.acls[1].operations[0]:", "'Read'"),
    ("principal not User:", SECURED.replace('"User:alice", operations: [Read]', 'alice, operations: [Read]'),
     "11:12: clusters.east.security.acls[1].principal:", "is not User:<name>"),
    ("mirror without principal", SECURED.replace(", principal: mirror-west", ""),
     "16:3: mirrors.e2w:", "give it principal:"),
    ("mirror principal not a user", SECURED.replace("principal: mirror-west", "principal: bob"),
     "16:49: mirrors.e2w.principal:", "'bob' is not a user of cluster 'east'"),
    ("mirror principal not a user of the target", SECURED.replace(
        "  west: {datacenter: west}", "  west: {datacenter: west, security: {local: SASL_PLAINTEXT, users: [x]}}"),
     "16:49: mirrors.e2w.principal:", "'mirror-west' is not a user of cluster 'west', which the mirror reaches over "
                                      "SASL_PLAINTEXT"),
    ("unknown security key", SECURED.replace("wan: SASL_SSL", "wan: SASL_SSL\n      user: [x]"),
     "8:7: clusters.east.security.user:", "unknown key 'user'"),
]


@pytest.mark.parametrize(("what", "text", "where", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_security_mistakes_are_named_by_line_and_key(tmp_path: Path, what: str, text: str, where: str,
                                                     message: str) -> None:
    assert_refused_at(tmp_path, text, where, message)


def test_a_mirror_inside_one_datacenter_uses_the_local_listener(tmp_path: Path) -> None:
    # Source and target in one datacenter: the mirror uses east's LOCAL listener, which is
    # plaintext here, so it needs no principal.
    text = SECURED.replace("  west: {datacenter: west}", "  west: {datacenter: east}").replace(
        ", principal: mirror-west", "")
    assert load_topology(write(tmp_path, text)).mirrors["e2w"].principal is None
