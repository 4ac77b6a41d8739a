"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials as Kafka stores them, and the
mechanism's server half. The exchange's crypto is the ``scramp`` library's.

A credential is what Kafka keeps per user and mechanism in ``/config/users/<user>``:
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``. The password itself is
never stored: a client that sets it (AlterUserScramCredentials, as ``kafka-configs
--add-config 'SCRAM-SHA-512=[password=...]'`` sends it) sends the salted password, from which
the stored and server keys are derived here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from scramp import ScramException, ScramMechanism

from security.sasl import SaslAuthenticationFailed

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "CredentialLookup",
    "ScramCredential",
    "ScramServer",
    "salt_password",
]

# Kafka's ScramMechanism: the name, its number in the Alter/DescribeUserScramCredentials APIs, its hash.
MECHANISMS: dict[str, tuple[int, str]] = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
# Kafka's bounds on iterations: fewer is weak, more makes each login a CPU cost an attacker chooses.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode("ascii")

        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Kafka's text form. Raises ValueError saying what is wrong (never quoting a key)."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, equals, value = part.partition("=")
            if not equals or name in fields:
                raise ValueError("not salt=...,stored_key=...,server_key=...,iterations=...")
            fields[name] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("needs exactly salt, stored_key, server_key and iterations")
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True)
                                    for k in ("salt", "stored_key", "server_key"))
            iterations = int(fields["iterations"])
        except (binascii.Error, ValueError):
            raise ValueError("salt, stored_key and server_key must be base64, iterations a number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
        return cls(salt, stored, server, iterations)

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes,
                             iterations: int) -> ScramCredential:
        digest = MECHANISMS[mechanism][1]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        server_key = hmac.digest(salted_password, b"Server Key", digest)
        return cls(salt, hashlib.new(digest, client_key).digest(), server_key, iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
        return cls.from_salted_password(mechanism, *salt_password(mechanism, password, iterations), iterations)


def salt_password(mechanism: str, password: str, iterations: int) -> tuple[bytes, bytes]:
    """A fresh salt and the password salted with it (RFC 5802's Hi(); Kafka's ScramFormatter
    takes the password's UTF-8 bytes as they are)."""
    salt = os.urandom(32)
    return salt, hashlib.pbkdf2_hmac(MECHANISMS[mechanism][1], password.encode("utf-8"), salt, iterations)


# (user name, mechanism) -> the user's credential for it, or None: where credentials live.
CredentialLookup = Callable[[str, str], Awaitable[ScramCredential | None]]


def _username(client_first: bytes) -> str:
    # client-first-message: gs2-header ("n,," or "y,,"; "p=..." is channel binding, refused by
    # scramp) then "n=<saslname>,r=<nonce>[,extensions]"; a saslname escapes "," and "=".
    try:
        text = client_first.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("Invalid SCRAM client first message: not UTF-8") from None
    parts = text.split(",")
    if len(parts) < 4 or not parts[2].startswith("n="):
        raise SaslAuthenticationFailed("Invalid SCRAM client first message")
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._server: Any = None  # scramp's ScramServer (untyped)
        self._user = ""
        self.principal: str | None = None

    def _failed(self) -> SaslAuthenticationFailed:
        return SaslAuthenticationFailed(_FAILED.format(self._mechanism))

    async def evaluate(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise SaslAuthenticationFailed("Authentication failed: the SCRAM exchange is over")
        if self._server is None:
            self._user = _username(token)
            credential = await self._lookup(self._user, self._mechanism)
            if credential is None:
                raise self._failed()

            def auth_info(_username: str) -> tuple[bytes, bytes, bytes, int]:
                return credential.salt, credential.stored_key, credential.server_key, credential.iterations

            server = ScramMechanism(self._mechanism).make_server(auth_info)
            try:
                server.set_client_first(token.decode("utf-8"))
                first: str = server.get_server_first()
            except ScramException:
                raise SaslAuthenticationFailed("Invalid SCRAM client first message") from None
            self._server = server
            return first.encode("utf-8")
        server = self._server
        try:
            server.set_client_final(token.decode("utf-8"))
            final: str = server.get_server_final()
        except (ScramException, UnicodeDecodeError):
            raise self._failed() from None
        self.principal = f"User:{self._user}"
        return final.encode("utf-8")
