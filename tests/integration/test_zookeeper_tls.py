"""Brokers that reach ZooKeeper over mutual TLS and protect their znodes with ACLs
(zookeeper.ssl.*, zookeeper.set.acl), against a real ZooKeeper serving a TLS client port.

One ZooKeeper and a 2-broker cluster for the module: it has a plain client port too, which is
how an anonymous client on the network reaches it; the ACLs, not the port, keep that client from
rewriting the cluster. Every attack ends with the cluster serving a real client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from deploy.broker_process import BrokerProcess
from deploy.child_process import ChildFailed
from deploy.zookeeper.config import ZkTls
from security.certs import Identity, ZookeeperCertificates, create_certificates, create_zookeeper_certificates
from tests.integration.test_zookeeper_ensemble import start_cli
from tests.support.consume import read_partition
from tests.support.polling import wait_until
from tests.support.zookeeper import TEST_TUNING, ZooKeeperServer, zookeeper_server

CHROOT = "/causeway"


@dataclass
class SecuredCluster:
    zookeeper: ZooKeeperServer
    certs: ZookeeperCertificates
    brokers: list[BrokerProcess]
    mallory_keystore: Path   # signed by the same CA, another subject: TLS works, writes must not

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)


def _tls_overrides(zookeeper: ZooKeeperServer, certs: ZookeeperCertificates) -> tuple[str, ...]:
    return (f"zookeeper.connect={zookeeper.secure_connect}{CHROOT}",
            "zookeeper.ssl.client.enable=true",
            "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
            f"zookeeper.ssl.keystore.location={certs.client_keystore}",
            f"zookeeper.ssl.truststore.location={certs.truststore}",
            "zookeeper.set.acl=true")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    root = tmp_path_factory.mktemp("zk-tls")
    certs = create_zookeeper_certificates(root / "tls")
    _, (mallory,) = create_certificates(root / "tls", [Identity("mallory", "client")])
    tuning = replace(TEST_TUNING, tls=ZkTls(keystore=certs.server_keystore, truststore=certs.truststore))
    with zookeeper_server(root / "zookeeper", tuning=tuning) as zookeeper:
        brokers = [BrokerProcess(root / f"broker-{i}", overrides=(*_tls_overrides(zookeeper, certs), f"node.id={i}"))
                   for i in (1, 2)]
        try:
            for broker in brokers:
                broker.start()
            yield SecuredCluster(zookeeper, certs, brokers, mallory.keystore_pem)
        finally:
            for broker in brokers:
                if broker.proc is not None:
                    broker.stop()


def _kazoo(hosts: str, tls: tuple[Path, Path] | None = None) -> KazooClient:
    """A kazoo client of its own (not Causeway's): plain, or over TLS with (CA, key and chain PEM)."""
    options: dict[str, object] = {}
    if tls is not None:
        ca, keystore = tls
        options = {"use_ssl": True, "ca": str(ca), "certfile": str(keystore), "keyfile": str(keystore)}
    client = KazooClient(hosts=hosts, **options)
    client.start(timeout=15)
    return client


def _tls(certs: ZookeeperCertificates, keystore: Path) -> tuple[Path, Path]:
    return certs.truststore, keystore


def _round_trip(cluster: SecuredCluster, topic: str) -> None:
    """A real client produces to a new replicated topic and reads it back."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(30) == 0
    got = read_partition(cluster.bootstrap, topic)
    assert [r.value() for r in got] == [f"record-{i}".encode() for i in range(20)]


def _acls(client: KazooClient, path: str) -> set[tuple[str, str, int]]:
    acls, _ = client.get_acls(path)
    return {(acl.id.scheme, acl.id.id, acl.perms) for acl in acls}


def test_brokers_reach_zookeeper_over_tls_and_serve_clients(cluster: SecuredCluster) -> None:
    _round_trip(cluster, "over-tls")
    # Both brokers registered through the TLS port (the only one their config names).
    anonymous = _kazoo(f"{cluster.zookeeper.connect}{CHROOT}")
    try:
        assert sorted(anonymous.get_children("/brokers/ids")) == ["1", "2"]
    finally:
        anonymous.stop()


def test_znodes_carry_kafkas_acls(cluster: SecuredCluster) -> None:
    _round_trip(cluster, "acl-shape")
    owner = ("x509", cluster.certs.client_principal, 31)   # every right
    everyone_reads = ("world", "anyone", 1)
    brokers_side = _kazoo(f"{cluster.zookeeper.secure_connect}{CHROOT}",
                          _tls(cluster.certs, cluster.certs.client_keystore))
    try:
        for path in ("/brokers/ids/1", "/brokers/topics/acl-shape", "/brokers/topics/acl-shape/partitions/0/state",
                     "/config/topics/acl-shape", "/controller", "/config/changes"):
            assert _acls(brokers_side, path) == {owner, everyone_reads}, path
        for path in ("/config/users", "/config/brokers"):  # credentials and broker configs: brokers only
            assert _acls(brokers_side, path) == {owner}, path
    finally:
        brokers_side.stop()
    # The chroot itself, made by the first broker: nobody else may add or remove its children.
    root = _kazoo(cluster.zookeeper.connect)
    try:
        assert _acls(root, CHROOT) == {owner, everyone_reads}
    finally:
        root.stop()


@pytest.mark.parametrize("who", ["anonymous", "another certificate"])
def test_other_clients_cannot_rewrite_the_cluster(cluster: SecuredCluster, who: str) -> None:
    _round_trip(cluster, f"before-{uuid.uuid4().hex[:6]}")
    if who == "anonymous":  # the plain port, no identity at all
        client = _kazoo(f"{cluster.zookeeper.connect}{CHROOT}")
    else:  # TLS with a certificate the same CA signed, for another subject (CN=mallory)
        client = _kazoo(f"{cluster.zookeeper.secure_connect}{CHROOT}",
                        _tls(cluster.certs, cluster.mallory_keystore))
    try:
        registration, _ = client.get("/brokers/ids/1")  # reading the cluster's layout stays open
        assert json.loads(registration)["endpoints"]
        attacks = {
            "rewrite a broker's registration": lambda: client.set("/brokers/ids/1", b'{"endpoints":[]}'),
            "register a fake broker": lambda: client.create("/brokers/ids/66", b"{}"),
            "delete the controller": lambda: client.delete("/controller"),
            "claim a topic": lambda: client.create("/brokers/topics/stolen", b'{"partitions":{"0":[66]}}'),
            "rewrite a partition's state": lambda: client.set("/brokers/topics/acl-shape/partitions/0/state",
                                                              b'{"leader":66,"isr":[66]}'),
            "change a topic's config": lambda: client.set("/config/topics/acl-shape", b'{"config":{}}'),
            "announce a config change": lambda: client.create("/config/changes/config_change_", b"{}",
                                                              sequence=True),
            "read the SCRAM credentials": lambda: client.get_children("/config/users"),
            "read the brokers' dynamic configs": lambda: client.get_children("/config/brokers"),
            "reset the cluster id": lambda: client.set("/cluster/id", b'{"version":"1","id":"x"}'),
        }
        allowed = []
        for name, attack in attacks.items():
            try:
                attack()
            except NoAuthError:
                continue
            allowed.append(name)
        assert allowed == [], f"{who} could {', '.join(allowed)}"
    finally:
        client.stop()
    _round_trip(cluster, f"after-{uuid.uuid4().hex[:6]}")


def test_scram_credentials_are_written_for_the_brokers_only(cluster: SecuredCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"alice-secret")
    admin.alter_user_scram_credentials([upsert])["alice"].result(30)
    brokers_side = _kazoo(f"{cluster.zookeeper.secure_connect}{CHROOT}",
                          _tls(cluster.certs, cluster.certs.client_keystore))
    anonymous = _kazoo(f"{cluster.zookeeper.connect}{CHROOT}")
    try:
        wait_until(lambda: brokers_side.exists("/config/users/alice") is not None, what="alice's credential znode")
        assert _acls(brokers_side, "/config/users/alice") == {("x509", cluster.certs.client_principal, 31)}
        with pytest.raises(NoAuthError):
            anonymous.get("/config/users/alice")
    finally:
        brokers_side.stop()
        anonymous.stop()


def test_a_broker_that_does_not_trust_zookeeper_stops_with_the_reason(
        cluster: SecuredCluster, tmp_path: Path) -> None:
    other_ca = create_zookeeper_certificates(tmp_path / "other-ca")  # a CA the ensemble never saw
    broker = BrokerProcess(tmp_path / "broker-9", overrides=(
        f"zookeeper.connect={cluster.zookeeper.secure_connect}{CHROOT}",
        "zookeeper.ssl.client.enable=true",
        f"zookeeper.ssl.keystore.location={other_ca.client_keystore}",
        f"zookeeper.ssl.truststore.location={other_ca.truststore}",
        "zookeeper.set.acl=true", "zookeeper.connection.timeout.ms=2000", "node.id=9"))
    with pytest.raises(ChildFailed) as failure:
        broker.start()
    assert "TLS handshake failed" in str(failure.value)
    assert "ZooKeeper's certificate does not verify" in str(failure.value)
    anonymous = _kazoo(f"{cluster.zookeeper.connect}{CHROOT}")
    try:
        assert "9" not in anonymous.get_children("/brokers/ids")
    finally:
        anonymous.stop()
    _round_trip(cluster, "after-refused-broker")


def test_causeway_zookeeper_tls_runs_an_ensemble_brokers_join_with_its_keys(tmp_path: Path) -> None:
    proc, plain_connect, pids = start_cli(tmp_path, "--nodes", "3", "--tls")
    try:
        keys = tmp_path / "zk" / "tls" / "broker-zookeeper.properties"
        overrides = [line for line in keys.read_text().splitlines() if line and not line.startswith("#")]
        secure_connect = dict(line.split("=", 1) for line in overrides)["zookeeper.connect"]
        assert len(secure_connect.split(",")) == 3 and set(secure_connect.split(",")).isdisjoint(
            plain_connect.split(","))
        broker = BrokerProcess(tmp_path / "broker-1", overrides=(*overrides, "node.id=1"))
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("managed", 1, 1)])["managed"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            producer.produce("managed", b"over a TLS ensemble")
            assert producer.flush(30) == 0
            assert [m.value() for m in read_partition(broker.bootstrap, "managed")] == [b"over a TLS ensemble"]
            anonymous = _kazoo(plain_connect)
            try:
                with pytest.raises(NoAuthError):
                    anonymous.create("/brokers/ids/66", b"{}")
            finally:
                anonymous.stop()
        finally:
            broker.stop()
    finally:
        assert proc.stop(30) == 0
