"""Transactional offset commits (Kafka's TxnOffsetCommit, KIP-98, with KIP-447's member
checks): ``GroupCoordinator.handleTxnCommitOffsets`` and the transactional half of
``GroupMetadataManager.storeOffsets``, over domain values; and their completion when the
transaction's marker is written (``handleTxnCompletion``).

Theory of operation:

1. The coordinator checks, in Kafka's order: the group id and this coordinator
   (INVALID_GROUP_ID, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR); a group it does not know
   is created Empty; then the committer (:func:`txn_commit_error`): a Dead group is
   COORDINATOR_NOT_AVAILABLE; generation -1 on an Empty group passes; a request naming a
   generation, a member or an instance id must name a current member (FENCED_INSTANCE_ID when
   the instance id belongs to another member id, UNKNOWN_MEMBER_ID when nobody has it) and the
   current generation (ILLEGAL_GENERATION); one naming none of them passes (TxnOffsetCommit
   v0-v2 carry no member). Unlike a plain commit, the member's session is not renewed and a
   CompletingRebalance group is not refused.
2. Offsets with metadata over ``offset.metadata.max.bytes`` are refused alone
   (OFFSET_METADATA_TOO_LARGE); the others are prepared as pending under the producer id and
   written as one *transactional* batch (the producer's id and epoch, base sequence 0) to the
   group's partition of ``__consumer_offsets`` with acks=all, as the coordinator: the log
   checks the producer's epoch (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a zombie). Append
   errors are mapped as for a plain commit. After the append the pending offsets carry their
   batch's offset; after a failed one they are forgotten.
3. Pending offsets are not visible to OffsetFetch (``require_stable`` answers
   UNSTABLE_OFFSET_COMMIT for them). When the transaction coordinator's COMMIT or ABORT marker
   for the producer has been written to a ``__consumer_offsets`` partition this broker leads
   (WriteTxnMarkers, ``node.replica_markers``), :meth:`GroupMetadataManager.handle_txn_completion`
   materialises them — where later in the log than the committed value — or drops them.
   A coordinator that loads the partition afterwards reads the same outcome from the markers
   in the log (``node.group_loader``).

Deviation from Kafka, deliberate: no KIP-890 verification of the transaction with the
transaction coordinator before the append (Kafka 3.6+); kafkasim follows Kafka 2.x-3.5, where
the producer's AddOffsetsToTxn is what puts the group's partition in the transaction.
"""

from __future__ import annotations

from kafkasim.common.clock import Clock
from kafkasim.common.errors import error_for_name
from kafkasim.node.group_manager import GroupMetadataManager
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_offsets import GroupOffsets, commit_result, offset_batch
from kafkasim.node.group_types import (
    Error,
    GroupState,
    OffsetCommitResult,
    PartitionOutcome,
    TxnOffsetCommitParams,
)


def txn_commit_error(group: Group, params: TxnOffsetCommitParams) -> Error:
    """Kafka's ``validateOffsetCommit`` for a transactional commit: None when ``params`` may
    commit to ``group``, else the error of every partition."""
    if group.state is GroupState.DEAD:
        return error_for_name("COORDINATOR_NOT_AVAILABLE")
    if params.generation_id < 0 and group.state is GroupState.EMPTY:
        return None
    names_member = (
        params.generation_id >= 0 or params.member_id or params.group_instance_id is not None
    )
    if not names_member:
        return None
    if params.group_instance_id is not None:
        static_id = group.static_member_id(params.group_instance_id)
        if static_id is None:
            return error_for_name("UNKNOWN_MEMBER_ID")
        if static_id != params.member_id:
            return error_for_name("FENCED_INSTANCE_ID")
    elif params.member_id not in group.members:
        return error_for_name("UNKNOWN_MEMBER_ID")
    if params.generation_id != group.generation:
        return error_for_name("ILLEGAL_GENERATION")
    return None


class GroupTxnOffsets:
    """TxnOffsetCommit for every group ``manager`` holds; metadata limits and the commit's
    values are ``offsets``' (the plain commit path)."""

    def __init__(self, manager: GroupMetadataManager, offsets: GroupOffsets, clock: Clock) -> None:
        self._manager = manager
        self._offsets = offsets
        self._clock = clock

    async def txn_offset_commit(self, params: TxnOffsetCommitParams) -> OffsetCommitResult:
        error = self._manager.check(params.group_id)
        group: Group | None = None
        if error is None:
            group = self._manager.groups.get(params.group_id)
            if group is None:
                group = self._manager.add_empty_group(params.group_id, self._clock.monotonic_ms())
            error = txn_commit_error(group, params)
        if error is not None or group is None:
            return OffsetCommitResult(tuple(PartitionOutcome(e.tp, error) for e in params.offsets))
        commit_ms = self._clock.time_ms()
        accepted, too_large = self._offsets.accepted_values(params.offsets, commit_ms)
        if not accepted:
            return commit_result(params.offsets, too_large, None)
        producer_id = params.producer_id
        self._manager.add_producer_group(producer_id, params.group_id)
        group.offsets.prepare_txn_commit(producer_id, accepted)
        batch = offset_batch(
            params.group_id,
            accepted,
            commit_ms,
            producer_id=producer_id,
            producer_epoch=params.producer_epoch,
        )
        error, base_offset = await self._manager.append(params.group_id, batch)
        current = self._manager.groups.get(params.group_id) is group
        if current and group.state is not GroupState.DEAD:
            for tp, value in accepted.items():
                if error is None:
                    group.offsets.on_txn_commit_append(producer_id, tp, value, base_offset)
                else:
                    group.offsets.fail_txn_commit(producer_id, tp)
            if not group.offsets.has_pending_from(producer_id):
                self._manager.remove_producer_group(producer_id, params.group_id)
        return commit_result(params.offsets, too_large, error)
