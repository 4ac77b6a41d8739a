"""What `causeway up` writes for a secured cluster (deploy/launcher/security.py), without
starting anything: the files and their modes, the passwords kept across runs, the brokers'
secret configs and command lines, the client files as Causeway's client reads them, the ACLs."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from deploy.launcher.from_topology import plan_from_file
from deploy.launcher.launch import BROKER_LISTENER, broker_spec
from deploy.launcher.plan import AclPlan, ClusterPlan, MirrorPlan, SecurityPlan
from deploy.launcher.security import (
    ACL_AUTHORIZER,
    ACL_SYNC_GRANTS,
    OFFSET_SYNCS_GRANTS,
    SOURCE_GRANTS,
    TARGET_GRANTS,
    admin_security,
    mirror_acls,
    prepare_cluster,
    read_client_security,
)
from mirror.config import MirrorConfig
from tests.unit.topology.test_topology_security import SECURED

PLAIN = SecurityPlan(wan="SASL_SSL", users=("alice", "mirror-west"), acls=())
SCRAM = SecurityPlan(local="SASL_PLAINTEXT", wan="SASL_SSL", between_brokers="SSL", mechanism="SCRAM-SHA-512",
                     users=("alice",))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_are_private_and_passwords_survive_a_restart(tmp_path: Path) -> None:
    cluster = ClusterPlan("east", "east", security=PLAIN, remote_datacenters=("west",))
    secrets = prepare_cluster(tmp_path / "security" / "east", cluster)
    assert set(secrets.passwords) == {"admin", "alice", "mirror-west"}
    assert len(set(secrets.passwords.values())) == 3
    for name in ("passwords.json", "admin.properties", "alice.properties", "alice.wan.properties"):
        assert _mode(secrets.directory / name) == 0o600, name
    assert _mode(secrets.directory) == 0o700 and _mode(tmp_path / "security") == 0o700
    assert (secrets.certs / "broker-0.crt").exists() and (secrets.certs / "alice.pem").exists()
    # The same state dir again, one user more: the passwords already given are kept.
    more = ClusterPlan("east", "east", security=SecurityPlan(wan="SASL_SSL", users=("alice", "mirror-west", "bob")))
    again = prepare_cluster(tmp_path / "security" / "east", more)
    assert {u: again.passwords[u] for u in secrets.passwords} == dict(secrets.passwords)
    assert "bob" in again.passwords


def test_a_damaged_passwords_file_is_named_not_replaced(tmp_path: Path) -> None:
    cluster = ClusterPlan("east", "east", security=PLAIN)
    prepare_cluster(tmp_path / "security" / "east", cluster)
    (tmp_path / "security" / "east" / "passwords.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="passwords.json is not the launcher's passwords file"):
        prepare_cluster(tmp_path / "security" / "east", cluster)


def test_client_files_log_in_as_kafkas_clients_do(tmp_path: Path) -> None:
    east = ClusterPlan("east", "east", security=PLAIN, remote_datacenters=("west",))
    secrets = prepare_cluster(tmp_path / "security" / "east", east)
    local = read_client_security(secrets.client_config("alice"))
    assert local.protocol == "PLAINTEXT" and local.sasl is None
    wan = read_client_security(secrets.client_config("alice", wan=True))
    assert wan.protocol == "SASL_SSL" and wan.ssl_context is not None
    assert wan.sasl is not None and (wan.sasl.mechanism, wan.sasl.username) == ("PLAIN", "alice")
    assert wan.sasl.password == secrets.passwords["alice"]
    mutual = secrets.client_properties("alice", "SSL")
    assert mutual["ssl.keystore.location"].endswith("alice.pem")
    # A cluster no other datacenter reads has no WAN listener, so no WAN client file.
    alone = prepare_cluster(tmp_path / "security" / "west", ClusterPlan("west", "west", security=PLAIN))
    assert (alone.directory / "alice.properties").exists() and not (alone.directory / "alice.wan.properties").exists()


def test_mutual_tls_on_local_reads_the_admins_certificate_and_trusts_no_anonymous(tmp_path: Path) -> None:
    cluster = ClusterPlan("east", "east", security=SecurityPlan(local="SSL", users=("alice",), acls=()))
    secrets = prepare_cluster(tmp_path / "security" / "east", cluster)
    security = admin_security(secrets)
    assert security is not None and security.protocol == "SSL" and security.sasl is None
    assert security.ssl_context is not None
    # No PLAINTEXT listener and no brokers reaching each other: nobody anonymous is trusted.
    assert secrets.super_users() == ["User:admin"]
    west = ClusterPlan("west", "west", security=PLAIN)
    assert admin_security(prepare_cluster(tmp_path / "security" / "west", west)) is None


def test_a_standalone_brokers_secrets_go_to_its_config_file_not_its_command_line(tmp_path: Path) -> None:
    cluster = ClusterPlan("east", "east", security=PLAIN, remote_datacenters=("west",))
    secrets = prepare_cluster(tmp_path / "security" / "east", cluster)
    spec = broker_spec(tmp_path, cluster, 0, "127.0.0.1:1", {"west": "127.0.0.1:2"}, {"west": 3}, "", secrets)
    argv = " ".join(spec.argv)
    assert "listener.security.protocol.map=LOCAL:PLAINTEXT,WAN_WEST:SASL_SSL" in argv
    assert "inter.broker.listener.name=LOCAL" in argv
    assert not any(p in argv for p in secrets.passwords.values())
    config = Path(spec.argv[spec.argv.index("--config") + 1])
    assert _mode(config) == 0o600
    text = config.read_text()
    assert f'user_alice="{secrets.passwords["alice"]}"' in text
    assert "listener.name.wan_west.plain.sasl.jaas.config=" in text and "sasl.enabled.mechanisms=PLAIN" in text
    assert f"authorizer.class.name={ACL_AUTHORIZER}" in text
    # LOCAL is PLAINTEXT: its clients are all User:ANONYMOUS, trusted (see super_users).
    assert "super.users=User:admin;User:ANONYMOUS" in text


def test_a_zookeeper_cluster_with_scram_and_mutual_tls_between_brokers(tmp_path: Path) -> None:
    cluster = ClusterPlan("east", "east", security=SCRAM, coordination="zookeeper", brokers=2,
                          remote_datacenters=("west",))
    secrets = prepare_cluster(tmp_path / "security" / "east", cluster)
    spec = broker_spec(tmp_path, cluster, 2, "127.0.0.1:1", {"west": "127.0.0.1:2"}, {"west": 3},
                        "127.0.0.1:9/east", secrets, broker_port=4)
    argv = " ".join(spec.argv)
    assert (f"listener.security.protocol.map=LOCAL:SASL_PLAINTEXT,WAN_WEST:SASL_SSL,{BROKER_LISTENER}:SSL"
            in argv)
    assert f"inter.broker.listener.name={BROKER_LISTENER}" in argv
    text = Path(spec.argv[spec.argv.index("--config") + 1]).read_text()
    # SCRAM: the credentials are in ZooKeeper; no password in the broker's file.
    assert not any(p in text for p in secrets.passwords.values())
    assert "listener.name.local.scram-sha-512.sasl.jaas.config=" in text
    assert "listener.name.broker.ssl.client.auth=required" in text
    assert "broker-2.pem" in text and "ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT" in text
    assert "authorizer.class.name" not in text  # no acls: no authorizer
    assert secrets.super_users() == ["User:admin", "User:broker-1", "User:broker-2"]


def test_the_plan_carries_one_acl_per_operation(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SECURED)
    plan = plan_from_file(path)
    security = plan.cluster("east").security
    assert security is not None and security.mechanism == "PLAIN" and security.users == ("mirror-west", "alice")
    assert security.acls == (AclPlan("User:alice", "Read", "Topic", "orders", "prefixed"),
                             AclPlan("User:alice", "Describe", "Topic", "orders", "prefixed"),
                             AclPlan("User:alice", "Read", "Group", "app"))
    assert plan.cluster("west").security is None
    assert plan.mirrors[0].principal == "mirror-west"


def test_mirrors_are_granted_what_they_need_where_acls_are_on() -> None:
    east = ClusterPlan("east", "east", security=PLAIN)
    west = ClusterPlan("west", "west", security=SecurityPlan(users=("mirror-west",), acls=()))
    mirror = MirrorPlan("e2w", "east", "west", {"mode": "link"}, principal="mirror-west")
    source = {(a.resource_type, a.operation) for a in mirror_acls(east, [mirror])}
    assert source == {(kind, op) for kind, _, ops in SOURCE_GRANTS for op in ops}
    target = {(a.resource_type, a.operation) for a in mirror_acls(west, [mirror])}
    assert target == {(kind, op) for kind, _, ops in TARGET_GRANTS + ACL_SYNC_GRANTS for op in ops}
    # The mirror syncs topic ACLs by default (CreateAcls at the target: Alter on the cluster) and
    # copies with LinkAppend (Alter on the topic); Describe on the cluster reads ACLs at each end.
    assert MirrorConfig.model_fields["sync_topic_acls"].default is True
    assert {("Cluster", "Alter"), ("Topic", "Alter"), ("Cluster", "Describe")} <= target
    assert ("Cluster", "Describe") in source
    assert all(a.principal == "User:mirror-west" for a in mirror_acls(east, [mirror]))
    assert mirror_acls(ClusterPlan("east", "east", security=SCRAM), [mirror]) == []  # no acls: nothing to grant


def test_a_mirror_that_syncs_no_topic_acls_is_not_granted_alter_on_the_target(tmp_path: Path) -> None:
    """`sync_topic_acls: false` in the topology: the mirror's config says sync.topic.acls.enabled
    false, and the target grants it everything it writes with (Alter on topics: LinkAppend) but
    not Alter on the cluster (CreateAcls); the source's grants are the same either way."""
    path = tmp_path / "s.yaml"
    path.write_text(SECURED.replace("principal: mirror-west}", "principal: mirror-west, sync_topic_acls: false}")
                    .replace("  west: {datacenter: west}", "  west: {datacenter: west, security: {acls: []}}"))
    mirror = plan_from_file(path).mirrors[0]
    assert not mirror.syncs_topic_acls
    config = MirrorConfig.model_validate({"name": "e2w", "source": {"alias": "east", "bootstrap": "127.0.0.1:1"},
                                          "target": {"alias": "west", "bootstrap": "127.0.0.1:2"}, **mirror.settings})
    assert config.sync_topic_acls is False
    plan = plan_from_file(path)
    target = {(a.resource_type, a.operation) for a in mirror_acls(plan.cluster("west"), [mirror])}
    assert target == {(kind, op) for kind, _, ops in TARGET_GRANTS for op in ops}
    assert ("Cluster", "Alter") not in target and {("Topic", "Alter"), ("Topic", "Write")} <= target
    synced = MirrorPlan("e2w", "east", "west", {"mode": "link"}, principal="mirror-west")
    assert synced.syncs_topic_acls
    assert mirror_acls(plan.cluster("east"), [mirror]) == mirror_acls(plan.cluster("east"), [synced])
    # On (the default, or said): the mirror config's key is left to its default, true.
    path.write_text(SECURED)
    assert "sync.topic.acls.enabled" not in plan_from_file(path).mirrors[0].settings


def test_an_mm2_mirror_may_keep_its_offset_syncs_on_the_source_and_write_nothing_else_there() -> None:
    """MM2 keeps offset syncs on the source by default: without Create and Write on that one
    topic, an mm2 mirror reading a source with ACLs never starts copying."""
    east = ClusterPlan("east", "east", security=PLAIN)
    mm2 = MirrorPlan("e2w", "east", "west", {"mode": "mm2"}, principal="mirror-west")
    granted = {(a.resource_type, a.resource_name, a.operation) for a in mirror_acls(east, [mm2])}
    syncs = {(a.resource_name, a.operation) for a in mirror_acls(east, [mm2]) if a.resource_name != "*"
             and a.resource_type == "Topic"}
    assert syncs == {("mm2-offset-syncs.west.internal", op) for op in OFFSET_SYNCS_GRANTS}
    assert not {("Topic", "*", "Write"), ("Topic", "*", "Create")} & granted
    on_target = MirrorPlan("e2w", "east", "west", {"mode": "mm2", "offset-syncs.topic.location": "target"},
                           principal="mirror-west")
    link = MirrorPlan("e2w", "east", "west", {"mode": "link"}, principal="mirror-west")
    for other in (on_target, link):
        assert {(a.resource_type, a.operation) for a in mirror_acls(east, [other])} == \
            {(kind, op) for kind, _, ops in SOURCE_GRANTS for op in ops}
