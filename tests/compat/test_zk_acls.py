"""ACLs on a ZooKeeper-mode cluster, judged by Kafka 3.9's own ``kafka-acls``: ACLs created
through Causeway (CreateAcls) sit in Kafka's znodes, where ``kafka-acls`` finds them both through
a broker and by reading ZooKeeper itself; ACLs that ``kafka-acls`` writes into ZooKeeper (Kafka's
AclAuthorizer code) are in force on every broker at once, through the change notifications; two
brokers adding ACLs to one resource at once lose none; garbage in the znodes is skipped.

Only the ACL APIs enforce ACLs so far, so "in force" is seen through them: each broker answers
DescribeAcls from its own cache, and Describe on the cluster is what lets a user list ACLs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trio
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from bench.peers import run_tool
from bench.peers.tools import ToolRun
from broker.client import admin, open_client
from broker.protocol.errors import ErrorCode, KafkaError
from security.client import client_security
from tests.support.cluster import ZkCluster, own_zookeeper_cluster
from tests.support.polling import wait_until
from tests.support.secured import AUTHORIZER, JAAS, TIMEOUT_S, allow, grant, revoke

pytestmark = pytest.mark.compat

OVERRIDES = (
    "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name=PLAINTEXT",
    "sasl.enabled.mechanisms=PLAIN",
    f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
    f"authorizer.class.name={AUTHORIZER}",
    # The brokers reach each other on PLAINTEXT, where every connection is User:ANONYMOUS: a super
    # user until inter-broker authentication lands (then it is the brokers' own principal).
    "super.users=User:admin;User:ANONYMOUS",
    "offsets.topic.replication.factor=1",
    "offsets.topic.num.partitions=1",
)
REPO = Path(__file__).resolve().parents[2]
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with own_zookeeper_cluster(ZkCluster, tmp_path_factory.mktemp("zk-acls"), OVERRIDES) as running:
        yield running


@pytest.fixture(scope="module")
def admin_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kafka-acls") / "admin.properties"
    path.write_text(f'security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={PLAIN_LOGIN} '
                    'username="admin" password="admin-secret";\n')
    return path


def kafka_acls_in_zookeeper(cluster: ZkCluster, *args: str) -> ToolRun:
    """Kafka 3.9's kafka-acls writing and reading ZooKeeper itself (its AclAuthorizer)."""
    return run_tool("kafka-acls", "--authorizer-properties", f"zookeeper.connect={cluster.zookeeper.connect}",
                    *args, profile="kafka3").check()


def acls_on(cluster: ZkCluster, broker_id: int, user: str = "admin") -> set[str] | None:
    """The ACLs broker ``broker_id`` itself lists to ``user`` (each answers from its own cache);
    None when it refuses (no Describe on the cluster)."""
    security = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                                f'{PLAIN_LOGIN} username="{user}" password="{user}-secret";'})

    async def ask() -> set[str] | None:
        async with open_client(cluster.brokers[broker_id].listeners["SASL_PLAINTEXT"], security=security,
                               request_timeout_s=TIMEOUT_S) as client:
            try:
                return {str(b) for b in await admin.describe_acls(client, node_id=broker_id)}
            except KafkaError as exc:
                if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                    return None
                raise

    return trio.run(ask)


def on_every_broker(cluster: ZkCluster, what: str, condition: Callable[[int], bool]) -> None:
    for broker_id in cluster.brokers:
        wait_until(lambda b=broker_id: condition(b), what=f"{what} on broker {broker_id}", timeout_s=TIMEOUT_S)


def listed_everywhere(cluster: ZkCluster, line: str, present: bool = True) -> None:
    on_every_broker(cluster, f"{line} {'listed' if present else 'gone'}",
                    lambda b: (line in (acls_on(cluster, b) or ())) == present)


def test_acls_created_through_causeway_are_kafkas_znodes_and_kafka_acls_lists_them_both_ways(
        cluster: ZkCluster, admin_config: Path, kafka_jars: None) -> None:
    grant(cluster.brokers[1], [
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
        allow("User:alice", ResourceType.TOPIC, "pay-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx-1", AclOperation.WRITE)])
    literal = json.loads(cluster.zk.get("/kafka-acl/Topic/orders")[0])
    assert literal == {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                               "operation": "Read", "host": "*"}]}
    assert json.loads(cluster.zk.get("/kafka-acl-extended/prefixed/Topic/pay-")[0])["acls"][0]["operation"] == "Write"
    assert cluster.zk.exists("/kafka-acl/TransactionalId/tx-1") is not None
    notices = {cluster.zk.get(f"/kafka-acl-changes/{c}")[0] for c in cluster.zk.get_children("/kafka-acl-changes")}
    assert {b"TOPIC:orders", b"TRANSACTIONAL_ID:tx-1"} <= notices
    extended = [json.loads(cluster.zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                for c in cluster.zk.get_children("/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "TOPIC", "name": "pay-", "patternType": "PREFIXED"} in extended
    # Every broker has them (the others through the notifications).
    listed_everywhere(cluster, "Topic:PREFIXED:pay- Allow User:alice Write from *")

    through_broker = run_tool("kafka-acls", "--bootstrap-server", cluster.brokers[2].listeners["SASL_PLAINTEXT"],
                              "--command-config", str(admin_config), "--list", profile="kafka3").check().stdout
    in_zookeeper = kafka_acls_in_zookeeper(cluster, "--list").stdout
    for listing in (through_broker, in_zookeeper):
        assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in listing
        assert "ResourcePattern(resourceType=TOPIC, name=pay-, patternType=PREFIXED)" in listing
        assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listing
        assert "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-1, patternType=LITERAL)" in listing


def test_acls_kafka_acls_writes_into_zookeeper_are_in_force_on_every_broker(
        cluster: ZkCluster, kafka_jars: None) -> None:
    assert all(acls_on(cluster, b, "bob") is None for b in cluster.brokers)
    kafka_acls_in_zookeeper(cluster, "--add", "--allow-principal", "User:bob", "--operation", "Describe", "--cluster")
    on_every_broker(cluster, "bob listing ACLs", lambda b: acls_on(cluster, b, "bob") is not None)
    # A prefixed one goes through the other change path.
    kafka_acls_in_zookeeper(cluster, "--add", "--deny-principal", "User:bob", "--operation", "Read", "--topic",
                            "secret-", "--resource-pattern-type", "prefixed")
    listed_everywhere(cluster, "Topic:PREFIXED:secret- Deny User:bob Read from *")
    kafka_acls_in_zookeeper(cluster, "--remove", "--force", "--allow-principal", "User:bob", "--operation",
                            "Describe", "--cluster")
    on_every_broker(cluster, "bob refused again", lambda b: acls_on(cluster, b, "bob") is None)


def test_two_brokers_adding_acls_to_one_resource_at_once_lose_none(cluster: ZkCluster) -> None:
    def add(broker_id: int) -> None:
        for n in range(8):
            grant(cluster.brokers[broker_id], [allow(f"User:writer-{broker_id}-{n}", ResourceType.GROUP, "contended",
                                                     AclOperation.READ)])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(add, (1, 2)))
    stored = json.loads(cluster.zk.get("/kafka-acl/Group/contended")[0])["acls"]
    assert sorted(e["principal"] for e in stored) == sorted(f"User:writer-{b}-{n}" for b in (1, 2) for n in range(8))
    listed_everywhere(cluster, "Group:LITERAL:contended Allow User:writer-2-7 Read from *")
    removed = revoke(cluster.brokers[3], [AclBindingFilter(ResourceType.GROUP, "contended", ResourcePatternType.LITERAL,
                                                           None, None, AclOperation.ANY, AclPermissionType.ANY)])
    assert len(removed) == 16
    assert cluster.zk.exists("/kafka-acl/Group/contended") is None  # no entries left: gone, as Kafka does
    listed_everywhere(cluster, "Group:LITERAL:contended Allow User:writer-2-7 Read from *", present=False)


def test_garbage_in_the_acl_znodes_is_skipped_and_an_unreadable_pattern_fails_closed(cluster: ZkCluster) -> None:
    grant(cluster.brokers[1], [allow("User:mirror", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    on_every_broker(cluster, "mirror listing ACLs", lambda b: acls_on(cluster, b, "mirror") is not None)
    cluster.zk.create("/kafka-acl-changes/acl_changes_", b"\xff not a pattern", sequence=True)
    cluster.zk.create("/kafka-acl-extended-changes/acl_changes_", b'{"version":9}', sequence=True)
    cluster.zk.create("/kafka-acl-changes/acl_changes_", b"NO_SUCH_TYPE:x", sequence=True)
    cluster.zk.set("/kafka-acl/Cluster/kafka-cluster", b"{not json")
    cluster.zk.create("/kafka-acl-changes/acl_changes_", b"CLUSTER:kafka-cluster", sequence=True)
    # The cluster's ACLs are unknown now: mirror's Allow is not in force, nor is anything else on
    # the cluster, until the znode is written again (a damaged Deny must not turn into an Allow).
    on_every_broker(cluster, "mirror refused", lambda b: acls_on(cluster, b, "mirror") is None)
    for broker in cluster.brokers.values():
        assert "cannot be read" in broker.log_tail(200)
        assert "ignoring ACL change notification" in broker.log_tail(200)
    cluster.zk.delete("/kafka-acl/Cluster/kafka-cluster")
    grant(cluster.brokers[2], [allow("User:mirror", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    on_every_broker(cluster, "mirror listing ACLs again", lambda b: acls_on(cluster, b, "mirror") is not None)
    revoke(cluster.brokers[2], [AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                                 "User:mirror", None, AclOperation.ANY, AclPermissionType.ANY)])


def causeway_acls(cluster: ZkCluster, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "acls", "--bootstrap-server",
                           cluster.brokers[3].listeners["SASL_PLAINTEXT"], "--command-config", str(config), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_causeway_acls_adds_lists_and_removes_as_kafka_acls_does(
        cluster: ZkCluster, admin_config: Path, kafka_jars: None) -> None:
    added = causeway_acls(cluster, admin_config, "--add", "--producer", "--topic", "ledger", "--allow-principal",
                          "User:alice")
    assert added.returncode == 0, added.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ledger, patternType=LITERAL)`" in \
        added.stdout
    added = causeway_acls(cluster, admin_config, "--add", "--consumer", "--topic", "ledger", "--group", "readers",
                          "--allow-principal", "User:bob", "--allow-host", "10.0.0.7")
    assert added.returncode == 0, added.stderr
    def both(*args: str) -> tuple[str, str]:
        ours = causeway_acls(cluster, admin_config, *args)
        assert ours.returncode == 0, ours.stderr
        theirs = run_tool("kafka-acls", "--bootstrap-server", cluster.brokers[1].listeners["SASL_PLAINTEXT"],
                          "--command-config", str(admin_config), *args, profile="kafka3").check()
        return ours.stdout, theirs.stdout

    ours, theirs = both("--list", "--group", "readers")
    assert ours == theirs  # one entry: the same text, byte for byte
    ours, theirs = both("--list", "--topic", "ledger", "--group", "readers")
    # The same lines (kafka-acls prints its sets in no particular order, so the spaces it puts
    # before the first entry and after the last move about).
    assert sorted(line.strip() for line in ours.splitlines()) == sorted(line.strip() for line in theirs.splitlines())
    assert "\t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)" in ours
    assert "\t(principal=User:bob, host=10.0.0.7, operation=READ, permissionType=ALLOW)" in ours
    bobs = causeway_acls(cluster, admin_config, "--list", "--principal", "User:bob").stdout
    assert bobs.startswith("ACLs for principal `User:bob`") and "User:alice" not in bobs
    assert "name=readers" in bobs

    producer = causeway_acls(cluster, admin_config, "--add", "--producer", "--idempotent", "--transactional-id", "tx-",
                             "--resource-pattern-type", "prefixed", "--allow-principal", "User:payer")
    assert producer.returncode == 0, producer.stderr
    payer = causeway_acls(cluster, admin_config, "--list", "--principal", "User:payer").stdout
    assert "`ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-, patternType=PREFIXED)`" in payer
    assert "`ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`" in payer
    assert payer.count("principal=User:payer") == 3  # Write, Describe on the ids; IdempotentWrite on the cluster
    assert "operation=IDEMPOTENT_WRITE" in payer
    assert causeway_acls(cluster, admin_config, "--remove", "--force", "--allow-principal", "User:payer", "--producer",
                         "--idempotent", "--transactional-id", "tx-", "--resource-pattern-type", "prefixed"
                         ).returncode == 0
    assert "User:payer" not in causeway_acls(cluster, admin_config, "--list").stdout

    removed = causeway_acls(cluster, admin_config, "--remove", "--force", "--topic", "ledger", "--allow-principal",
                            "User:alice", "--operation", "Write")
    assert removed.returncode == 0, removed.stderr
    assert "operation=WRITE" not in removed.stdout and "operation=CREATE" in removed.stdout  # it lists what is left
    assert causeway_acls(cluster, admin_config, "--remove", "--force", "--group", "readers").returncode == 0
    left = causeway_acls(cluster, admin_config, "--list", "--resource-pattern-type", "any").stdout
    assert "name=readers" not in left and "name=ledger" in left

    # The broker's refusal, with its message; a command line that cannot be run.
    refused = causeway_acls(cluster, bob_config(admin_config), "--add", "--topic", "x", "--allow-principal",
                            "User:bob")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    assert "Cluster authorization failed." in refused.stderr
    unusable = causeway_acls(cluster, admin_config, "--add", "--topic", "x")
    assert unusable.returncode == 2 and "--allow-principal" in unusable.stderr
    wrong = causeway_acls(cluster, admin_config, "--add", "--group", "g", "--allow-principal", "User:x",
                          "--operation", "Write")
    assert wrong.returncode == 2 and "Group only supports operations" in wrong.stderr


def bob_config(admin_config: Path) -> Path:
    path = admin_config.with_name("bob.properties")
    path.write_text(admin_config.read_text().replace('"admin"', '"bob"').replace("admin-secret", "bob-secret"))
    return path
