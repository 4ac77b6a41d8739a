"""TLS for a broker's SSL listeners: Kafka's ``ssl.*`` configs as an OpenSSL context, the
handshake of an accepted connection, and the principal its client certificate names.

Keystores and truststores are read as Kafka reads them: PEM files (key and chain in one file, or
the chain and key inline in ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``) and
PKCS12. JKS cannot be read without Java; it is refused with the ``keytool`` command that converts
it. Key material read from a PKCS12 store or an inline value reaches OpenSSL through an anonymous
in-memory file (``memfd``), so no decrypted key is ever written to disk.

The principal of a TLS connection is ``User:`` and what the listener's
``ssl.principal.mapping.rules`` make of the client certificate's distinguished name (RFC 2253, as
Java's ``X500Principal.getName()`` writes it: ``CN=alice,O=example``; DEFAULT keeps it whole);
``User:ANONYMOUS`` without a certificate.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from broker.config import SslConfig, StartupError
from security.principal import PrincipalMapper, PrincipalRulesError, parse_principal_rules

__all__ = ["ANONYMOUS", "TlsHandshakeFailed", "TlsListener", "handshake", "load_keystore", "load_truststore",
           "principal_mapper", "principal_of", "server_context", "set_protocols"]

ANONYMOUS = "User:ANONYMOUS"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsHandshakeFailed(Exception):
    """A connection on a TLS listener that did not complete the handshake (a plaintext client,
    an untrusted or missing certificate, a peer that went quiet): the reason, never a secret."""


def server_context(config: SslConfig, listener: str) -> ssl.SSLContext:
    """An OpenSSL server context for listener `listener`, from its ``ssl.*`` configs.

    Raises StartupError naming the key and file that cannot be used (a missing keystore, a wrong
    password, a JKS store, a cipher OpenSSL does not know).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    set_protocols(context, config, f"listener {listener}")
    inline = config.keystore_certificate_chain is not None or config.keystore_key is not None
    if not inline and config.keystore_location is None:
        raise StartupError(f"listener {listener} is SSL and needs a certificate: set ssl.keystore.location "
                           f"(listener.name.{listener.lower()}.ssl.keystore.location for this listener only)")
    load_keystore(context, config, f"listener {listener}")
    context.verify_mode = _CLIENT_AUTH[config.client_auth]
    has_truststore = load_truststore(context, config, f"listener {listener}")
    if config.client_auth != "none" and not has_truststore:
        raise StartupError(f"listener {listener}: ssl.client.auth={config.client_auth} needs a truststore "
                           "(ssl.truststore.location or ssl.truststore.certificates) to check client certificates")
    return context


def set_protocols(context: ssl.SSLContext, config: SslConfig, where: str) -> None:
    """``ssl.enabled.protocols`` and ``ssl.cipher.suites`` on `context` (a server's or a client's).
    Raises StartupError naming `where` when OpenSSL knows none of the ciphers."""
    versions = sorted(_VERSIONS[v] for v in config.enabled_protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    # Python's ssl sets TLS 1.2 suites only; TLS 1.3 suites (named TLS_...) stay OpenSSL's,
    # which are all AEAD and sound.
    tls12 = [name for name in config.cipher_suites if not name.startswith("TLS_")]
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise StartupError(f"{where}: ssl.cipher.suites: OpenSSL knows none of {', '.join(tls12)} "
                               "(use OpenSSL's cipher names)") from None


def _refuse_jks(key: str, where: str, location: str | None) -> StartupError:
    source = location or "store.jks"
    return StartupError(
        f"{where}: {key}=JKS cannot be read here; convert the store to PKCS12 with "
        f"`keytool -importkeystore -srckeystore {source} -destkeystore {Path(source).with_suffix('.p12')} "
        f"-deststoretype PKCS12` and set {key}=PKCS12 (or use PEM files)")


def _read(path: str, key: str, where: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise StartupError(f"{where}: {key}: cannot read {path}: {exc.strerror or exc}") from None


@contextmanager
def _in_memory_file(content: bytes) -> Iterator[str]:
    # OpenSSL reads key material from a path: an anonymous memory file has one (/proc/self/fd/N)
    # and never reaches a disk.
    fd = os.memfd_create("causeway-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, content)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def load_keystore(context: ssl.SSLContext, config: SslConfig, where: str) -> None:
    """Load the key and chain the config names into `context`. Raises StartupError naming `where`."""
    kind = config.keystore_type
    inline = config.keystore_certificate_chain is not None or config.keystore_key is not None
    if inline and config.keystore_location is not None:
        raise StartupError(f"{where}: set ssl.keystore.location or ssl.keystore.certificate.chain "
                           "with ssl.keystore.key, not both")
    if kind == "JKS":
        raise _refuse_jks("ssl.keystore.type", where, config.keystore_location)
    what = config.keystore_location or "ssl.keystore.certificate.chain"
    try:
        if kind == "PKCS12":
            if inline:
                raise StartupError(f"{where}: inline keystore values need ssl.keystore.type=PEM")
            assert config.keystore_location is not None
            pem = _pkcs12_as_pem(_read(config.keystore_location, "ssl.keystore.location", where),
                                 config.keystore_password, "ssl.keystore", where)
            with _in_memory_file(pem) as path:
                context.load_cert_chain(path)
        elif inline:
            if config.keystore_certificate_chain is None or config.keystore_key is None:
                raise StartupError(f"{where}: ssl.keystore.certificate.chain and ssl.keystore.key "
                                   "go together")
            pem = f"{config.keystore_key}\n{config.keystore_certificate_chain}\n".encode()
            with _in_memory_file(pem) as path:
                context.load_cert_chain(path, password=config.key_password)
        else:
            assert config.keystore_location is not None
            _read(config.keystore_location, "ssl.keystore.location", where)  # a clear error when unreadable
            context.load_cert_chain(config.keystore_location, password=config.key_password)
    except ssl.SSLError as exc:
        raise StartupError(f"{where}: the keystore {what} holds no usable private key and "
                           f"certificate chain (or ssl.key.password is wrong): {exc.reason or exc}") from None


def _pkcs12_as_pem(data: bytes, password: str | None, prefix: str, where: str) -> bytes:
    try:
        key, certificate, chain = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        raise StartupError(f"{where}: {prefix}.location is not a PKCS12 store, or "
                           f"{prefix}.password is wrong") from None
    if key is None or certificate is None:
        raise StartupError(f"{where}: the PKCS12 keystore holds no private key with its certificate")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    for cert in [certificate, *chain]:
        pem += cert.public_bytes(serialization.Encoding.PEM)
    return pem


def load_truststore(context: ssl.SSLContext, config: SslConfig, where: str) -> bool:
    """Load the CAs the config names into `context`; False when it names none. Raises StartupError."""
    if config.truststore_location is None and config.truststore_certificates is None:
        return False
    if config.truststore_type == "JKS":
        raise _refuse_jks("ssl.truststore.type", where, config.truststore_location)
    try:
        if config.truststore_certificates is not None:
            if config.truststore_type != "PEM":
                raise StartupError(f"{where}: ssl.truststore.certificates needs ssl.truststore.type=PEM")
            context.load_verify_locations(cadata=config.truststore_certificates)
        elif config.truststore_type == "PKCS12":
            assert config.truststore_location is not None
            data = _read(config.truststore_location, "ssl.truststore.location", where)
            password = config.truststore_password.encode() if config.truststore_password else None
            try:
                store = pkcs12.load_pkcs12(data, password)
            except ValueError:
                raise StartupError(f"{where}: ssl.truststore.location is not a PKCS12 store, or "
                                   "ssl.truststore.password is wrong") from None
            certs = [c.certificate for c in store.additional_certs]
            if store.cert is not None:
                certs.append(store.cert.certificate)
            if not certs:
                raise StartupError(f"{where}: the PKCS12 truststore holds no certificate")
            context.load_verify_locations(
                cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
        else:
            assert config.truststore_location is not None
            _read(config.truststore_location, "ssl.truststore.location", where)
            context.load_verify_locations(cafile=config.truststore_location)
    except ssl.SSLError as exc:
        where = config.truststore_location or "ssl.truststore.certificates"
        raise StartupError(f"{where}: the truststore {where} holds no usable certificate: "
                           f"{exc.reason or exc}") from None
    return True


def principal_mapper(config: SslConfig, listener: str) -> PrincipalMapper:
    """The listener's ``ssl.principal.mapping.rules``. Raises StartupError when they do not parse."""
    try:
        return parse_principal_rules(config.principal_mapping_rules)
    except PrincipalRulesError as exc:
        raise StartupError(f"listener {listener}: ssl.principal.mapping.rules: {exc}") from None


def principal_of(stream: trio.SSLStream[trio.SocketStream], mapper: PrincipalMapper) -> str:
    """``User:`` and the name the rules make of the client certificate's distinguished name
    (RFC 2253, as Java writes it), or User:ANONYMOUS without a certificate.

    Raises TlsHandshakeFailed when no rule applies to the name: Kafka refuses such a client.
    """
    der = stream.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    distinguished_name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    name = mapper.name_of(distinguished_name)
    if name is None:
        raise TlsHandshakeFailed(f"no ssl.principal.mapping.rules rule applies to {distinguished_name[:200]}")
    return f"User:{name}"


# What says a store file changed: its inode, size and modification time (a rename over it, as
# certificate tools and `causeway certs create` write, gives a new inode).
FileStamp = tuple[tuple[str, int, int, int] | None, ...]


@dataclass
class TlsListener:
    """A TLS listener's server context and principal rules, built at start. The context is
    rebuilt when its keystore or truststore files change (``reloaded``), so renewed certificates
    serve new connections without a restart; connections already open keep theirs."""

    config: SslConfig
    listener: str
    context: ssl.SSLContext
    mapper: PrincipalMapper
    stamp: FileStamp

    @classmethod
    def build(cls, config: SslConfig, listener: str) -> TlsListener:
        """Raises StartupError naming the key and file that cannot be used."""
        stamp = store_stamp(config)
        return cls(config, listener, server_context(config, listener), principal_mapper(config, listener), stamp)

    def reloaded(self) -> ssl.SSLContext | None:
        """A new context when a store file changed since the last look and the new files make
        one; None otherwise. Blocking file IO: run it in a worker thread. Raises StartupError
        (naming the key and file) when the changed files cannot be used: the caller keeps
        serving with the old context and says why, as Kafka refuses a keystore update it cannot
        load."""
        stamp = store_stamp(self.config)
        if stamp == self.stamp:
            return None
        self.stamp = stamp  # a file that cannot be used is reported once per change, not per look
        return server_context(self.config, self.listener)

    async def accept(self, stream: trio.SocketStream,
                     timeout_s: float) -> tuple[trio.SSLStream[trio.SocketStream], str]:
        """The handshake of an accepted connection and the principal of its certificate.
        Raises TlsHandshakeFailed; the caller closes `stream` then."""
        tls = await handshake(stream, self.context, timeout_s)
        return tls, principal_of(tls, self.mapper)


def store_stamp(config: SslConfig) -> FileStamp:
    """The stamps of the listener's keystore and truststore files (None for one that is not there)."""
    stamps: list[tuple[str, int, int, int] | None] = []
    for location in (config.keystore_location, config.truststore_location):
        if location is None:
            continue
        try:
            info = os.stat(location)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((location, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamps)


async def handshake(stream: trio.SocketStream, context: ssl.SSLContext,
                    timeout_s: float) -> trio.SSLStream[trio.SocketStream]:
    """The server side of a TLS handshake on an accepted connection, within `timeout_s`.

    Raises TlsHandshakeFailed with the reason; the caller closes `stream` then (after saying
    why: a peer that sees the close may look for the reason at once).
    """
    tls = trio.SSLStream(stream, context, server_side=True)
    reason = "the client went quiet during the TLS handshake"
    with trio.move_on_after(timeout_s):
        try:
            await tls.do_handshake()
            return tls
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLError):
                reason = cause.reason or cause.__class__.__name__
                if reason == "HTTP_REQUEST" or reason == "WRONG_VERSION_NUMBER":
                    reason += " (a plaintext client on a TLS listener?)"
                await _send_alert(tls, stream)
            else:
                reason = "the client closed the connection during the TLS handshake"
    raise TlsHandshakeFailed(reason)


async def _send_alert(tls: trio.SSLStream[trio.SocketStream], stream: trio.SocketStream) -> None:
    """Send the TLS alert OpenSSL wrote when it refused the handshake (unknown CA, no client
    certificate, ...), so the client can say why it was refused, as Kafka's own broker sends it.
    trio marks the stream broken and drops those bytes (they wait in its outgoing memory BIO), so
    they are sent here on the raw stream; best effort, briefly: the connection is closed next."""
    outgoing = getattr(tls, "_outgoing", None)  # trio's private BIO towards the peer
    alert = outgoing.read() if isinstance(outgoing, ssl.MemoryBIO) else b""
    if alert:
        with trio.move_on_after(1), contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(alert)
