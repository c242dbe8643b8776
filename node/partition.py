"""One partition replica on this broker: its log and its role, leader or follower.

Invariants (asserted by the simulation's checker):
  * as leader: this broker ∈ ISR ⊆ assigned replicas; the HW never moves back;
  * the HW is the smallest LEO over the *maximal* ISR (the committed ISR plus any in-flight
    change), so a write is never acknowledged before every replica the ISR may contain has it;
  * leader epochs only grow; a LeaderAndIsr with an older epoch is ignored;
  * as follower: HW = min(own LEO, leader's HW).

An ISR change the leader has proposed but ZooKeeper has not yet confirmed is a type, not a
flag: :class:`PendingExpand` or :class:`PendingShrink` (Kafka's ``PendingExpandIsr`` /
``PendingShrinkIsr``); only one is in flight at a time, and min.insync.replicas checks use the
committed ISR only.

DeleteRecords (as leader) moves the log start offset, never past the HW; the request is
answered once the *low watermark* — the smallest log start offset over this log and the
followers on live brokers, as their fetches report it — has reached the new start.

Requests waiting on this partition (acks=all produces, DeleteRecords) wait in the purgatories
of ``node.purgatory`` (``delayed``): the partition checks them when its HW or low watermark may
have moved, and fails them when it stops leading.

Not thread-safe: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafkasim.common.errors import (
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    error_for_name,
)
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.node.purgatory import DelayedOperations
from kafkasim.node.replica_types import HIGH_WATERMARK_OFFSET
from kafkasim.node.replication import (
    FollowerState,
    can_join_isr,
    low_watermark,
    new_leader_high_watermark,
    out_of_sync_replicas,
    record_follower_fetch,
)
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.storage.file_records import Buffer, TimestampAndOffset
from kafkasim.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendOrigin,
    FetchIsolation,
    Log,
    LogAppendInfo,
)

logger = logging.getLogger(__name__)

NO_LEADER = -1
# What a long-polling fetch waits for on a partition with nothing to answer yet (Kafka's
# DelayedFetch: a follower's fetch completes once the log end passes its offset, a consumer's
# once the HW does; a read_committed one's once the LSO does, which moves with either).
WAKE_ON_LOG_END = 1
WAKE_ON_HIGH_WATERMARK = 2
WAKE_ON_ANY = WAKE_ON_LOG_END | WAKE_ON_HIGH_WATERMARK
# Watches whose fetch was answered another way (its timeout, another partition's data) are
# dropped at the next wake-up; past this many, also when a new one is added (a quiet partition).
_WATCHES_BEFORE_PRUNING = 8
PolicyViolationError = error_for_name("POLICY_VIOLATION")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True, slots=True)
class PendingExpand:
    """Followers joining the ISR, written to ZooKeeper but not yet confirmed. The HW already
    counts them (the maximal ISR is the ISR plus ``joining``): once the write lands, they are
    in the ISR, and a write must never be acknowledged without a member of it."""

    proposed: frozenset[int]
    joining: frozenset[int]

    def maximal_isr(self, isr: frozenset[int]) -> frozenset[int]:
        return isr | self.joining


@dataclass(frozen=True, slots=True)
class PendingShrink:
    """Followers leaving the ISR, written to ZooKeeper but not yet confirmed. Until then they
    still count for the HW (the maximal ISR is the committed one)."""

    proposed: frozenset[int]
    leaving: frozenset[int]

    def maximal_isr(self, isr: frozenset[int]) -> frozenset[int]:
        return isr


PendingIsrChange = PendingExpand | PendingShrink


@dataclass(frozen=True, slots=True)
class RoleChange:
    """What a LeaderAndIsr did to this replica."""

    became_leader: bool
    became_follower: bool
    leader_changed: bool


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        broker_id: int,
        log: Log,
        *,
        is_broker_alive: Callable[[int], bool] = lambda _broker_id: True,
        delayed: DelayedOperations | None = None,
        rules: ReplicationRules = KAFKA_RULES,
    ) -> None:
        self.tp = tp
        self.broker_id = broker_id
        self.log = log
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.leader_epoch_start_offset = -1
        # Followers: the leader epoch of the last fetch response whose HW this replica took (-1:
        # none yet). Below ``leader_epoch`` it has not heard from its current leader: its HW is
        # still the one an earlier epoch gave it (becoming a follower keeps the HW, as Kafka's
        # makeFollower does), and may be above the new leader's until its first fetch.
        self.fetched_leader_epoch = -1
        self.controller_epoch = -1
        self.zk_version = 0
        self.assigned_replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self.pending_isr: PendingIsrChange | None = None
        self.followers: dict[int, FollowerState] = {}
        # Long-polling fetches: each one's future and what it waits for (WAKE_ON_*).
        self._data_waiters: list[tuple[asyncio.Future[None], int]] = []
        # The purgatories of requests waiting on this partition (the replica manager's).
        self.delayed = delayed if delayed is not None else DelayedOperations()
        self.rules = rules
        # Whether a broker is alive (the metadata cache's view): the low watermark ignores
        # followers on dead brokers.
        self._is_broker_alive = is_broker_alive

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (
            f"Partition({self.tp}, {role}, epoch={self.leader_epoch}, isr={sorted(self.isr)}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset})"
        )

    # -- facts ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending_isr is None:
            return self.isr
        return self.pending_isr.maximal_isr(self.isr)

    @property
    def under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.assigned_replicas)

    # -- role changes -----------------------------------------------------------------------

    def make_leader(
        self,
        *,
        leader_epoch: int,
        isr: Iterable[int],
        replicas: Iterable[int],
        zk_version: int,
        controller_epoch: int,
        now_ms: int,
    ) -> RoleChange:
        """Become (or stay) leader with this state from the controller."""
        was_leader = self.is_leader
        new_epoch = leader_epoch != self.leader_epoch
        self.controller_epoch = controller_epoch
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.assigned_replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pending_isr = None
        self.zk_version = zk_version
        if new_epoch or not was_leader:
            self.leader_epoch_start_offset = self.log.log_end_offset
            latest = self.log.epoch_cache.latest_epoch
            if latest is None or leader_epoch > latest:
                # Recorded now, not at the first write, so that OffsetsForLeaderEpoch answers
                # right for followers that ask before anything is produced in this epoch.
                self.log.epoch_cache.assign(leader_epoch, self.leader_epoch_start_offset)
            # Every follower starts unknown; ISR members count as caught up as of now.
            self.followers = {
                r: FollowerState(r, last_caught_up_time_ms=now_ms if r in self.isr else 0)
                for r in self.assigned_replicas
                if r != self.broker_id
            }
        else:
            for r in self.assigned_replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = FollowerState(r)
        self._advance_high_watermark()
        self._wake_data_waiters(WAKE_ON_ANY)
        return RoleChange(not was_leader, False, not was_leader)

    def make_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        isr: Iterable[int],
        replicas: Iterable[int],
        zk_version: int,
        controller_epoch: int,
    ) -> RoleChange:
        """Follow ``leader_id`` (or nobody, -1). Parked acks=all produces fail."""
        was_leader = self.is_leader
        leader_changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.controller_epoch = controller_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.assigned_replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pending_isr = None
        self.zk_version = zk_version
        self.followers = {}
        self.leader_epoch_start_offset = -1
        if was_leader:
            self.fail_waiters(
                NotLeaderOrFollowerError(f"{self.tp}: this broker is no longer the leader")
            )
        return RoleChange(False, was_leader or leader_changed, leader_changed)

    def fail_waiters(self, error: KafkaError) -> None:
        """Every request waiting on this partition answers ``error`` (it stops leading)."""
        self.delayed.fail(self.tp, error)
        self._wake_data_waiters()

    # -- leader: appends, follower fetches, HW ----------------------------------------------

    def append_records_to_leader(
        self, records: Buffer, required_acks: int, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Append as leader; NOT_ENOUGH_REPLICAS for acks=all below min.insync.replicas.
        ``origin`` COORDINATOR for transaction markers (see ``Log.append_as_leader``)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {self.tp} on broker {self.broker_id}"
            )
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.tp}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin)
        hw_moved = self._advance_high_watermark()
        self._wake_data_waiters(WAKE_ON_ANY if hw_moved else WAKE_ON_LOG_END)
        return info

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched at ``fetch_offset``: its LEO is now that; the HW may move. Its
        ``log_start_offset`` (when given) may complete parked DeleteRecords.

        As Kafka's ``updateFollowerFetchState``, per fetch: the HW is computed again only when
        the follower's LEO moved (nothing else it depends on changes at a fetch), and parked
        DeleteRecords are checked again only when the HW or the follower's start moved."""
        state = self.followers.get(replica_id)
        if state is None:
            return
        previous_end, previous_start = state.log_end_offset, state.log_start_offset
        record_follower_fetch(state, fetch_offset, self.log.log_end_offset, now_ms)
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        hw_moved = state.log_end_offset != previous_end and self.maybe_increment_high_watermark()
        if hw_moved or state.log_start_offset != previous_start:
            self.maybe_complete_delete_records()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to what the ISR has (see ``new_leader_high_watermark``); if it moved,
        complete what waited for it (acks=all produces, consumers' fetches). Whether it moved."""
        if not self._advance_high_watermark():
            return False
        self._wake_data_waiters(WAKE_ON_HIGH_WATERMARK)
        return True

    def _advance_high_watermark(self) -> bool:
        """``maybe_increment_high_watermark`` without waking long-polling fetches: the caller
        wakes them, once, for everything that moved."""
        if not self.is_leader:
            return False
        new_hw = new_leader_high_watermark(
            self.log.high_watermark,
            self.log.log_end_offset,
            self.maximal_isr,
            self.broker_id,
            self.followers,
            ignore_followers=self.rules.hw_ignores_followers,
        )
        if not self.log.maybe_increment_high_watermark(new_hw):
            return False
        self.delayed.produce.check_and_complete(self.tp)
        return True

    # -- leader: ListOffsets ----------------------------------------------------------------

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation: FetchIsolation
    ) -> TimestampAndOffset | None:
        """Kafka's ``Partition.fetchOffsetForTimestamp`` (the caller checked leadership): the
        last fetchable offset is the log end (a replica), the HW (read_uncommitted) or the
        LSO (read_committed); LATEST answers it with no timestamp and the leader epoch,
        EARLIEST (and EARLIEST_LOCAL: no tiered storage, KIP-405) the log start and the epoch
        it is in, anything else the log's answer only below the last fetchable offset."""
        log = self.log
        fetchable = (
            log.log_end_offset
            if isolation is FetchIsolation.LOG_END
            else log.last_stable_offset
            if isolation is FetchIsolation.TXN_COMMITTED
            else log.high_watermark
        )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, fetchable, self.leader_epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            epoch = log.epoch_cache.epoch_for_offset(log.log_start_offset)
            return TimestampAndOffset(
                NO_TIMESTAMP, log.log_start_offset, -1 if epoch is None else epoch
            )
        found = log.fetch_offset_by_timestamp(timestamp)
        return found if found is not None and found.offset < fetchable else None

    # -- leader: DeleteRecords and the low watermark ----------------------------------------

    @property
    def low_watermark(self) -> int:
        """Kafka's ``lowWatermarkIfLeader``; NOT_LEADER_OR_FOLLOWER on a follower."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {self.tp} on broker {self.broker_id}"
            )
        return low_watermark(
            self.log.log_start_offset, self.followers.values(), self._is_broker_alive
        )

    def delete_records_on_leader(self, offset: int) -> int:
        """Move the log start offset to ``offset`` (-1: the HW); returns that offset.

        POLICY_VIOLATION when the topic's cleanup.policy lacks ``delete``; OFFSET_OUT_OF_RANGE
        for an offset below 0 or past the HW. An offset at or below the current log start is
        no change (the records are already gone). Segments below the new start go with the
        next retention pass, on every replica.
        """
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {self.tp} on broker {self.broker_id}"
            )
        if not self.log.config.delete:
            raise PolicyViolationError(
                f"Records of partition {self.tp} can not be deleted due to the configured policy"
            )
        requested = self.log.high_watermark if offset == HIGH_WATERMARK_OFFSET else offset
        if requested < 0:
            raise OffsetOutOfRangeError(
                f"The offset {requested} for partition {self.tp} is not valid"
            )
        if self.log.maybe_increment_log_start_offset(requested):
            logger.info("%s: log start offset now %d (DeleteRecords)", self.tp, requested)
            # Long-polling followers answer at once and learn the new start from the reply.
            self._wake_data_waiters()
        self.maybe_complete_delete_records()
        return requested

    def maybe_complete_delete_records(self) -> None:
        """Check the parked DeleteRecords again: the low watermark may have moved (a follower
        fetch, a local start move, a change of live brokers)."""
        if self.is_leader:
            self.delayed.delete_records.check_and_complete(self.tp)

    # -- leader: ISR ------------------------------------------------------------------------

    def isr_to_expand(self) -> PendingExpand | None:
        """The ISR with caught-up followers added, or None if nothing changes."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        joining = {
            r
            for r, state in self.followers.items()
            if r not in self.isr
            and r in self.assigned_replicas
            and (
                can_join_isr(state, self.log.high_watermark, self.leader_epoch_start_offset)
                or (self.rules.isr_admits_lagging_followers and state.log_end_offset >= 0)
            )
        }
        if not joining:
            return None
        return PendingExpand(self.isr | joining, frozenset(joining))

    def isr_to_shrink(self, now_ms: int, lag_time_max_ms: int) -> PendingShrink | None:
        """The ISR without followers stuck or slow for ``replica.lag.time.max.ms``."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = out_of_sync_replicas(
            sorted(self.isr),
            self.broker_id,
            leader_log_end_offset=self.log.log_end_offset,
            followers=self.followers,
            now_ms=now_ms,
            lag_time_max_ms=lag_time_max_ms,
        )
        return PendingShrink(self.isr - out, frozenset(out)) if out else None

    def propose_isr(self, change: PendingIsrChange) -> None:
        """The leader is writing ``change`` to ZooKeeper; until confirmed it is pending."""
        self.pending_isr = change

    def commit_isr(self, isr: frozenset[int], zk_version: int) -> None:
        """ZooKeeper accepted the write: the proposed ISR is now the ISR."""
        logger.info(
            "%s: ISR %s -> %s (zk version %d)", self.tp, sorted(self.isr), sorted(isr), zk_version
        )
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr = None
        self.maybe_increment_high_watermark()

    def abort_isr_change(self) -> None:
        self.pending_isr = None

    # -- fetch long-poll --------------------------------------------------------------------

    def watch_data(self, future: asyncio.Future[None], wake_on: int) -> None:
        """Complete ``future`` (unless done by then) the next time what ``wake_on`` names moves
        here (WAKE_ON_LOG_END, WAKE_ON_HIGH_WATERMARK), or the partition changes in a way every
        fetch must see: a new leader epoch, a new log start, this replica stopping to lead.
        One future may watch many partitions (one fetch)."""
        waiters = self._data_waiters
        if len(waiters) >= _WATCHES_BEFORE_PRUNING:
            waiters = self._data_waiters = [w for w in waiters if not w[0].done()]
        waiters.append((future, wake_on))

    def _wake_data_waiters(self, moved: int = WAKE_ON_ANY) -> None:
        """Wake the fetches waiting for what ``moved`` names (WAKE_ON_*), in the order they
        began to wait; the others wait on."""
        waiters = self._data_waiters
        if not waiters:
            return
        kept: list[tuple[asyncio.Future[None], int]] = []
        for waiter in waiters:
            future = waiter[0]
            if future.done():
                continue
            if waiter[1] & moved:
                # A loop step later, as a done-callback would: the fetch resumes in the order
                # asyncio.wait's waiters did (the simulation's schedules stay as they were).
                future.get_loop().call_soon(_resolve, future)
            else:
                kept.append(waiter)
        self._data_waiters = kept

    def notify_follower_append(self) -> None:
        """A follower's log grew (replication): wake consumers long-polling here."""
        self._wake_data_waiters()
