"""``meta.properties``: the file in a data dir that names the broker and the cluster it belongs to,
read and written here only (the standalone controller and a ZooKeeper-mode broker's
registration both use it), in Kafka's ZooKeeper-mode format: ``version=0``, ``broker.id``,
``cluster.id`` (KRaft's ``node.id`` is read as the broker id too).

Blocking file IO: callers on the event loop run it in a worker thread.
"""

from __future__ import annotations

from pathlib import Path

from broker.atomic_file import write_atomically
from broker.config import StartupError

__all__ = ["META_PROPERTIES", "read_meta_properties", "write_meta_properties"]

META_PROPERTIES = "meta.properties"


def read_meta_properties(data_dir: Path, broker_id: int) -> str | None:
    """The cluster id that `data_dir`'s meta.properties names ("" when it names none), or None
    when there is no such file.

    Raises StartupError naming the file when it cannot be read, its broker.id is not a number,
    or it names another broker than `broker_id`: the data dir is not this broker's.
    """
    path = data_dir / META_PROPERTIES
    if not path.exists():
        return None
    props = _read_properties(path)
    raw_id = props.get("broker.id", props.get("node.id", "-1"))
    try:
        stored_id = int(raw_id)
    except ValueError:
        raise StartupError(f"{path}: broker.id '{raw_id}' is not a number; restore the file or "
                           "correct the line") from None
    if stored_id != broker_id:
        raise StartupError(f"{path}: data dir belongs to broker {stored_id}, not {broker_id}")
    return props.get("cluster.id", "")


def write_meta_properties(data_dir: Path, broker_id: int, cluster_id: str) -> None:
    """Write `data_dir`'s meta.properties (atomically: a crash leaves the old file or the new)."""
    write_atomically(data_dir / META_PROPERTIES,
                     f"#\n# written by causeway\nversion=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")


def _read_properties(path: Path) -> dict[str, str]:
    """``key=value`` lines; comments (``#``, ``!``) and lines without ``=`` are passed over: only
    the keys above matter."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StartupError(
            f"cannot read {path} ({exc}); it names the broker and cluster this data dir belongs to: "
            "restore it, or write broker.id=<id> and cluster.id=<id> lines") from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props
