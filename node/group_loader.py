"""Loading a partition of ``__consumer_offsets``: the groups and committed offsets its records
describe (the reading half of Kafka's ``GroupMetadataManager.loadGroupsAndOffsets``).

Pure: batches in, groups out. The log is compacted, so the last record of each key wins and a
tombstone (a null value) removes what its key named. A group whose metadata record was deleted
but which still has committed offsets comes back Empty with those offsets; a group with neither
is gone. Control batches (transaction markers) carry no group state and are skipped.

A key or value that does not decode raises ``CORRUPT_MESSAGE`` (``node.group_records``): the
coordinator then does not take the partition over rather than serve half of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.types import TopicPartition
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkasim.node.group_types import GroupState
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader


def load_groups(
    batches: Iterable[tuple[LogEntryHeader, Sequence[Record]]], now_ms: int
) -> dict[str, Group]:
    """The groups of one partition's log, by id (in id order); loaded members must heartbeat
    within their session timeout from ``now_ms``."""
    offsets: dict[str, dict[TopicPartition, OffsetValue | None]] = {}
    groups: dict[str, Group | None] = {}
    for header, records in batches:
        if header.is_control:
            continue
        for record in records:
            if record.key is None:
                continue
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                tp = TopicPartition(key.topic, key.partition)
                value = decode_offset_value(record.value) if record.value else None
                offsets.setdefault(key.group, {})[tp] = value
            elif isinstance(key, GroupKey):
                groups[key.group] = (
                    Group.from_value(key.group, decode_group_value(record.value), now_ms)
                    if record.value
                    else None
                )
    loaded: dict[str, Group] = {}
    for group_id in sorted(set(groups) | set(offsets)):
        group = groups.get(group_id)
        committed = {tp: v for tp, v in offsets.get(group_id, {}).items() if v is not None}
        if group is None:
            if not committed:
                continue
            group = Group(group_id)
            group.transition(GroupState.EMPTY, now_ms)
        group.offsets = committed
        loaded[group_id] = group
    return loaded
