"""What a mirror reports of itself: the status file `causeway mirror --status-file` rewrites every
second, and that `causeway status` reads back (deploy/launcher/control.py).

One model for both sides, so the writer and the reader cannot drift apart on a field name. The
reader is another process, possibly of another version: fields it does not know are ignored
(`extra="ignore"`), and what it needs is checked when it reads (`read_status`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker.small_file import UnusableFile, read_small_file

__all__ = ["TOPIC_STATES", "ClusterRef", "MirrorEvent", "MirrorStatus", "PartitionStatus", "StatusFileError",
           "TopicState", "read_status"]

#: The status file is a few KB per hundred partitions; anything far larger is not ours.
MAX_STATUS_BYTES = 16 * 1024 * 1024


class StatusFileError(Exception):
    """A status file that cannot be used: the message names the file and what is wrong."""


class _Report(BaseModel):
    # strict: a field of the wrong JSON type is an error, not silently converted.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class ClusterRef(_Report):
    alias: str
    bootstrap: str


class MirrorEvent(_Report):
    """Something an operator should know happened (a gap, a re-copy, a topic gone)."""

    time_ms: int
    message: str


class PartitionStatus(_Report):
    topic: str
    partition: int
    remote_topic: str
    position: int  # next source offset to copy
    source_end: int  # the source's high watermark as last seen; -1 before the first fetch
    lag: int
    # Link mode: the target's high watermark as the last LinkAppend answered (-1 before one);
    # offsets are the source's, so it is comparable with `source_end`. mm2 mode: -1.
    target_end: int = -1
    latency_ms: int | None = None
    records: int = 0
    bytes: int = 0
    error: str | None = None  # parked or re-copying: why
    parked: bool = False
    gaps: list[str] = Field(default_factory=list)
    lost: str | None = None
    recopy: str | None = None
    # FAILED: the partition stopped for good because the target's copy is not the source's
    # (link mode: it went ahead of what the mirror copied, or holds other batches); why.
    failed: str | None = None


#: A link-mode mirror topic's states, by Cluster Linking's names where it has the concept:
#: ACTIVE (copied), PAUSED (`causeway mirror pause`, kept in the topic's causeway.mirror.state),
#: PROMOTING (a promotion is waiting for the copy to catch up), STOPPED (promoted: a normal
#: topic now), SOURCE_UNAVAILABLE (the source does not answer), FAILED (the copy is not the
#: source's any more; the reason says why).
TOPIC_STATES = ("ACTIVE", "PAUSED", "PROMOTING", "STOPPED", "SOURCE_UNAVAILABLE", "FAILED")


class TopicState(_Report):
    """One mirror topic's link state, with why (FAILED, SOURCE_UNAVAILABLE, STOPPED) and its lag:
    records the source holds that the copy does not, and how long the oldest of them has waited
    (ms; 0 when caught up); None where that is not known."""

    state: str
    reason: str | None = None
    lag: int | None = None
    lag_ms: int | None = None


class MirrorStatus(_Report):
    name: str
    source: ClusterRef
    target: ClusterRef
    state: str  # starting, waiting for the target/source, running, stopped, failed
    mode: str = "mm2"  # mm2, or link (mirror topics with the source's offsets)
    updated_ms: int
    topics: dict[str, str] = Field(default_factory=dict)  # source topic -> remote topic
    # Link mode: source topics the patterns select that the mirror does not write, and why (a
    # promoted topic, a topic of that name at the target that is not this mirror's).
    not_mirrored: dict[str, str] = Field(default_factory=dict)
    lag: int = 0
    records: int = 0
    max_latency_ms: int | None = None
    group_checkpoints: int = 0  # link mode: group offsets committed at the target (no checkpoints there)
    problems: dict[str, str] = Field(default_factory=dict)  # what -> its last error
    # When fetches from the source last answered (ms since the epoch; None: not yet in this
    # run). While `problems["source"]` is set, the source has been unreachable since then, and
    # `lag` counts against the source ends seen then: at least that much.
    source_reached_ms: int | None = None
    # Link mode: source topics promoted at the target (normal writable topics there now).
    promoted: list[str] = Field(default_factory=list)
    # Link mode: each mirror topic's state (paused and promoted ones included), by topic.
    topic_states: dict[str, TopicState] = Field(default_factory=dict)
    partitions: list[PartitionStatus] = Field(default_factory=list)
    events: list[MirrorEvent] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json(indent=1) + "\n"


def read_status(path: Path) -> MirrorStatus | None:
    """The status a mirror last wrote to `path`; None when there is none yet.

    Raises StatusFileError naming the file and the first bad field for anything else.
    """
    try:
        raw = read_small_file(path, MAX_STATUS_BYTES)  # bounded, and never blocks on a FIFO
    except FileNotFoundError:
        return None
    except UnusableFile as exc:
        raise StatusFileError(f"{path}: {exc}: not a mirror status file") from None
    except OSError as exc:
        raise StatusFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        return MirrorStatus.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise StatusFileError(f"{path}: not a mirror status file: {where}: {first['msg']}") from None
