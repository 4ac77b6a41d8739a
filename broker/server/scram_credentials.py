"""SCRAM credentials as a ZooKeeper-mode cluster keeps them, in Kafka's place and format: the
``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` keys of ``/config/users/<user>`` (what ``kafka-configs
--entity-type users --add-config 'SCRAM-SHA-512=[password=...]'`` writes), read at each login so
that a credential changed on any broker applies at once on every broker."""

from __future__ import annotations

import logging

from broker import log_limits
from broker.controller.base import ZooKeeperSupport
from broker.protocol.errors import KafkaError
from security.scram import CredentialLookup, ScramCredential

__all__ = ["credentials_in_zookeeper"]

log = logging.getLogger(__name__)
_limited = log_limits.limiter(log)


def credentials_in_zookeeper(zookeeper: ZooKeeperSupport) -> CredentialLookup:
    async def lookup(user: str, mechanism: str) -> ScramCredential | None:
        try:
            text = (await zookeeper.user_configs(user)).get(mechanism)
        except KafkaError as exc:
            # ZooKeeper out of reach: nobody can be checked, so nobody gets in (and says why).
            _limited.warning("scram lookup failed", "cannot read the SCRAM credentials of %r: %s", user[:100], exc)
            return None
        if text is None:
            return None
        try:
            return ScramCredential.from_text(text)
        except ValueError as exc:
            _limited.error("scram credential damaged", "the %s credential of user %r in ZooKeeper cannot be used: %s",
                           mechanism, user[:100], exc)
            return None

    return lookup
