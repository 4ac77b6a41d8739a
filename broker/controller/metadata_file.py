"""``cluster-metadata.json``: the standalone controller's metadata, read strictly, written atomically.

The file is the only record of every topic's id, partitions and config overrides, and of the
producer-id block handed out last. It cannot be silently recreated: a broker that started without
it would forget its topics (their logs would stay on disk, unserved) and could hand out producer
ids again. So a file that does not read back as exactly what :func:`encode` writes stops the
broker with a :class:`StartupError` that names the file, what is wrong and what to do.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.atomic_file import write_atomically
from broker.config import StartupError
from broker.controller.model import PartitionInfo, TopicInfo, validate_topic_name

__all__ = ["FORMAT_VERSION", "StoredMetadata", "decode", "encode", "read", "write"]

FORMAT_VERSION = 1
# Far above any count a broker allows (max.broker.partitions), yet a bound: a damaged file must
# not make the broker build millions of objects before it notices.
_MAX_ENTRIES = 10_000_000
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class StoredMetadata:
    producer_id_block_end: int
    topics: dict[str, TopicInfo]


class _Bad(Exception):
    """What is wrong with the document, as a phrase ("topics.orders.partitions[3]: ...")."""


def _advice(path: Path) -> str:
    return (
        f"{path} holds every topic's id, partitions and config overrides; the broker will not "
        "start without it rather than lose them. Restore the file from a backup, or repair it "
        "by hand. To start with no topics instead, move it away: the partition directories stay "
        "on disk, and topics created again with the same name and partition count take them back "
        "(their config overrides must be set again)."
    )


def read(path: Path) -> StoredMetadata | None:
    """The metadata in ``path``, None when the file does not exist (a new data dir).

    Raises StartupError naming the file when it cannot be read or is not what :func:`encode`
    writes (empty, binary, truncated JSON, wrong types, unknown format version).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StartupError(f"cannot read {path}: {exc.strerror or exc}. {_advice(path)}") from None
    try:
        return decode(raw)
    except _Bad as exc:
        raise StartupError(f"{path} is damaged: {exc}. {_advice(path)}") from None


def decode(raw: bytes) -> StoredMetadata:
    if not raw.strip():
        raise _Bad("the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"byte {exc.start} is not UTF-8 text (binary content)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    except RecursionError:
        raise _Bad("JSON nested too deeply") from None
    obj = _dict(doc, "the document")
    version = obj.get("version")
    if version != FORMAT_VERSION:
        raise _Bad(f"format version {version!r}, expected {FORMAT_VERSION}")
    block_end = _int(obj.get("producer_id_block_end", 0), "producer_id_block_end", 0, 2**63 - 1)
    topics_doc = _dict(obj.get("topics"), "topics")
    if len(topics_doc) > _MAX_ENTRIES:
        raise _Bad(f"topics: {len(topics_doc)} entries")
    topics: dict[str, TopicInfo] = {}
    for name, entry in topics_doc.items():
        where = f"topics.{name}"
        problem = validate_topic_name(name)
        if problem is not None:
            raise _Bad(f"{where}: {problem}")
        topics[name] = _topic(name, _dict(entry, where), where)
    return StoredMetadata(block_end, topics)


def _topic(name: str, entry: dict[str, Any], where: str) -> TopicInfo:
    try:
        topic_id = uuid.UUID(_str(entry.get("topic_id"), f"{where}.topic_id"))
    except ValueError:
        raise _Bad(f"{where}.topic_id: not a UUID") from None
    configs_doc = _dict(entry.get("configs", {}), f"{where}.configs")
    configs = {k: _str(v, f"{where}.configs.{k}") for k, v in configs_doc.items()}
    internal = entry.get("internal", False)
    if not isinstance(internal, bool):
        raise _Bad(f"{where}.internal: expected true or false, got {_kind(internal)}")
    parts_doc = entry.get("partitions")
    if not isinstance(parts_doc, list) or not parts_doc:
        raise _Bad(f"{where}.partitions: expected a non-empty list, got {_kind(parts_doc)}")
    if len(parts_doc) > _MAX_ENTRIES:
        raise _Bad(f"{where}.partitions: {len(parts_doc)} entries")
    partitions = []
    for i, p_doc in enumerate(parts_doc):
        at = f"{where}.partitions[{i}]"
        p = _dict(p_doc, at)
        index = _int(p.get("partition"), f"{at}.partition", 0, _INT32_MAX)
        if index != i:
            raise _Bad(f"{at}.partition: {index}, expected {i} (partitions in order, none missing)")
        partitions.append(PartitionInfo(
            partition=index,
            leader=_int(p.get("leader"), f"{at}.leader", -1, _INT32_MAX),
            leader_epoch=_int(p.get("leader_epoch"), f"{at}.leader_epoch", 0, _INT32_MAX),
            replicas=_ids(p.get("replicas"), f"{at}.replicas"),
            isr=_ids(p.get("isr"), f"{at}.isr"),
        ))
    return TopicInfo(name=name, topic_id=topic_id, partitions=tuple(partitions), configs=configs,
                     is_internal=internal)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__)


def _dict(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where}: expected an object, got {_kind(value)}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{where}: expected a string, got {_kind(value)}")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{where}: expected a number, got {_kind(value)}")
    if not low <= value <= high:
        raise _Bad(f"{where}: {value} is outside [{low}, {high}]")
    return value


def _ids(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 32767:
        raise _Bad(f"{where}: expected a list of broker ids, got {_kind(value)}")
    return tuple(_int(v, f"{where}[{i}]", 0, _INT32_MAX) for i, v in enumerate(value))


def encode(cluster_id: str, producer_id_block_end: int, topics: dict[str, TopicInfo]) -> str:
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "cluster_id": cluster_id,
        "producer_id_block_end": producer_id_block_end,
        "topics": {
            t.name: {
                "topic_id": str(t.topic_id),
                "internal": t.is_internal,
                "configs": dict(t.configs),
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                    }
                    for p in t.partitions
                ],
            }
            for t in sorted(topics.values(), key=lambda t: t.name)
        },
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def write(path: Path, text: str) -> None:
    """Replace the file atomically: temp file, fsync, rename, fsync of the directory. Blocking:
    call it from a worker thread."""
    write_atomically(path, text)
