"""SCRAM credentials as Kafka keeps them: the ``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` configs of a
user, in ``/config/users/<user>`` on a ZooKeeper-mode cluster (what ``kafka-configs --entity-type
users --add-config 'SCRAM-SHA-512=[password=...]'`` writes) or in a standalone broker's users
file (``broker/server/user_configs.py``), read at each login so that a credential changed on any
broker applies at once on every broker."""

from __future__ import annotations

import logging

from broker import log_limits
from broker.protocol.errors import KafkaError
from broker.server.user_configs import UserConfigs
from security.scram import CredentialLookup, ScramCredential

__all__ = ["scram_credentials"]

log = logging.getLogger(__name__)
_limited = log_limits.limiter(log)


def scram_credentials(users: UserConfigs) -> CredentialLookup:
    async def lookup(user: str, mechanism: str) -> ScramCredential | None:
        try:
            text = (await users.user_configs(user)).get(mechanism)
        except KafkaError as exc:
            # The store out of reach (ZooKeeper away): nobody can be checked, so nobody gets in (and says why).
            _limited.warning("scram lookup failed", "cannot read the SCRAM credentials of %r: %s", user[:100], exc)
            return None
        if text is None:
            return None
        try:
            return ScramCredential.from_text(text)
        except ValueError as exc:
            _limited.error("scram credential damaged", "the stored %s credential of user %r cannot be used: %s",
                           mechanism, user[:100], exc)
            return None

    return lookup
