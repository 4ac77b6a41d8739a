"""Kafka's ZooKeeper client TLS keys (zookeeper.ssl.*) and zookeeper.set.acl, as the broker reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig, ConfigError
from deploy.zookeeper.config import NodePorts, Tuning, ZkTls, render_zoo_cfg
from security.znode_acls import is_sensitive, secure_acls

TLS = {"zookeeper.connect": "127.0.0.1:2182/kafka", "zookeeper.ssl.client.enable": "true",
       "zookeeper.ssl.keystore.location": "/certs/kafka-brokers.pem",
       "zookeeper.ssl.truststore.location": "/certs/ca.crt"}


def test_plaintext_unless_the_client_is_enabled() -> None:
    config = BrokerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181",
                                           "zookeeper.ssl.keystore.location": "/certs/b.pem"})
    assert config.zookeeper_ssl is None and not config.zookeeper_set_acl


def test_the_keys_become_tls_settings_with_zookeepers_defaults() -> None:
    config = BrokerConfig.from_properties({**TLS, "zookeeper.set.acl": "true",
                                           "zookeeper.ssl.endpoint.identification.algorithm": "HTTPS",
                                           "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
                                           "zookeeper.ssl.keystore.password": "s3cret"})
    tls = config.zookeeper_ssl
    assert tls is not None and config.zookeeper_set_acl
    # Store types from the file extensions, as ZooKeeper's client infers them.
    assert (tls.keystore_type, tls.truststore_type) == ("PEM", "PEM")
    assert tls.keystore_location == "/certs/kafka-brokers.pem" and tls.protocol == "TLSv1.2"
    assert tls.endpoint_identification_algorithm == "https"
    assert "s3cret" not in repr(config) and "s3cret" not in repr(tls)
    p12 = BrokerConfig.from_properties({**TLS, "zookeeper.ssl.keystore.location": "/certs/b.p12"}).zookeeper_ssl
    assert p12 is not None and p12.keystore_type == "PKCS12"


@pytest.mark.parametrize(("props", "message"), [
    ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl: znode ACLs need an identity in ZooKeeper"),
    ({**TLS, "zookeeper.set.acl": "true", "zookeeper.ssl.keystore.location": None},
     "zookeeper.set.acl: znode ACLs need the broker's client certificate"),
    ({**TLS, "zookeeper.ssl.keystore.location": "/certs/b.key"}, "cannot tell the store type of /certs/b.key"),
    ({**TLS, "zookeeper.ssl.truststor.location": "/x"}, "did you mean 'zookeeper.ssl.truststore.location'"),
    ({**TLS, "zookeeper.ssl.protocol": "SSLv3"}, "zookeeper.ssl.protocol: 'SSLv3' is not one of"),
    ({**TLS, "zookeeper.ssl.crl.enable": "true"}, "zookeeper.ssl.crl.enable: certificate revocation checks"),
    ({**TLS, "zookeeper.ssl.client.enable": "maybe"}, "zookeeper.ssl.client.enable"),
])
def test_bad_keys_are_refused_by_name(props: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        BrokerConfig.from_properties({k: v for k, v in props.items() if v is not None})


def test_revocation_switches_off_are_accepted() -> None:
    config = BrokerConfig.from_properties({**TLS, "zookeeper.ssl.crl.enable": "false",
                                           "zookeeper.ssl.ocsp.enable": "false"})
    assert config.zookeeper_ssl is not None


def test_znode_acls_follow_kafkas_sensitive_paths() -> None:
    creator_all = ("auth", "", 31)
    anyone_reads = ("world", "anyone", 1)

    def shape(path: str) -> set[tuple[str, str, int]]:
        return {(acl.id.scheme, acl.id.id, acl.perms) for acl in secure_acls(path)}  # type: ignore[attr-defined]

    for path in ("/brokers/ids/1", "/config", "/config/topics/orders", "/controller", "/kafka-acl/Topic/x",
                 "/config/usersx"):
        assert shape(path) == {creator_all, anyone_reads}, path
    for path in ("/config/users", "/config/users/alice", "/config/brokers/<default>", "/delegation_token/tokens"):
        assert is_sensitive(path) and shape(path) == {creator_all}, path


def test_zoo_cfg_serves_a_tls_client_port_with_x509_identities(tmp_path: Path) -> None:
    tls = ZkTls(keystore=tmp_path / "zookeeper.pem", truststore=tmp_path / "ca.crt")
    text = render_zoo_cfg(data_dir=tmp_path, ports=NodePorts(2181, 0, 0, secure_client=2182), peers=(),
                          tuning=Tuning(tls=tls))
    lines = set(text.splitlines())
    assert {"clientPort=2181", "secureClientPort=2182", "ssl.clientAuth=need", "ssl.keyStore.type=PEM",
            f"ssl.keyStore.location={tmp_path / 'zookeeper.pem'}", f"ssl.trustStore.location={tmp_path / 'ca.crt'}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider"} <= lines
    plain = render_zoo_cfg(data_dir=tmp_path, ports=NodePorts(2181, 0, 0), peers=(), tuning=Tuning())
    assert "secureClientPort" not in plain and "ssl." not in plain
