"""Replaying `__consumer_offsets` records into groups (Kafka's GroupMetadataManager load).

A :class:`GroupLoader` touches nothing but its own dictionaries, so a partition's records can be
replayed in a worker thread while the broker serves; the coordinator takes the finished groups
on its own thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata,
    decode_key,
    decode_offset_commit,
)
from broker.protocol.errors import ProtocolError

__all__ = ["GroupLoader", "LoggedRecords", "OffsetsLogSink", "PendingTxnOffsets", "Records", "supersedes"]

log = logging.getLogger(__name__)

Records = Iterable[tuple[bytes | None, bytes | None]]
# Records with where each sits in its partition: (log offset, key, value).
LoggedRecords = Iterable[tuple[int, bytes | None, bytes | None]]
# Transactional offset commits not yet decided: producer id -> group -> offsets.
PendingTxnOffsets = dict[int, dict[str, dict[tuple[str, int], OffsetCommitValue]]]


def supersedes(candidate: OffsetCommitValue, current: OffsetCommitValue | None) -> bool:
    """Whether `candidate` becomes the committed offset over `current`: the later record in the
    log wins, whatever order plain and transactional commits are decided in (Kafka's
    replayEndTransactionMarker and onOffsetCommitAppend). A plain OffsetCommit written after a
    TxnOffsetCommit keeps its offset when that transaction's COMMIT marker lands later."""
    return current is None or candidate.record_offset > current.record_offset


class OffsetsLogSink(Protocol):
    """What a replay of a `__consumer_offsets` partition gives, in log order: plain records,
    TxnOffsetCommit batches (by producer id) and the markers that decide them."""

    def apply(self, records: LoggedRecords) -> None: ...

    def apply_txn(self, producer_id: int, records: LoggedRecords) -> None: ...

    def end_txn(self, producer_id: int, commit: bool) -> None: ...


class GroupLoader:
    """Groups rebuilt from records fed in log order (later records win).

    Groups come back as they were last written: with members (Stable; each member's session
    timer starts when the coordinator takes the group) or without (Empty). Unreadable records
    are skipped with a warning, never fatal. Transactional offset commits wait in `pending` for
    their producer's marker (Kafka's GroupMetadataManager.loadGroupsAndOffsets): COMMIT makes
    them committed offsets unless a plain commit was written after them (:func:`supersedes`),
    ABORT drops them, and those with no marker yet stay pending. A tombstone drops what is
    pending for its partition too, as Kafka's replay does.
    """

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.pending: PendingTxnOffsets = {}
        self.offsets_loaded = 0
        self.skipped = 0

    def apply_txn(self, producer_id: int, records: LoggedRecords) -> None:
        """Records of a transactional batch of `producer_id`: its offset commits, held."""
        held = self.pending.setdefault(producer_id, {})
        for offset, key_bytes, value in records:
            try:
                key = decode_key(key_bytes) if key_bytes is not None else None
                if isinstance(key, OffsetCommitKey) and value is not None:
                    committed = decode_offset_commit(value).written_at(offset)
                    held.setdefault(key.group, {})[(key.topic, key.partition)] = committed
            except ProtocolError as exc:
                self.skipped += 1
                log.warning("skipping an unreadable transactional __consumer_offsets record: %s", exc)

    def end_txn(self, producer_id: int, commit: bool) -> None:
        """`producer_id`'s marker: its held offsets become committed ones (COMMIT) or go."""
        held = self.pending.pop(producer_id, {})
        if not commit:
            return
        for group_id, offsets in held.items():
            group = self.groups.setdefault(group_id, Group(group_id))
            for tp, value in offsets.items():
                if supersedes(value, group.offsets.get(tp)):
                    group.offsets[tp] = value
                    self.offsets_loaded += 1

    def apply(self, records: LoggedRecords) -> None:
        """Plain (non-transactional) records, in log order."""
        for offset, key_bytes, value in records:
            if key_bytes is None:
                continue
            try:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey):
                    group = self.groups.setdefault(key.group, Group(key.group))
                    tp = (key.topic, key.partition)
                    if value is None:
                        group.offsets.pop(tp, None)
                        for by_group in self.pending.values():
                            by_group.get(key.group, {}).pop(tp, None)
                    else:
                        group.offsets[tp] = decode_offset_commit(value).written_at(offset)
                    self.offsets_loaded += 1
                elif isinstance(key, GroupMetadataKey):
                    if value is None:
                        self._forget_metadata(key.group)
                    else:
                        self._restore(key.group, decode_group_metadata(value))
            except ProtocolError as exc:
                self.skipped += 1
                log.warning("skipping an unreadable __consumer_offsets record: %s", exc)

    def finish(self) -> dict[str, Group]:
        """The loaded groups; a simple group whose offsets were all deleted is gone."""
        for group_id, group in list(self.groups.items()):
            if group.protocol_type is None and not group.offsets and not group.members:
                del self.groups[group_id]
        return self.groups

    def _forget_metadata(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if not group.offsets:
            del self.groups[group_id]
            return
        self.groups[group_id] = Group(group_id, offsets=group.offsets)

    def _restore(self, group_id: str, meta: GroupMetadataValue) -> None:
        old = self.groups.get(group_id)
        # Built in its state, not moved there: Stable with members, else Empty (Kafka's loadGroup).
        group = Group(group_id, state=GroupState.STABLE if meta.members else GroupState.EMPTY,
                      offsets=old.offsets if old is not None else {})
        self.groups[group_id] = group
        group.generation = meta.generation
        group.protocol_type = meta.protocol_type or None
        group.protocol_name = meta.protocol
        group.state_timestamp_ms = meta.current_state_timestamp
        for m in meta.members:
            protocols = [(meta.protocol, m.subscription)] if meta.protocol is not None else []
            rebalance_timeout = m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout
            group.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                rebalance_timeout, meta.protocol_type, protocols, m.assignment)
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            group.leader_id = meta.leader if meta.leader in group.members else next(iter(group.members))
