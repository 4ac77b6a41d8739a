"""Dynamic broker configs: which keys may change at run time, and checking a change.

As Kafka's DynamicBrokerConfig: a broker config is changed for one broker (resource name = its
id, DYNAMIC_BROKER_CONFIG) or for every broker (the empty name, DYNAMIC_DEFAULT_BROKER_CONFIG).
Only the keys Kafka lists as dynamically updatable may change; any other broker key is refused
with Kafka's "Cannot update these configs dynamically: Set(...)". ZooKeeper mode keeps them in
``/config/brokers/<id>`` and ``/config/brokers/<default>`` (broker.controller.zk.metadata); a
standalone broker has nowhere to share them and keeps refusing changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.config import BROKER_KEYS, DYNAMIC_BROKER_KEYS, IGNORED_DYNAMIC_KEYS, BrokerConfig, ConfigError
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import broker_log_config

__all__ = ["LIST_BROKER_KEYS", "check_broker_update"]

# Older names Kafka also updates dynamically; Causeway takes only the precise key at run time.
_PRECISE_KEY = {"log.retention.hours": "log.retention.ms", "log.retention.minutes": "log.retention.ms",
                "log.roll.hours": "log.roll.ms"}
# Broker keys of type LIST (APPEND/SUBTRACT apply).
LIST_BROKER_KEYS = frozenset({"log.cleanup.policy"})


def _resource(name: str) -> str:
    return f"ConfigResource(type=BROKER, name='{name}')"


def check_broker_update(resource_name: str, configs: Mapping[str, str | None], current: BrokerConfig,
                        other_layer: Mapping[str, str]) -> dict[str, str]:
    """Check the new dynamic configs of a BROKER resource (``""``: the cluster-wide default) as
    Kafka does; returns them without null values. ``other_layer`` is the dynamic layer that stays
    as it is in ZooKeeper now (this broker's own for a default change, the default for a
    broker's own change): the result is parsed as this broker would run with both.

    Raises KafkaError: INVALID_REQUEST for a key that cannot change at run time and for a value
    that does not parse (Kafka's "Invalid config value for resource ..."), INVALID_CONFIG for a
    key Kafka does not know.
    """
    out: dict[str, str] = {}
    static_only: list[str] = []
    for name, value in configs.items():
        if name in _PRECISE_KEY:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{name}: Causeway updates this dynamically by its precise key {_PRECISE_KEY[name]}")
        if name in BROKER_KEYS and name not in DYNAMIC_BROKER_KEYS:
            static_only.append(name)
            continue
        if name not in DYNAMIC_BROKER_KEYS and name not in IGNORED_DYNAMIC_KEYS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}")
        if value is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid config value for resource {_resource(resource_name)}: "
                             f"Null value not supported for {name}")
        out[name] = value
    if static_only:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid config value for resource {_resource(resource_name)}: Cannot update these "
                         f"configs dynamically: Set({', '.join(sorted(static_only))})")
    # Parse the result as the broker would run with it: every value checked once, by the same
    # parsers as server.properties (and the topic defaults by the log config's).
    layers = (out, other_layer) if resource_name == "" else (other_layer, out)
    try:
        broker_log_config(current.with_dynamic(*layers))
    except (ConfigError, KafkaError) as exc:
        text = exc.message if isinstance(exc, KafkaError) else str(exc)
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid config value for resource {_resource(resource_name)}: {text}") from None
    return out
