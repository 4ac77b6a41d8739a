"""Where a broker finds its users' configs (their SCRAM credentials), and a standalone broker's
store for them: one file in the data dir.

A ZooKeeper-mode broker reads ``/config/users/<user>`` (``ZooKeeperSupport`` has the same three
methods); a standalone broker, which Kafka does not have, keeps the same configs in
``__users.json`` in its first log dir, readable by its owner only (0600): a SCRAM credential is
a salted hash, but still what a dictionary attack starts from. A file that cannot be read stops
the start rather than locking every SCRAM user out without a word.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import trio

from broker.atomic_file import write_atomically
from broker.config import StartupError
from broker.protocol.errors import ErrorCode, KafkaError
from broker.server.startup_file import read_startup_file

__all__ = ["USERS_FILE", "FileUserConfigs", "UserConfigs"]

USERS_FILE = "__users.json"


class UserConfigs(Protocol):
    async def user_configs(self, user: str) -> dict[str, str]:
        """The configs of ``user`` (empty when none). Raises KafkaError when they cannot be read."""
        ...

    async def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        """Replace them (empty: the user has none left). Raises KafkaError."""
        ...

    async def users_with_configs(self) -> list[str]:
        ...


class FileUserConfigs:
    """A standalone broker's user configs, in one 0600 file."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / USERS_FILE
        self._users: dict[str, dict[str, str]] = {}
        self._lock = trio.Lock()  # one change at a time: each rewrites the whole file

    def load(self) -> None:
        """Read the file (none yet: no users). Raises StartupError."""
        data = read_startup_file(self._path, "user configs")
        if data is None:
            return
        try:
            document = json.loads(data)
            users = document["users"] if isinstance(document, dict) and document.get("version") == 1 else None
            if not isinstance(users, dict) or not all(
                    isinstance(configs, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in configs.items()) for configs in users.values()):
                raise ValueError("not a version 1 users file")
        except (ValueError, RecursionError) as exc:
            raise StartupError(f"cannot read the user configs in {self._path}: {exc} (fix or remove the file)"
                               ) from None
        self._users = users

    async def user_configs(self, user: str) -> dict[str, str]:
        return dict(self._users.get(user, {}))

    async def users_with_configs(self) -> list[str]:
        return sorted(self._users)

    async def set_user_configs(self, user: str, configs: Mapping[str, str]) -> None:
        async with self._lock:
            users = {**self._users, user: dict(configs)}
            if not configs:
                del users[user]
            data = json.dumps({"version": 1, "users": users}, indent=1, sort_keys=True)
            try:
                await trio.to_thread.run_sync(lambda: write_atomically(self._path, data, mode=0o600))
            except OSError as exc:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write {self._path}: {exc}") from exc
            self._users = users
