"""Group configs (KIP-848, ConfigResource type GROUP = 32): Kafka 4.x's per-group overrides.

Kafka keeps a group's dynamic configs in its metadata log, apart from the group's state: they can
be set before the group exists and outlive its members. Here they live in ``group-configs.json``
beside the controller's metadata in the first log dir, written atomically.

Every key belongs to a rebalance protocol Causeway does not run yet (KIP-848 consumer groups, share
groups, Streams groups); a classic group, the only kind Causeway serves, ignores them on Kafka too.
So they are stored, validated and described exactly as Kafka 4.3 does, and take effect when those
protocols land. Their defaults are Kafka's broker defaults (``group.consumer.session.timeout.ms``
...), which Causeway does not take as broker keys yet: DescribeConfigs names them as synonyms.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from broker.atomic_file import write_atomically
from broker.config import BrokerConfig
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = ["GROUP_CONFIGS", "GroupConfigKey", "GroupConfigStore", "store_for", "validate_group_configs"]

FILE_NAME = "group-configs.json"
# Bounds on what a damaged or hostile file can make the broker build.
_MAX_GROUPS = 1_000_000
_MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    name: str
    broker_key: str  # the broker config that supplies the default, as DescribeConfigs names it
    default: str
    kind: str  # "int", "bool", "isolation", "offset_reset"
    low: tuple[int, str] | None = None  # (bound, the broker key that sets it)
    high: tuple[int, str] | None = None


def _int_key(name: str, default: int, low: tuple[int, str] | None = None,
             high: tuple[int, str] | None = None) -> GroupConfigKey:
    return GroupConfigKey(name, f"group.{name}", str(default), "int", low, high)


def _bounded(name: str, default: int, low: int, high: int) -> GroupConfigKey:
    """A key Kafka bounds by group.<name with min/max>, e.g. group.consumer.min.session.timeout.ms."""
    protocol, _, rest = name.partition(".")
    return _int_key(name, default, (low, f"group.{protocol}.min.{rest}"), (high, f"group.{protocol}.max.{rest}"))


# Kafka 4.3's group configs (GroupConfig), their defaults and the broker keys bounding them.
GROUP_CONFIGS: dict[str, GroupConfigKey] = {k.name: k for k in (
    _bounded("consumer.assignment.interval.ms", 1000, 0, 15000),
    _bounded("consumer.heartbeat.interval.ms", 5000, 5000, 15000),
    _bounded("consumer.session.timeout.ms", 45000, 45000, 60000),
    _bounded("share.assignment.interval.ms", 1000, 0, 15000),
    GroupConfigKey("share.auto.offset.reset", "share.auto.offset.reset", "latest", "offset_reset"),
    _bounded("share.delivery.count.limit", 5, 2, 10),
    _bounded("share.heartbeat.interval.ms", 5000, 5000, 15000),
    GroupConfigKey("share.isolation.level", "share.isolation.level", "read_uncommitted", "isolation"),
    _bounded("share.partition.max.record.locks", 2000, 100, 4000),
    _bounded("share.record.lock.duration.ms", 30000, 15000, 60000),
    GroupConfigKey("share.renew.acknowledge.enable", "share.renew.acknowledge.enable", "true", "bool"),
    _bounded("share.session.timeout.ms", 45000, 45000, 60000),
    _bounded("streams.assignment.interval.ms", 1000, 0, 15000),
    _bounded("streams.heartbeat.interval.ms", 5000, 5000, 15000),
    _int_key("streams.initial.rebalance.delay.ms", 3000, (0, "")),
    _int_key("streams.num.standby.replicas", 0, (0, ""), (2, "group.streams.max.standby.replicas")),
    _bounded("streams.session.timeout.ms", 45000, 45000, 60000),
)}

_INT32_MAX = 2**31 - 1
_DURATION = re.compile(r"^-?P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$", re.IGNORECASE)


def _check_value(key: GroupConfigKey, value: str) -> str | None:
    """Why ``value`` is not valid for ``key`` (Kafka's wording), or None."""
    text = value.strip()
    if key.kind == "int":
        try:
            number = int(text)
        except ValueError:
            return f"Invalid value {value} for configuration {key.name}: Not a number of type INT"
        if not -_INT32_MAX - 1 <= number <= _INT32_MAX:
            return f"Invalid value {value} for configuration {key.name}: Not a number of type INT"
        if key.low is not None and number < key.low[0]:
            if not key.low[1]:  # a fixed floor: ConfigDef's own wording
                return f"Invalid value {value} for configuration {key.name}: Value must be at least {key.low[0]}"
            return f"{key.name} must be greater than or equal to {key.low[1]}"
        if key.high is not None and number > key.high[0]:
            return f"{key.name} must be less than or equal to {key.high[1]}"
        return None
    if key.kind == "bool":
        if text.lower() not in ("true", "false"):
            return f"Invalid value {value} for configuration {key.name}: Expected value to be either true or false"
        return None
    if key.kind == "isolation":
        if text not in ("read_committed", "read_uncommitted"):
            return (f"Invalid value {value} for configuration {key.name}: "
                    "String must be one of: read_committed, read_uncommitted")
        return None
    # share.auto.offset.reset: latest, earliest, or by_duration:<ISO-8601 duration, not negative>
    if text in ("latest", "earliest"):
        return None
    if text.startswith("by_duration:") and _DURATION.match(text[len("by_duration:"):]) \
            and not text[len("by_duration:"):].startswith("-"):
        return None
    return (f"Invalid value {value} for configuration {key.name}: "
            "Invalid value for share.auto.offset.reset; must be latest, earliest or by_duration:<ISO8601 duration>")


def validate_group_configs(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Check a group's complete set of overrides; returns them stripped.

    Raises KafkaError(INVALID_CONFIG) naming an unknown key or a bad value, in the words of Kafka's
    GroupConfig.validate.
    """
    out: dict[str, str] = {}
    for name, value in overrides.items():
        key = GROUP_CONFIGS.get(name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        if value is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for group config {name}")
        problem = _check_value(key, value)
        if problem is not None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        out[name] = value.strip()
    # Kafka also requires each heartbeat interval below its session timeout; with Kafka's default
    # bounds, which are Causeway's fixed ones (at most 15 s against at least 45 s), it always is.
    return out


class GroupConfigStore:
    """Every group's overrides, loaded once, each change written through before it is visible."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._groups: dict[str, dict[str, str]] | None = None
        self._lock = trio.Lock()

    async def _loaded(self) -> dict[str, dict[str, str]]:
        if self._groups is None:
            self._groups = await trio.to_thread.run_sync(_read, self.path)
        return self._groups

    async def get(self, group: str) -> dict[str, str]:
        async with self._lock:
            return dict((await self._loaded()).get(group, {}))

    async def set(self, group: str, overrides: Mapping[str, str]) -> None:
        """Replace the group's overrides; raises KafkaError(KAFKA_STORAGE_ERROR) when the file
        cannot be written (nothing changes then)."""
        async with self._lock:
            groups = dict(await self._loaded())
            if overrides:
                groups[group] = dict(overrides)
            else:
                groups.pop(group, None)
            text = json.dumps({"version": 1, "groups": groups}, sort_keys=True, indent=1)
            try:
                await trio.to_thread.run_sync(write_atomically, self.path, text)
            except OSError as exc:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"cannot write {self.path}: {exc.strerror or exc}") from exc
            self._groups = groups


def _read(path: Path) -> dict[str, dict[str, str]]:
    """The stored overrides; {} when there is no file. A damaged file is refused with a message
    naming it (KAFKA_STORAGE_ERROR): group configs are not silently dropped."""
    def bad(why: str) -> KafkaError:
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                          f"{path} is damaged ({why}): repair it, or move it away to forget every group config")

    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise bad(f"larger than {_MAX_FILE_BYTES} bytes")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(str(exc)) from None
    groups = doc.get("groups") if isinstance(doc, dict) and doc.get("version") == 1 else None
    if not isinstance(groups, dict) or len(groups) > _MAX_GROUPS:
        raise bad("expected {\"version\": 1, \"groups\": {group: {key: value}}}")
    out: dict[str, dict[str, str]] = {}
    for group, configs in groups.items():
        if not isinstance(configs, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k in GROUP_CONFIGS for k, v in configs.items()):
            raise bad(f"group {group!r} does not map known config names to strings")
        out[group] = dict(configs)
    return out


# One store per running broker, keyed by its controller (and gone with it): a broker restarted in
# the same process reads the file afresh.
_STORES: weakref.WeakKeyDictionary[object, GroupConfigStore] = weakref.WeakKeyDictionary()


def store_for(controller: object, config: BrokerConfig) -> GroupConfigStore:
    """The group-config store of the broker with this controller, opened on first use."""
    store = _STORES.get(controller)
    if store is None:
        store = _STORES[controller] = GroupConfigStore(config.log_dirs[0] / FILE_NAME)
    return store
