"""SASL on the broker's side: the mechanisms' server halves and the JAAS config they read.

A mechanism server takes the client's tokens one at a time (:meth:`MechanismServer.evaluate`)
and answers each with a challenge, until it is complete and names the principal. Failures raise
:class:`SaslAuthenticationFailed` with the message Kafka sends the client; a message never holds
the secret that was tried.

PLAIN (RFC 4616) checks passwords against the ``user_<name>="<password>"`` options of the
listener's ``PlainLoginModule`` JAAS config, as Kafka's PlainServerCallbackHandler does. SCRAM
(``security/scram.py``) checks the credentials a ZooKeeper-mode cluster keeps in
``/config/users``. GSSAPI and OAUTHBEARER are not served.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "PLAIN",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfig",
    "JaasError",
    "MechanismServer",
    "PlainServer",
    "SaslAuthenticationFailed",
    "login_module",
    "mechanism_jaas",
    "parse_jaas_config",
]

PLAIN = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")


class SaslAuthenticationFailed(Exception):
    """The client's credentials were refused; the message is what the client is told."""


class JaasError(ValueError):
    """A JAAS config that does not parse; the message says where."""


@dataclass(frozen=True)
class JaasConfig:
    """One login module entry: ``<module class> <flag> key="value" ...;``."""

    login_module: str
    flag: str
    options: Mapping[str, str]


# A token of a JAAS entry: a quoted string (with backslash escapes), the terminating semicolon, an
# equals sign, or a bare word.
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(;)|(=)|([^\s=;"]+))', re.DOTALL)


def parse_jaas_config(text: str) -> JaasConfig:
    """Parse one JAAS login module entry as Kafka's ``sasl.jaas.config`` holds it.

    Raises JaasError naming what is wrong (never quoting an option's value: it may be a password).
    """
    tokens: list[tuple[str, str]] = []  # (kind, text)
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasError(f"unexpected character at position {position}")
        quoted, semicolon, equals, word = match.groups()
        if quoted is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif semicolon:
            tokens.append((";", ";"))
        elif equals:
            tokens.append(("=", "="))
        else:
            tokens.append(("word", word))
        position = match.end()
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasError("expected '<LoginModule class> <flag> key=\"value\" ... ;'")
    module, flag = tokens[0][1], tokens[1][1]
    if flag not in _FLAGS:
        raise JaasError(f"the login module's flag must be one of {', '.join(_FLAGS)}, not {flag!r}")
    if tokens[-1][0] != ";":
        raise JaasError("the entry must end with ';'")
    body = tokens[2:-1]
    if len(body) % 3:
        raise JaasError("options must be key=value pairs")
    options: dict[str, str] = {}
    for index in range(0, len(body), 3):
        (key_kind, key), (eq_kind, _), (value_kind, value) = body[index:index + 3]
        if key_kind != "word" or eq_kind != "=" or value_kind not in ("word", "value"):
            raise JaasError(f"option {index // 3 + 1} is not key=value")
        if key in options:
            raise JaasError(f"option {key} is given twice")
        options[key] = value
    return JaasConfig(module, flag, options)


def login_module(mechanism: str) -> str:
    """The JAAS login module Kafka's config names for `mechanism` (PLAIN, or a SCRAM one)."""
    return PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE


def mechanism_jaas(mechanism: str, text: str) -> JaasConfig:
    """`text` parsed, with the login module `mechanism` takes. Raises JaasError saying what is wrong."""
    jaas = parse_jaas_config(text)
    if jaas.login_module != login_module(mechanism):
        raise JaasError(f"{mechanism} takes {login_module(mechanism)}, not {jaas.login_module}")
    return jaas


class MechanismServer(Protocol):
    """The server side of one SASL mechanism for one authentication attempt."""

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once authentication is complete, else None."""

    async def evaluate(self, token: bytes) -> bytes:
        """The challenge answering the client's `token`. Raises SaslAuthenticationFailed."""


class PlainServer:
    """PLAIN: a single message ``[authzid] NUL authcid NUL password`` (RFC 4616)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.principal: str | None = None

    def fresh(self) -> PlainServer:
        """A server for one more connection, with the same users."""
        return PlainServer(self.users)

    @classmethod
    def from_jaas(cls, jaas: JaasConfig) -> PlainServer:
        return cls({key[len("user_"):]: value for key, value in jaas.options.items() if key.startswith("user_")})

    async def evaluate(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise SaslAuthenticationFailed("Authentication failed: PLAIN takes a single message")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(username)
        # compare_digest on bytes of any length: the time taken says nothing of the password.
        if expected is None or not hmac.compare_digest(password.encode(), expected.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.principal = f"User:{username}"
        return b""
