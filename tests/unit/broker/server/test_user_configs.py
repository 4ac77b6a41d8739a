"""A standalone broker's users file: kept 0600, survives a reload, and a damaged one stops the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import StartupError
from broker.server.user_configs import USERS_FILE, FileUserConfigs


async def test_configs_are_stored_0600_reloaded_and_removed_when_emptied(tmp_path: Path) -> None:
    store = FileUserConfigs(tmp_path)
    store.load()
    await store.set_user_configs("alice", {"SCRAM-SHA-512": "salt=a,stored_key=b,server_key=c,iterations=4096"})
    await store.set_user_configs("bob", {"SCRAM-SHA-256": "x"})
    assert (tmp_path / USERS_FILE).stat().st_mode & 0o777 == 0o600
    reloaded = FileUserConfigs(tmp_path)
    reloaded.load()
    assert await reloaded.users_with_configs() == ["alice", "bob"]
    assert (await reloaded.user_configs("alice"))["SCRAM-SHA-512"].startswith("salt=a")
    await reloaded.set_user_configs("bob", {})
    assert await reloaded.users_with_configs() == ["alice"]
    assert await reloaded.user_configs("nobody") == {}


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"version":2,"users":{}}', b'{"version":1,"users":{"a":[1]}}',
                                     b'{"version":1,"users":{"a":{"k":1}}}', b"[" * 100_000])
def test_a_damaged_file_stops_the_start_naming_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / USERS_FILE).write_bytes(content)
    with pytest.raises(StartupError, match=USERS_FILE):
        FileUserConfigs(tmp_path).load()
