"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete (Kafka's
``GroupCoordinator.handleCommitOffsets``, ``handleFetchOffsets`` and ``handleDeleteOffsets``
with ``GroupMetadataManager.storeOffsets``), over domain values.

A commit is checked against the group's generation, appended to the group's partition of
``__consumer_offsets`` with acks=all and only then applied to the cache and answered, which is
why committed offsets survive a coordinator failover. A partition whose metadata is longer than
``offset.metadata.max.bytes`` is refused alone (OFFSET_METADATA_TOO_LARGE); the rest commit.

A commit is pending (``node.group_offset_cache``) while its append is in flight, and becomes
the committed value only if its batch lands later in the log than the committed value's (an
older pending transactional commit that commits afterwards does not overwrite it). OffsetFetch
with ``require_stable`` (KIP-447) answers UNSTABLE_OFFSET_COMMIT for a partition with a commit
pending, plain or transactional; transactional commits are ``node.group_txn_offsets``'.

Deviations from Kafka, deliberate: no offset expiry (``offsets.retention.minutes``; retention
of committed offsets is left to compaction). OffsetDelete writes its tombstones with acks=all
before it answers (Kafka appends them locally and answers at once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafkasim.common.clock import Clock
from kafkasim.common.errors import error_for_name
from kafkasim.common.group_protocol import PROTOCOL_TYPE
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_manager import GroupMetadataManager
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from kafkasim.node.group_types import (
    NO_GENERATION,
    CommittedOffset,
    Error,
    GroupState,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetDeleteParams,
    OffsetDeleteResult,
    OffsetFetchParams,
    OffsetFetchResult,
    PartitionOutcome,
)
from kafkasim.storage.records.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, encode_batch


class GroupOffsets:
    """Commits and fetches of the offsets of every group ``manager`` holds."""

    def __init__(self, manager: GroupMetadataManager, config: BrokerConfig, clock: Clock) -> None:
        self._manager = manager
        self._clock = clock
        self._max_metadata_bytes: int = config["offset.metadata.max.bytes"]

    async def offset_commit(self, params: OffsetCommitParams) -> OffsetCommitResult:
        error = self._manager.check(params.group_id)
        group: Group | None = None
        if error is None:
            error, group = self._committer(params)
        if error is not None or group is None:
            return OffsetCommitResult(tuple(PartitionOutcome(e.tp, error) for e in params.offsets))
        commit_ms = self._clock.time_ms()
        accepted, too_large = self.accepted_values(params.offsets, commit_ms)
        if accepted:
            group.offsets.prepare_commit(accepted)
            error, base_offset = await self._manager.append(
                params.group_id, offset_batch(params.group_id, accepted, commit_ms)
            )
            current = self._manager.groups.get(params.group_id) is group
            for tp, value in accepted.items():
                if error is None and current:
                    group.offsets.on_commit_append(tp, value, base_offset)
                else:
                    group.offsets.fail_commit(tp, value)
        return commit_result(params.offsets, too_large, error)

    def accepted_values(
        self, entries: Iterable[OffsetCommitEntry], commit_ms: int
    ) -> tuple[dict[TopicPartition, OffsetValue], set[TopicPartition]]:
        """The values to write, and the partitions refused for metadata longer than
        ``offset.metadata.max.bytes`` (OFFSET_METADATA_TOO_LARGE)."""
        accepted: dict[TopicPartition, OffsetValue] = {}
        too_large: set[TopicPartition] = set()
        for entry in entries:
            if len(entry.metadata.encode()) > self._max_metadata_bytes:
                too_large.add(entry.tp)
                continue
            accepted[entry.tp] = OffsetValue(
                offset=entry.offset,
                leader_epoch=entry.leader_epoch,
                metadata=entry.metadata,
                commit_timestamp=commit_ms,
            )
        return accepted, too_large

    def _committer(self, params: OffsetCommitParams) -> tuple[Error, Group | None]:
        """The group a commit goes to, with the committing member's session renewed; else
        the error for every partition (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, ...)."""
        now = self._clock.monotonic_ms()
        group = self._manager.groups.get(params.group_id)
        if params.generation_id <= NO_GENERATION and not params.member_id:
            # A commit from outside any group's generation (assign-mode consumers, tools):
            # allowed while the group has no members, as in Kafka.
            if group is None:
                return None, self._manager.add_empty_group(params.group_id, now)
            if group.state is not GroupState.EMPTY:
                return error_for_name("UNKNOWN_MEMBER_ID"), None
            return None, group
        if group is None:
            # A member of a generation this coordinator does not know (Kafka's answer).
            return error_for_name("ILLEGAL_GENERATION"), None
        member = group.members.get(params.member_id)
        if member is None:
            return error_for_name("UNKNOWN_MEMBER_ID"), None
        if params.generation_id != group.generation:
            return error_for_name("ILLEGAL_GENERATION"), None
        if group.state is GroupState.COMPLETING_REBALANCE:
            return error_for_name("REBALANCE_IN_PROGRESS"), None
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        return None, group

    def offset_fetch(self, params: OffsetFetchParams) -> OffsetFetchResult:
        error = self._manager.check(params.group_id)
        if error is not None:
            return OffsetFetchResult(error=error)
        group = self._manager.groups.get(params.group_id)
        if group is None:
            return OffsetFetchResult(
                partitions=tuple(map(CommittedOffset, params.partitions or ()))
            )
        committed = group.offsets
        wanted = sorted(committed) if params.partitions is None else params.partitions
        unstable = error_for_name("UNSTABLE_OFFSET_COMMIT")
        results = []
        for tp in wanted:
            value = committed.get(tp)
            if params.require_stable and committed.has_pending(tp):
                results.append(CommittedOffset(tp, error=unstable))
            elif value is not None:
                results.append(
                    CommittedOffset(tp, value.offset, value.leader_epoch, value.metadata)
                )
            else:
                results.append(CommittedOffset(tp))
        return OffsetFetchResult(partitions=tuple(results))

    async def offset_delete(self, params: OffsetDeleteParams) -> OffsetDeleteResult:
        """Remove committed offsets: any of an Empty group's; of a consumer group with members,
        only those of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the rest);
        a group of another protocol type with members: NON_EMPTY_GROUP. An Empty group left
        with no offsets is deleted, as Kafka's offset cleanup deletes it."""
        error = self._manager.check(params.group_id)
        group = self._manager.groups.get(params.group_id) if error is None else None
        if error is None and group is None:
            error = error_for_name("GROUP_ID_NOT_FOUND")
        if error is not None or group is None:
            return OffsetDeleteResult(error=error)
        subscribed: frozenset[str] = frozenset()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != PROTOCOL_TYPE:
                return OffsetDeleteResult(error=error_for_name("NON_EMPTY_GROUP"))
            subscribed = group.subscribed_topics or frozenset()
        eligible = [tp for tp in params.partitions if tp.topic not in subscribed]
        removed = sorted({tp for tp in eligible if tp in group.offsets})
        tombstones: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(params.group_id, tp.topic, tp.partition)), None)
            for tp in removed
        ]
        drop_group = group.state is GroupState.EMPTY and not set(group.offsets) - set(removed)
        if drop_group and group.generation > 0:
            tombstones.append((encode_group_key(GroupKey(params.group_id)), None))
        error = await self._manager.write(params.group_id, tombstones) if tombstones else None
        if error is None and self._manager.groups.get(params.group_id) is group:
            group.offsets.remove(removed)
            if drop_group and group.state is GroupState.EMPTY and not group.offsets:
                group.transition(GroupState.DEAD, self._clock.monotonic_ms())
                del self._manager.groups[params.group_id]
        subscribed_error = error_for_name("GROUP_SUBSCRIBED_TO_TOPIC")
        return OffsetDeleteResult(
            partitions=tuple(
                PartitionOutcome(tp, subscribed_error if tp.topic in subscribed else error)
                for tp in params.partitions
            )
        )


def offset_batch(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetValue],
    timestamp_ms: int,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
) -> bytes:
    """One batch of offset commit records (Kafka's ``generateOffsetRecords``): transactional,
    with base sequence 0, when a producer id is given."""
    records = [
        (
            timestamp_ms,
            encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition)),
            encode_offset_value(value),
        )
        for tp, value in offsets.items()
    ]
    if producer_id == NO_PRODUCER_ID:
        return encode_batch(records)
    return encode_batch(
        records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=0,
        is_transactional=True,
    )


def commit_result(
    entries: Iterable[OffsetCommitEntry], too_large: set[TopicPartition], error: Error
) -> OffsetCommitResult:
    """One outcome per entry: OFFSET_METADATA_TOO_LARGE for the refused ones, else ``error``."""
    too_large_error = error_for_name("OFFSET_METADATA_TOO_LARGE")
    return OffsetCommitResult(
        tuple(
            PartitionOutcome(e.tp, too_large_error if e.tp in too_large else error) for e in entries
        )
    )
