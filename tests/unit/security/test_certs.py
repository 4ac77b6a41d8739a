"""security.certs: the CA and identities it writes, what a second run keeps, what it refuses."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

from security.certs import CertsError, Identity, create_certificates

BROKER = Identity("b1", "broker", ("localhost", "127.0.0.1", "kafka-1.dc1.example"))
CLIENT = Identity("alice", "client")


def _certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_a_broker_certificate_names_every_host_and_serves_both_ends_of_tls(tmp_path: Path) -> None:
    ca, (broker, client) = create_certificates(tmp_path, [BROKER, CLIENT])
    cert = _certificate(broker.certificate)
    cert.verify_directly_issued_by(ca.certificate)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "kafka-1.dc1.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    client_cert = _certificate(client.certificate)
    assert client_cert.subject.rfc4514_string() == "CN=alice"
    assert list(client_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]


def test_secrets_are_readable_by_the_owner_only(tmp_path: Path) -> None:
    create_certificates(tmp_path, [BROKER])
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in tmp_path.iterdir()}
    for secret in ("ca.key", "b1.key", "b1.pem", "b1.p12", "b1.p12.password", "b1.properties"):
        assert modes[secret] & 0o077 == 0, secret
    assert modes["ca.crt"] & 0o044 == 0o044


def test_the_keystores_hold_the_key_and_the_chain(tmp_path: Path) -> None:
    ca, (broker,) = create_certificates(tmp_path, [BROKER])
    password = (tmp_path / "b1.p12.password").read_text().strip()
    key, cert, chain = pkcs12.load_key_and_certificates(broker.keystore_p12.read_bytes(), password.encode())
    assert key is not None and cert == _certificate(broker.certificate) and chain == [ca.certificate]
    pem = broker.keystore_pem.read_bytes()
    assert load_pem_private_key(pem, password=None).public_key() == cert.public_key()
    assert x509.load_pem_x509_certificates(pem) == [cert, ca.certificate]
    assert f"ssl.keystore.password={password}" in broker.properties.read_text()


def test_a_second_run_keeps_what_is_good_and_issues_what_changed(tmp_path: Path) -> None:
    create_certificates(tmp_path, [BROKER, CLIENT])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    wider = Identity("b1", "broker", (*BROKER.hosts, "10.0.0.7"))
    ca, results = create_certificates(tmp_path, [wider, CLIENT, Identity("bob", "client")])
    assert not ca.created
    assert [r.issued for r in results] == [True, False, True]
    assert (tmp_path / "ca.key").read_bytes() == before["ca.key"]
    assert (tmp_path / "alice.crt").read_bytes() == before["alice.crt"]
    assert (tmp_path / "b1.crt").read_bytes() != before["b1.crt"]
    _, renewed = create_certificates(tmp_path, [CLIENT], renew=True)
    assert renewed[0].issued and (tmp_path / "alice.crt").read_bytes() != before["alice.crt"]


def test_an_identity_signed_by_another_ca_is_issued_anew(tmp_path: Path) -> None:
    other = tmp_path / "other"
    create_certificates(other, [CLIENT])
    create_certificates(tmp_path, [])
    for suffix in (".crt", ".key"):
        (tmp_path / f"alice{suffix}").write_bytes((other / f"alice{suffix}").read_bytes())
    ca, (result,) = create_certificates(tmp_path, [CLIENT])
    assert result.issued
    _certificate(result.certificate).verify_directly_issued_by(ca.certificate)


@pytest.mark.parametrize("damage", ["truncate-cert", "garbage-key", "lose-key", "lose-cert", "foreign-key"])
def test_a_damaged_ca_is_refused_and_left_as_it_is(tmp_path: Path, damage: str) -> None:
    create_certificates(tmp_path, [])
    cert, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    if damage == "truncate-cert":
        cert.write_bytes(cert.read_bytes()[:100])
    elif damage == "garbage-key":
        key.write_bytes(b"\x00" * 50)
    elif damage == "lose-key":
        key.unlink()
    elif damage == "lose-cert":
        cert.unlink()
    else:
        create_certificates(tmp_path / "other", [])
        key.write_bytes((tmp_path / "other" / "ca.key").read_bytes())
    left = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(CertsError, match="ca"):
        create_certificates(tmp_path, [CLIENT])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == left


def test_a_leaf_certificate_is_refused_as_the_ca(tmp_path: Path) -> None:
    create_certificates(tmp_path / "a", [CLIENT])
    (tmp_path / "ca.crt").write_bytes((tmp_path / "a" / "alice.crt").read_bytes())
    (tmp_path / "ca.key").write_bytes((tmp_path / "a" / "alice.key").read_bytes())
    with pytest.raises(CertsError, match="not a CA certificate"):
        create_certificates(tmp_path, [CLIENT])


@pytest.mark.parametrize(
    ("identities", "message"),
    [
        ([Identity("../escape", "client")], "cannot be an identity name"),
        ([Identity(".hidden", "client")], "cannot be an identity name"),
        ([Identity("x" * 65, "client")], "cannot be an identity name"),
        ([Identity("ca", "client")], "the CA's own name"),
        ([Identity("b", "broker", ())], "needs at least one host"),
        ([Identity("b", "broker", ("bad host!",))], "neither an IP address nor a DNS name"),
        ([CLIENT, CLIENT], "named twice"),
    ],
)
def test_bad_names_are_refused_before_anything_is_written(
        tmp_path: Path, identities: list[Identity], message: str) -> None:
    with pytest.raises(CertsError, match=message):
        create_certificates(tmp_path / "out", identities)
    assert not (tmp_path / "out").exists()
