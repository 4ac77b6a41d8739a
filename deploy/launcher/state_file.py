"""The launcher's state file (`<state dir>/state.json`): what `causeway up` started, read back by
`causeway status` and `causeway down` (deploy/launcher/control.py).

One model for the writer and the reader. The reader may be another version of causeway than the
launcher that wrote the file, so fields it does not know are ignored; the fields it relies on are
checked strictly (no "123" taken for a pid), and a problem is named by its field path
(`clusters.east.brokers[0].pid: ...`) so an operator can find it in the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["MAX_STATE_BYTES", "STATE_FORMAT", "BrokerRecord", "ClusterRecord", "LaunchStateFile", "MirrorRecord",
           "ProcessRecord", "PrometheusRecord", "StateFileError", "WanRecord", "ZooKeeperRecord", "parse_state"]

STATE_FORMAT = 2  # 2: every process with its start time and command line
#: A state file is about a KB per cluster; anything far larger is not one (and is not read whole).
MAX_STATE_BYTES = 4 * 1024 * 1024


class StateFileError(Exception):
    """The state file exists but cannot be used: it names the file and what to do."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class ProcessRecord(_Record):
    """A process the launcher started (or the launcher itself): enough to prove it is that very
    process (deploy/process_identity.py), never just a pid."""

    pid: int | None = Field(default=None, gt=0)
    start_time: int | None = None  # clock ticks after boot, from /proc/<pid>/stat
    cmdline: list[str] | None = None
    restarts: int = 0


class BrokerRecord(ProcessRecord):
    id: int = 0
    log: str | None = None
    address: str | None = None  # its LOCAL listener, host:port (older files: the bootstrap's n-th entry)
    metrics: str | None = None  # host:port of its Prometheus metrics (causeway.metrics.listener)


class WanRecord(ProcessRecord):
    """The WAN emulator (pid None when an external Toxiproxy serves the links)."""

    api: str
    proxies: list[str] = Field(default_factory=list)


class ZooKeeperRecord(ProcessRecord):
    """A cluster's ZooKeeper (`causeway zookeeper`); `connect` (its plain client port) and
    `tls_connect` (its TLS client port, the brokers' zookeeper.connect with security.zookeeper: SSL)
    end with the cluster's chroot."""

    connect: str
    tls_connect: str | None = None
    log: str | None = None


class ClusterRecord(_Record):
    datacenter: str
    bootstrap: str
    wan: dict[str, str] = Field(default_factory=dict)  # remote datacenter -> proxy address
    brokers: list[BrokerRecord]
    zookeeper: ZooKeeperRecord | None = None  # coordination: zookeeper only
    # The launcher's admin client properties (a 0600 file; the password never in this file),
    # when the cluster's LOCAL listener needs a login: how `status` asks the brokers.
    command_config: str | None = None


class MirrorRecord(ProcessRecord):
    source: str
    target: str
    mode: str = "mm2"  # or "link" (files written before link mode have none: mm2)
    status_file: str
    source_bootstrap: str | None = None
    target_bootstrap: str | None = None
    log: str | None = None
    config: str | None = None
    metrics: str | None = None  # host:port of its Prometheus metrics (metrics.listener)


class PrometheusRecord(ProcessRecord):
    """The Prometheus of `monitoring: prometheus` (`causeway prometheus`, which runs the server)."""

    url: str
    config: str | None = None
    log: str | None = None


class LaunchStateFile(ProcessRecord):
    """The whole file; its own pid, start time and command line are the launcher's."""

    format: int = STATE_FORMAT
    name: str
    metrics: str | None = None  # host:port of the launcher's own Prometheus metrics
    wan: WanRecord
    clusters: dict[str, ClusterRecord] = Field(default_factory=dict)
    mirrors: dict[str, MirrorRecord] = Field(default_factory=dict)
    prometheus: PrometheusRecord | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def parse_state(path: Path, raw: bytes) -> LaunchStateFile:
    """The state file's content, checked. Raises StateFileError naming the first bad field."""
    if not raw.strip():
        raise StateFileError(path, "is empty")
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise StateFileError(path, "is not text (binary content)") from None
    except ValueError as exc:
        raise StateFileError(path, f"is not valid JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise StateFileError(path, f"is not a launcher state file: expected a JSON object, "
                                   f"found {type(loaded).__name__}")
    try:
        return LaunchStateFile.model_validate(loaded)
    except ValidationError as exc:
        raise StateFileError(path, f"is not a launcher state file: {_describe(exc.errors()[0])}") from None


# What a field holds, in words, where its type alone says too little.
_EXPECTED = {
    "pid": "a positive integer or null",
    "start_time": "an integer",
    "restarts": "an integer",
    "cmdline": "a list of strings",
    "proxies": "a list of names",
}
_TYPES = {"string_type": "str", "int_type": "int", "list_type": "list", "bool_type": "bool"}


def _describe(error: Any) -> str:
    """One pydantic error as `field.path: what was expected, what was found`."""
    loc: tuple[str | int, ...] = tuple(error["loc"])
    # A field described in words is named as a whole, even when one of its items is wrong.
    for i, part in enumerate(loc):
        if part in _EXPECTED and not _is_key(loc, i):
            found = f", found {error['input']!r:.40}" if i == len(loc) - 1 else ""
            return f"{_path(loc[: i + 1])}: expected {_EXPECTED[str(part)]}{found}"
    where = _path(loc)
    kind = error["type"]
    if kind == "missing":
        return f"{where}: missing"
    found = type(error["input"]).__name__
    if kind in _TYPES:
        return f"{where}: expected {_TYPES[kind]}, found {found}"
    if kind in ("dict_type", "model_type"):
        return f"{where}: expected an object, found {found}"
    return f"{where}: {error['msg']}"


def _is_key(loc: tuple[str | int, ...], i: int) -> bool:
    """Whether `loc[i]` is a name the user chose (a cluster or mirror called "pid", a datacenter
    in a cluster's `wan` map), not a field."""
    return i > 0 and (loc[i - 1] in ("clusters", "mirrors") or (loc[i - 1] == "wan" and i >= 3))


def _path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
