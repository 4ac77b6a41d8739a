"""Causeway's own client side of TLS and SASL: Kafka's client properties (what a Java client's
``client.properties`` or a tool's ``--command-config`` file holds) as a TLS context and a SASL
login, for the mirror, the tools and the pipeline.

The keys are Kafka's: ``security.protocol``; ``ssl.truststore.*``, ``ssl.keystore.*``,
``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the
broker's name against its certificate); ``sasl.mechanism`` and ``sasl.jaas.config`` with
``PlainLoginModule`` or ``ScramLoginModule`` and its ``username``/``password`` options. Keys that
only tune Java (``ssl.keymanager.algorithm``, ...) are accepted without effect; any other key of
these families is an error that names it, so a typo never silently means "no security".

A broker's own connections to its peers (followers, the controller) are built here too, from its
inter-broker listener's configs (:func:`inter_broker_security`).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramClient, ScramException

from broker.config import IGNORED_SSL_KEYS, SECURITY_PROTOCOLS, BrokerConfig, ConfigError, SslConfig, StartupError
from broker.protocol.errors import ErrorCode, KafkaError
from security.sasl import PLAIN, JaasError, login_module, mechanism_jaas
from security.scram import MECHANISMS
from security.tls import load_keystore, load_truststore, set_protocols

__all__ = ["PROTOCOLS", "ClientSecurity", "SaslLogin", "client_security", "inter_broker_security",
           "zookeeper_client_context"]

PROTOCOLS = SECURITY_PROTOCOLS
_SASL_MECHANISMS = (PLAIN, *MECHANISMS)


@dataclass(frozen=True)
class SaslLogin:
    """One user's SASL credentials for one mechanism; :meth:`exchange` drives one login."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def exchange(self) -> SaslExchange:
        return SaslExchange(self)


class SaslExchange:
    """The client half of one login: :meth:`first`, then :meth:`respond` to each challenge until
    :meth:`done`."""

    def __init__(self, login: SaslLogin) -> None:
        self._login = login
        self._scram: Any = None  # scramp's ScramClient (untyped)
        self._step = 0

    def first(self) -> bytes:
        login = self._login
        if login.mechanism == PLAIN:
            self._step = 2
            return b"\x00" + login.username.encode() + b"\x00" + login.password.encode()
        client = ScramClient([login.mechanism], login.username, login.password)
        self._scram = client
        self._step = 1
        return str(client.get_client_first()).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        """The answer to the broker's `challenge`; None when nothing more is to be sent."""
        client = self._scram
        try:
            if self._step == 1:
                client.set_server_first(challenge.decode())
                self._step = 2
                return str(client.get_client_final()).encode()
            if self._step == 2 and client is not None:
                client.set_server_final(challenge.decode())
            self._step = 3
            return None
        except (ScramException, UnicodeDecodeError) as exc:
            # Not the broker we meant (or one that does not know the password): never go on.
            raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                             f"the broker's SCRAM answer does not verify: {exc}") from None

    @property
    def done(self) -> bool:
        return self._step == 3


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None  # its check_hostname says whether the broker's name is checked
    sasl: SaslLogin | None = None


_SSL_CLIENT_KEYS = {field.alias for field in SslConfig.model_fields.values() if field.alias} - {
    "ssl.client.auth", "ssl.principal.mapping.rules"}


def client_security(props: Mapping[str, str], where: str = "client config") -> ClientSecurity:
    """Kafka's client security keys in `props` (others are left to their users). Raises
    ConfigError naming `where` and the key: an unknown protocol or mechanism, an unknown ``ssl.`` or
    ``sasl.`` key, a store that cannot be read, SASL without credentials."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{where}: security.protocol: '{protocol}' is not one of {', '.join(PROTOCOLS)}")
    for key in props:
        if key.startswith("ssl.") and key not in _SSL_CLIENT_KEYS and key not in IGNORED_SSL_KEYS:
            raise ConfigError(f"{where}: {key}: unknown SSL client config")
        if key.startswith("sasl.") and key not in ("sasl.mechanism", "sasl.jaas.config"):
            raise ConfigError(f"{where}: {key}: unknown SASL client config (use sasl.mechanism and sasl.jaas.config)")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            ssl_config = SslConfig.from_properties({k: v for k, v in props.items() if k.startswith("ssl.")})
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        context = _client_context(ssl_config, where)
    sasl = _sasl_login(props, where) if protocol.startswith("SASL_") else None
    return ClientSecurity(protocol, context, sasl)


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """How this broker connects to its peers' inter-broker listener, built as Kafka builds a
    broker's client side: the protocol of that listener; TLS from the same listener's ``ssl.*``
    configs (its keystore is this broker's client certificate for mutual TLS, its truststore checks
    the peer, ssl.endpoint.identification.algorithm applies); for SASL, the login module options
    ``username`` and ``password`` of the listener's JAAS config for
    sasl.mechanism.inter.broker.protocol (BrokerConfig checked the mechanism).

    Raises ConfigError naming the key: a store that cannot be read, a JAAS config that is missing,
    does not parse or has no username and password."""
    listener = config.inter_broker_listener
    protocol = config.inter_broker_protocol
    where = f"inter-broker listener {listener}"
    ssl_config = config.ssl_for(listener)
    context = _client_context(ssl_config, where) if ssl_config is not None else None
    sasl_config = config.sasl_for(listener)
    login = None
    if sasl_config is not None:
        mechanism = config.sasl_mechanism_inter_broker_protocol
        key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        login = _login(mechanism, sasl_config.jaas.get(mechanism), f"{key}: the broker's own login to its peers")
    return ClientSecurity(protocol, context, login)


def zookeeper_client_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context of this broker's ZooKeeper client, from Kafka's ``zookeeper.ssl.*`` keys
    (None: zookeeper.ssl.client.enable is off). Its keystore is the certificate ZooKeeper's x509
    provider authenticates: the identity that owns the znodes when zookeeper.set.acl is on.
    Raises ConfigError naming the store that cannot be read."""
    ssl_config = config.zookeeper_ssl
    return None if ssl_config is None else _client_context(ssl_config, "ZooKeeper client (zookeeper.ssl.*)")


def _client_context(config: SslConfig, where: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the broker's certificate
    # The broker's name against its certificate, as Kafka's default https; "" turns it off.
    context.check_hostname = config.endpoint_identification_algorithm == "https"
    try:
        set_protocols(context, config, where)
        if not load_truststore(context, config, where):
            context.load_default_certs()  # no truststore: the system's CAs, as Java's default
        if config.keystore_location is not None or config.keystore_key is not None:
            load_keystore(context, config, where)  # mutual TLS: the client's own certificate
    except StartupError as exc:
        raise ConfigError(str(exc)) from None
    return context


def _sasl_login(props: Mapping[str, str], where: str) -> SaslLogin:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip()
    if mechanism not in _SASL_MECHANISMS:
        raise ConfigError(f"{where}: sasl.mechanism: {mechanism} is not one Causeway's client speaks "
                          f"({', '.join(_SASL_MECHANISMS)})")
    return _login(mechanism, props.get("sasl.jaas.config"), f"{where}: sasl.jaas.config")


def _login(mechanism: str, text: str | None, where: str) -> SaslLogin:
    """The ``username`` and ``password`` options of JAAS config `text` for `mechanism`; `where`
    (the key) starts each error."""
    if text is None:
        raise ConfigError(f'{where}: {mechanism} needs {login_module(mechanism)} required '
                          'username="..." password="...";')
    try:
        jaas = mechanism_jaas(mechanism, text)
    except JaasError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    username, password = jaas.options.get("username"), jaas.options.get("password")
    if not username or password is None:
        raise ConfigError(f"{where}: needs username and password options")
    return SaslLogin(mechanism, username, password)
