"""Loading a partition of ``__consumer_offsets``: the groups and committed offsets its records
describe (the reading half of Kafka's ``GroupMetadataManager.loadGroupsAndOffsets``).

Pure: batches in, groups out. The log is compacted, so the last record of each key wins and a
tombstone (a null value) removes what its key named. A group whose metadata record was deleted
but which still has committed offsets comes back Empty with those offsets; a group with neither
is gone.

Transactional offset commits (TxnOffsetCommit, KIP-98) are read as Kafka reads them: the
offsets of a transactional batch are pending under its producer id until that producer's
control batch: a COMMIT marker makes them committed (where their batch is later in the log than
the committed value's), an ABORT marker drops them, and those still without a marker stay
pending in the loaded group (the marker's WriteTxnMarkers completes them later). Every offset
remembers the base offset of its batch, against which later commits are ordered.

A key or value that does not decode raises ``CORRUPT_MESSAGE`` (``node.group_records``): the
coordinator then does not take the partition over rather than serve half of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.types import TopicPartition
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_offset_cache import CommitRecord, OffsetCache
from kafkasim.node.group_records import (
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkasim.node.group_types import GroupState
from kafkasim.storage.records.batch import BatchHeader, ControlRecordType, Record, parse_control_key
from kafkasim.storage.records.entry import LogEntryHeader

GroupPartition = tuple[str, TopicPartition]


def load_groups(
    batches: Iterable[tuple[LogEntryHeader, Sequence[Record]]], now_ms: int
) -> dict[str, Group]:
    """The groups of one partition's log, by id (in id order); loaded members must heartbeat
    within their session timeout from ``now_ms``."""
    offsets: dict[GroupPartition, CommitRecord | None] = {}
    pending: dict[int, dict[GroupPartition, CommitRecord | None]] = {}
    groups: dict[str, Group | None] = {}
    for header, records in batches:
        if not records:
            continue
        transactional = isinstance(header, BatchHeader) and header.is_transactional
        if header.is_control:
            if transactional:
                _end_txn(header.producer_id, records[0], pending, offsets)
            continue
        batch_offset = records[0].offset
        for record in records:
            if record.key is None:
                continue
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                at = (key.group, TopicPartition(key.topic, key.partition))
                value = decode_offset_value(record.value) if record.value else None
                stored = CommitRecord(value, batch_offset) if value is not None else None
                if transactional:
                    pending.setdefault(header.producer_id, {})[at] = stored
                else:
                    offsets[at] = stored
            elif isinstance(key, GroupKey):
                groups[key.group] = (
                    Group.from_value(key.group, decode_group_value(record.value), now_ms)
                    if record.value
                    else None
                )
    committed = _by_group({at: r for at, r in offsets.items() if r is not None})
    open_txns = {
        pid: _by_group({at: r for at, r in txn.items() if r is not None})
        for pid, txn in pending.items()
    }
    loaded: dict[str, Group] = {}
    with_offsets = set(committed) | {g for txn in open_txns.values() for g in txn}
    for group_id in sorted(set(groups) | with_offsets):
        group = groups.get(group_id)
        if group is None:
            if group_id not in with_offsets:
                continue
            group = Group(group_id)
            group.transition(GroupState.EMPTY, now_ms)
        group.offsets = OffsetCache(
            committed.get(group_id, {}),
            {pid: txn[group_id] for pid, txn in open_txns.items() if group_id in txn},
        )
        loaded[group_id] = group
    return loaded


def _end_txn(
    producer_id: int,
    marker: Record,
    pending: dict[int, dict[GroupPartition, CommitRecord | None]],
    offsets: dict[GroupPartition, CommitRecord | None],
) -> None:
    """A transaction marker of ``producer_id``: its pending offsets are committed (COMMIT,
    where later in the log than the committed ones) or dropped (ABORT)."""
    ended = pending.pop(producer_id, {})
    if parse_control_key(marker.key) is not ControlRecordType.COMMIT:
        return
    for at, record in ended.items():
        if record is None:
            # A transactional tombstone Kafka's coordinator never writes; as Kafka's loader,
            # it only removed the pending value.
            continue
        current = offsets.get(at)
        if current is None or current.older_than(record):
            offsets[at] = record


def _by_group(
    records: dict[GroupPartition, CommitRecord],
) -> dict[str, dict[TopicPartition, CommitRecord]]:
    grouped: dict[str, dict[TopicPartition, CommitRecord]] = {}
    for (group_id, tp), record in records.items():
        grouped.setdefault(group_id, {})[tp] = record
    return grouped
