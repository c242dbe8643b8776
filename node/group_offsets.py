"""Committed offsets: OffsetCommit and OffsetFetch (Kafka's ``GroupCoordinator.handleCommitOffsets``
and ``handleFetchOffsets`` with ``GroupMetadataManager.storeOffsets``), over domain values.

A commit is checked against the group's generation, appended to the group's partition of
``__consumer_offsets`` with acks=all and only then applied to the cache and answered, which is
why committed offsets survive a coordinator failover. A partition whose metadata is longer than
``offset.metadata.max.bytes`` is refused alone (OFFSET_METADATA_TOO_LARGE); the rest commit.

Deviations from Kafka, deliberate: no offset expiry (``offsets.retention.minutes``; retention
of committed offsets is left to compaction), no transactional offset commits.
"""

from __future__ import annotations

from kafkasim.common.clock import Clock
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_manager import GroupMetadataManager
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_records import (
    OffsetKey,
    OffsetValue,
    encode_offset_key,
    encode_offset_value,
)
from kafkasim.node.group_types import (
    NO_GENERATION,
    CommittedOffset,
    Error,
    GroupState,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetFetchParams,
    OffsetFetchResult,
    PartitionOutcome,
)


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
        records: list[tuple[bytes, bytes | None]] = []
        accepted: dict[TopicPartition, OffsetValue] = {}
        too_large: set[TopicPartition] = set()
        for entry in params.offsets:
            if len(entry.metadata.encode()) > self._max_metadata_bytes:
                too_large.add(entry.tp)
                continue
            value = OffsetValue(
                offset=entry.offset,
                leader_epoch=entry.leader_epoch,
                metadata=entry.metadata,
                commit_timestamp=commit_ms,
            )
            accepted[entry.tp] = value
            key = OffsetKey(params.group_id, entry.tp.topic, entry.tp.partition)
            records.append((encode_offset_key(key), encode_offset_value(value)))
        error = await self._manager.write(params.group_id, records) if records else None
        if error is None and self._manager.groups.get(params.group_id) is group:
            group.offsets.update(accepted)
        too_large_error = error_for_name("OFFSET_METADATA_TOO_LARGE")
        return OffsetCommitResult(
            tuple(
                PartitionOutcome(e.tp, too_large_error if e.tp in too_large else error)
                for e in params.offsets
            )
        )

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
        member = group.members.get(params.member_id) if group is not None else None
        if group is None or member is None:
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
        committed = group.offsets if group is not None else {}
        wanted = sorted(committed) if params.partitions is None else params.partitions
        results = []
        for tp in wanted:
            value = committed.get(tp)
            results.append(
                CommittedOffset(tp, value.offset, value.leader_epoch, value.metadata)
                if value is not None
                else CommittedOffset(tp)
            )
        return OffsetFetchResult(partitions=tuple(results))
