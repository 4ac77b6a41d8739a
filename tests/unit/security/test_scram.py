"""security.scram: Kafka's credential text, and the server half of an exchange driven by scramp's
client (the same RFC from the other side)."""

from __future__ import annotations

import hashlib

import pytest
import trio
from scramp import ScramClient

from security.sasl import SaslAuthenticationFailed
from security.scram import ScramCredential, ScramServer


def test_the_credential_text_round_trips_and_is_checked() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "secret", iterations=8192)
    assert ScramCredential.from_text(credential.to_text()) == credential
    for bad in ["", "salt=AA==", credential.to_text().replace("iterations=8192", "iterations=1000000"),
                credential.to_text().replace("salt=", "salt=!!"), credential.to_text() + ",salt=AA=="]:
        with pytest.raises(ValueError):
            ScramCredential.from_text(bad)


async def _exchange(mechanism: str, credential: ScramCredential | None, password: str) -> str | None:
    async def lookup(user: str, asked: str) -> ScramCredential | None:
        assert (user, asked) == ("al,ice", mechanism)
        return credential

    client = ScramClient([mechanism], "al,ice", password)
    server = ScramServer(mechanism, lookup)
    first = await server.evaluate(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = await server.evaluate(client.get_client_final().encode())
    client.set_server_final(final.decode())  # the client checks the server's signature too
    return server.principal


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_right_password_authenticates(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "pw")
    assert trio.run(_exchange, mechanism, credential, "pw") == "User:al,ice"


@pytest.mark.parametrize("credential", [ScramCredential.from_password("SCRAM-SHA-256", "pw"), None])
def test_a_wrong_password_or_unknown_user_fails_with_kafkas_message(credential: ScramCredential | None) -> None:
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        trio.run(_exchange, "SCRAM-SHA-256", credential, "guess")


@pytest.mark.parametrize("token", [b"", b"\xff\xfe", b"n,,r=nonce", b"n,,n=bob", b"x" * 1000])
def test_a_malformed_first_message_fails(token: bytes) -> None:
    async def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return ScramCredential.from_password(mechanism, "pw")

    with pytest.raises(SaslAuthenticationFailed):
        trio.run(ScramServer("SCRAM-SHA-256", lookup).evaluate, token)


def test_the_salted_password_a_client_sends_gives_the_same_keys() -> None:
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    from_salted = ScramCredential.from_salted_password("SCRAM-SHA-512", salt, salted, 4096)
    assert trio.run(_exchange, "SCRAM-SHA-512", from_salted, "pw") == "User:al,ice"
