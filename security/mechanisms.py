"""The SASL mechanisms a listener serves: for each, what makes its server half for one
connection, checked against the listener's JAAS config when the broker starts."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from broker.config import SaslConfig, StartupError
from security.sasl import PLAIN, JaasError, MechanismServer, PlainServer, login_module, mechanism_jaas
from security.scram import MECHANISMS, CredentialLookup, ScramServer

__all__ = ["SERVED_MECHANISMS", "mechanism_servers"]

SERVED_MECHANISMS = (PLAIN, *MECHANISMS)


def mechanism_servers(config: SaslConfig,
                      scram_credentials: CredentialLookup | None) -> dict[str, Callable[[], MechanismServer]]:
    """For each mechanism a SASL listener enables, what makes its server for one connection.
    `scram_credentials` finds a user's SCRAM credential (None: this broker keeps none).

    Raises StartupError naming the key: a mechanism not served here, a missing or unreadable
    JAAS config, a login module that does not fit the mechanism.
    """
    factories: dict[str, Callable[[], MechanismServer]] = {}
    prefix = f"listener.name.{config.listener.lower()}."
    for mechanism in config.mechanisms:
        if mechanism not in SERVED_MECHANISMS:
            raise StartupError(f"sasl.enabled.mechanisms: listener {config.listener} enables {mechanism}, which "
                               f"is not served here (served: {', '.join(SERVED_MECHANISMS)})")
        key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        text = config.jaas.get(mechanism)
        if text is None:
            example = ' user_alice="alice-secret"' if mechanism == PLAIN else ""
            raise StartupError(f"{key}: listener {config.listener} enables {mechanism} and needs its JAAS config, "
                               f"e.g. {login_module(mechanism)} required{example};")
        try:
            jaas = mechanism_jaas(mechanism, text)
        except JaasError as exc:
            raise StartupError(f"{key}: {exc}") from None
        if mechanism == PLAIN:
            plain = PlainServer.from_jaas(jaas)
            if not plain.users:
                raise StartupError(f'{key}: no user_<name>="<password>" option: nobody could authenticate')
            factories[mechanism] = plain.fresh
            continue
        if scram_credentials is None:
            raise StartupError(f"sasl.enabled.mechanisms: listener {config.listener} enables {mechanism}, whose "
                               "credentials this broker does not keep")
        factories[mechanism] = partial(ScramServer, mechanism, scram_credentials)
    return factories
