"""Certificates for development and tests: a CA, and broker and client identities it signs.

What `causeway certs create` writes into one directory, in the formats Kafka's and librdkafka's
configs read without conversion:

- ``ca.crt`` (the truststore: ``ssl.truststore.type=PEM``, librdkafka's ``ssl.ca.location``) and
  ``ca.key`` (0600; kept so that later runs sign new identities with the same CA).
- per identity NAME: ``NAME.key`` (PKCS#8, unencrypted, 0600), ``NAME.crt`` (its certificate then
  the CA's), ``NAME.pem`` (key and chain in one file: ``ssl.keystore.type=PEM``
  ``ssl.keystore.location``), ``NAME.p12`` with its password in ``NAME.p12.password`` (both 0600)
  for ``ssl.keystore.type=PKCS12``, and ``NAME.properties`` with the Kafka client keys that use them.

A broker's certificate names every host it is reached by (DNS names and IP addresses as subject
alternative names, which hostname verification reads) and serves both ends of TLS, since brokers
also connect to each other. A client's names only its principal: ``CN=NAME`` is what mutual TLS
maps to ``User:CN=NAME``. Keys are ECDSA P-256: fast to make and accepted by Java, OpenSSL and
Python alike.

Running again is safe: the CA is reused, an identity whose certificate is still good (signed by
this CA, valid for more than a day, naming every requested host) is kept, anything else is issued
anew. A CA file that cannot be read is an error, never replaced: the certificates it signed
would silently stop being trusted.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.atomic_file import write_atomically

__all__ = [
    "ZOOKEEPER_CLIENT",
    "ZOOKEEPER_SERVER",
    "ZookeeperCertificates",
    "create_zookeeper_certificates",
    "CA_CERT",
    "CA_KEY",
    "DEFAULT_DAYS",
    "DEFAULT_HOSTS",
    "CertificateAuthority",
    "CertsError",
    "Identity",
    "IssuedIdentity",
    "check_identity",
    "create_certificates",
    "load_or_create_ca",
]

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
DEFAULT_DAYS = 365
DEFAULT_HOSTS = ("localhost", "127.0.0.1")
_CA_NAME = "Causeway development CA"
# Issued certificates start a little in the past: a peer whose clock runs slightly behind must
# not see a certificate that is "not yet valid".
_BACKDATE = datetime.timedelta(minutes=5)
# An identity closer than this to its expiry is issued anew rather than kept.
_RENEW_BEFORE = datetime.timedelta(days=1)
_IDENTITY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Labels of letters, digits and inner hyphens (RFC 1123), at most 253 characters in all; a
# leading "*." (a wildcard) is allowed.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"(?=.{{1,253}}$)(\*\.)?{_LABEL}(\.{_LABEL})*")
_SECRET = 0o600
_PUBLIC = 0o644

Role = Literal["broker", "client"]


class CertsError(Exception):
    """Files that cannot be used as they are (a damaged or foreign CA, a bad name or host)."""


@dataclass(frozen=True)
class Identity:
    """Who a certificate is for: a broker reached at `hosts`, or a client (hosts unused)."""

    name: str
    role: Role
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class IssuedIdentity:
    identity: Identity
    certificate: Path
    key: Path
    keystore_pem: Path
    keystore_p12: Path
    properties: Path
    issued: bool  # False: the certificate already there was still good and was kept


@dataclass(frozen=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    created: bool

    def signed(self, certificate: x509.Certificate) -> bool:
        if certificate.issuer != self.certificate.subject:
            return False
        try:
            certificate.verify_directly_issued_by(self.certificate)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _check_file_name(name: str) -> None:
    # Names become file names in the output directory and the CN of a principal: nothing that
    # could leave the directory, hide in it, or need escaping in a distinguished name.
    if not _IDENTITY_NAME.fullmatch(name):
        raise CertsError(f"{name!r} cannot be an identity name: 1 to 64 letters, digits, '-', '_' or '.', "
                         "starting with a letter or digit")
    if name == "ca":
        raise CertsError("'ca' is the CA's own name: choose another identity name")


def check_identity(identity: Identity) -> None:
    """Raise CertsError unless `identity` has a usable name and, for a broker, usable hosts."""
    _check_file_name(identity.name)
    if identity.role == "broker" and not identity.hosts:
        raise CertsError(f"broker {identity.name!r} needs at least one host name or address")
    for host in identity.hosts:
        _general_name(host)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        name = host.encode("idna").decode("ascii")
    except UnicodeError:
        name = ""
    if not _DNS_NAME.fullmatch(name):
        raise CertsError(f"{host!r} is neither an IP address nor a DNS name")
    return x509.DNSName(name)


def _read_pem(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CertsError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def load_or_create_ca(directory: Path, *, days: int = DEFAULT_DAYS) -> CertificateAuthority:
    """The CA in `directory` (``ca.crt`` and ``ca.key``), made there first if neither exists."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not cert_path.exists() and not key_path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(_CA_NAME))
            .issuer_name(_name(_CA_NAME))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False),
                critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        # The key first: a crash between the two leaves a key without a certificate, which the
        # next run refuses loudly, rather than a certificate nobody can sign with.
        write_atomically(key_path, _private_pem(key), mode=_SECRET)
        write_atomically(cert_path, certificate.public_bytes(serialization.Encoding.PEM), mode=_PUBLIC)
        return CertificateAuthority(key, certificate, created=True)
    if not cert_path.exists() or not key_path.exists():
        missing = cert_path if not cert_path.exists() else key_path
        raise CertsError(f"{missing} is missing but its partner is there: restore it, "
                         "or move both away to start a new CA")
    try:
        certificate = x509.load_pem_x509_certificate(_read_pem(cert_path, "CA certificate"))
    except ValueError:
        raise CertsError(f"{cert_path} is not a PEM certificate") from None
    try:
        loaded = serialization.load_pem_private_key(_read_pem(key_path, "CA key"), password=None)
    except (ValueError, TypeError):
        raise CertsError(f"{key_path} is not an unencrypted PEM private key") from None
    if not isinstance(loaded, ec.EllipticCurvePrivateKey) or loaded.public_key() != certificate.public_key():
        raise CertsError(f"{key_path} is not the key of {cert_path}")
    key = loaded
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertsError(f"{cert_path} is not a CA certificate (no basicConstraints CA:true)")
    return CertificateAuthority(key, certificate, created=False)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _issue(ca: CertificateAuthority, identity: Identity,
           days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(identity.name))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        # Never beyond the CA's own end: a chain is only as good as its shortest link.
        .not_valid_after(min(now + datetime.timedelta(days=days), ca.certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_agreement=True, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, encipher_only=False, decipher_only=False),
                       critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if identity.role == "broker":
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(host) for host in identity.hosts]), critical=False)
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return key, builder.sign(ca.key, hashes.SHA256())


def _still_good(ca: CertificateAuthority, identity: Identity, cert_path: Path, key_path: Path) -> bool:
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return False
    if key.public_key() != certificate.public_key() or not ca.signed(certificate):
        return False
    if certificate.subject != _name(identity.name) or certificate.not_valid_after_utc - _now() < _RENEW_BEFORE:
        return False
    if identity.role == "client":
        return True
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return all(_general_name(host) in names for host in identity.hosts)


def _properties(directory: Path, identity: Identity, password: str) -> str:
    # The client side of these files in Kafka's own keys (for `--command-config`, a Java client,
    # or as the model of a librdkafka config); a broker's listener uses the same keys under its
    # `listener.name.<listener>.` prefix.
    d = directory.resolve()
    return "\n".join([
        f"# {identity.role} {identity.name}: written by `causeway certs create`",
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={d / CA_CERT}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={d / (identity.name + '.p12')}",
        f"ssl.keystore.password={password}",
        "# librdkafka (confluent-kafka, kcat) reads PEM files:",
        f"#   ssl.ca.location={d / CA_CERT}",
        f"#   ssl.certificate.location={d / (identity.name + '.crt')}",
        f"#   ssl.key.location={d / (identity.name + '.key')}",
        "",
    ])


def _write_identity(directory: Path, ca: CertificateAuthority, identity: Identity, days: int) -> None:
    key, certificate = _issue(ca, identity, days)
    key_pem = _private_pem(key)
    chain_pem = certificate.public_bytes(serialization.Encoding.PEM) + ca.certificate.public_bytes(
        serialization.Encoding.PEM)
    password = secrets.token_urlsafe(18)
    p12 = pkcs12.serialize_key_and_certificates(
        identity.name.encode(), key, certificate, [ca.certificate],
        serialization.BestAvailableEncryption(password.encode()))
    name = identity.name
    write_atomically(directory / f"{name}.key", key_pem, mode=_SECRET)
    write_atomically(directory / f"{name}.pem", key_pem + chain_pem, mode=_SECRET)
    write_atomically(directory / f"{name}.p12", p12, mode=_SECRET)
    write_atomically(directory / f"{name}.p12.password", password + "\n", mode=_SECRET)
    write_atomically(directory / f"{name}.properties", _properties(directory, identity, password), mode=_SECRET)
    # The certificate last: it is what the next run checks to decide the identity is complete.
    write_atomically(directory / f"{name}.crt", chain_pem, mode=_PUBLIC)


def create_certificates(directory: Path, identities: Sequence[Identity], *, days: int = DEFAULT_DAYS,
                        renew: bool = False) -> tuple[CertificateAuthority, list[IssuedIdentity]]:
    """Make (or reuse) the CA in `directory` and an identity for each of `identities`.

    Blocking (key generation, fsync): from trio, run it in a worker thread.
    """
    if not 1 <= days <= 3650:
        raise CertsError(f"days must be from 1 to 3650, not {days}")
    _check_unique(identity.name for identity in identities)
    for identity in identities:
        check_identity(identity)
    ca = load_or_create_ca(directory, days=days)
    results = []
    for identity in identities:
        cert_path, key_path = directory / f"{identity.name}.crt", directory / f"{identity.name}.key"
        keep = not renew and _still_good(ca, identity, cert_path, key_path)
        if not keep:
            _write_identity(directory, ca, identity, days)
        results.append(IssuedIdentity(
            identity, cert_path, key_path, directory / f"{identity.name}.pem", directory / f"{identity.name}.p12",
            directory / f"{identity.name}.properties", issued=not keep))
    return ca, results


def _check_unique(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CertsError(f"identity {name!r} is named twice")
        seen.add(name)


# ZooKeeper over TLS (`causeway zookeeper --tls`, the launcher): the ensemble's certificate, and
# the one client certificate every broker of the clusters it serves presents. One identity on
# purpose: with zookeeper.set.acl, a znode is writable by the identity that created it only, and
# any broker may have to write what another created (the controller moves).
ZOOKEEPER_SERVER = "zookeeper"
ZOOKEEPER_CLIENT = "kafka-brokers"


@dataclass(frozen=True)
class ZookeeperCertificates:
    """Where the files of `create_zookeeper_certificates` are (PEM, as ZooKeeper and brokers read them)."""

    directory: Path

    @property
    def truststore(self) -> Path:
        """The CA: both sides trust it."""
        return self.directory / CA_CERT

    @property
    def server_keystore(self) -> Path:
        """ZooKeeper's key and chain (ssl.keyStore.location)."""
        return self.directory / f"{ZOOKEEPER_SERVER}.pem"

    @property
    def client_keystore(self) -> Path:
        """The brokers' key and chain (zookeeper.ssl.keystore.location)."""
        return self.directory / f"{ZOOKEEPER_CLIENT}.pem"

    @property
    def client_principal(self) -> str:
        """What ZooKeeper's x509 provider names the brokers' sessions (x509:CN=kafka-brokers)."""
        return f"CN={ZOOKEEPER_CLIENT}"

    def broker_properties(self) -> dict[str, str]:
        """A broker's keys that use these files: TLS to ZooKeeper, and znodes with ACLs
        (zookeeper.connect, which names the TLS client ports, is the caller's)."""
        return {"zookeeper.ssl.client.enable": "true",
                "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
                "zookeeper.ssl.keystore.location": str(self.client_keystore.resolve()),
                "zookeeper.ssl.keystore.type": "PEM",
                "zookeeper.ssl.truststore.location": str(self.truststore.resolve()),
                "zookeeper.ssl.truststore.type": "PEM",
                "zookeeper.set.acl": "true"}


def create_zookeeper_certificates(directory: Path, *, days: int = DEFAULT_DAYS) -> ZookeeperCertificates:
    """Make (or reuse) a CA in `directory`, ZooKeeper's certificate for 127.0.0.1 and localhost,
    and the brokers' client certificate. Blocking: from trio, run it in a worker thread."""
    create_certificates(directory, [Identity(ZOOKEEPER_SERVER, "broker", DEFAULT_HOSTS),
                                    Identity(ZOOKEEPER_CLIENT, "client")], days=days)
    return ZookeeperCertificates(directory)

