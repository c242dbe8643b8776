"""The partition state machine (Kafka's ``PartitionStateMachine``): the state of every
partition, the legal transitions between states, and the leader/ISR changes that move a
partition to Online.

States and the states each may be entered from (Kafka's table):

=====================  =====================================
NewPartition           NonExistentPartition
OnlinePartition        NewPartition, OnlinePartition, OfflinePartition
OfflinePartition       NewPartition, OnlinePartition, OfflinePartition
NonExistentPartition   OfflinePartition
=====================  =====================================

An illegal transition is logged as an error naming the partition, both states and the
target's valid previous states, and that partition is left as it was (as Kafka does).

Every leader/ISR change goes the same way (:meth:`PartitionStateMachine.elect`): read the
state znode, decide with the pure functions of :mod:`controller.election` (checked by
:func:`~controller.election.sanity_check`), write with the version read inside the fenced
multi; on BadVersion (a leader changed the ISR meanwhile) read and decide again, a bounded
number of times. Written states go to the replicas as LeaderAndIsr and to every live broker
as UpdateMetadata, through the event's :class:`~controller.channel.RequestBatch`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING

from kafkasim.common.coordination import BadVersionError, CreateOp, NodeExistsError, NoNodeError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ElectionResult,
    controlled_shutdown_election,
    initial_leader_and_isr,
    offline_election,
    preferred_election,
    remove_replica_from_isr,
    sanity_check,
)
from kafkasim.controller.zk_data import LeaderAndIsr

if TYPE_CHECKING:
    from kafkasim.controller.term import Term

STATE_WRITE_ATTEMPTS_MAX = 10  # re-read/re-decide rounds after BadVersion before giving up

Decide = Callable[[TopicPartition, LeaderAndIsr], Awaitable[ElectionResult]]


class PartitionState(Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


VALID_PREVIOUS_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.OFFLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}


def is_valid_transition(current: PartitionState, target: PartitionState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


class PartitionStateMachine:
    """The partitions' states (kept in the term's context) and their leader/ISR changes."""

    def __init__(self, term: Term) -> None:
        self._term = term
        self._ctx = term.ctx
        self._zk = term.zk
        self._log = term.log

    # -- states and transitions ---------------------------------------------------------------

    def state(self, tp: TopicPartition) -> PartitionState:
        return self._ctx.partition_states.get(tp, PartitionState.NON_EXISTENT)

    def transition(
        self, partitions: Iterable[TopicPartition], target: PartitionState
    ) -> list[TopicPartition]:
        """Move the partitions whose current state allows it to ``target``; the others are
        logged as errors and left as they are. Returns the partitions moved."""
        moved: list[TopicPartition] = []
        for tp in partitions:
            current = self.state(tp)
            if not is_valid_transition(current, target):
                self._log.error(
                    "invalid partition state transition of %s from %s to %s: valid previous "
                    "states are %s",
                    tp,
                    current.value,
                    target.value,
                    sorted(s.value for s in VALID_PREVIOUS_STATES[target]),
                )
                continue
            self._ctx.partition_states[tp] = target
            moved.append(tp)
        return moved

    def add_new(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions just loaded into the context: NewPartition."""
        self.transition(partitions, PartitionState.NEW)

    def initialize_states(self) -> None:
        """After a failover (Kafka's ``initializePartitionState``): a partition with a state
        znode is Online if its leader is live, else Offline; one without stays New."""
        ctx = self._ctx
        live = ctx.live_or_shutting_down_ids()
        for tp, state in ctx.leadership.items():
            target = PartitionState.ONLINE if state.leader in live else PartitionState.OFFLINE
            self.transition([tp], target)

    def _set_from_leader(self, tp: TopicPartition, state: LeaderAndIsr) -> None:
        live = self._ctx.live_or_shutting_down_ids()
        target = PartitionState.ONLINE if state.leader in live else PartitionState.OFFLINE
        self.transition([tp], target)

    # -- the leader/ISR change loop -----------------------------------------------------------

    async def elect(
        self,
        partitions: Iterable[TopicPartition],
        decide: Decide,
        batch: RequestBatch,
        recipients: Callable[[TopicPartition], Iterable[int]],
        strategy: str,
    ) -> dict[TopicPartition, ElectionResult]:
        """Read each state znode, ``decide``, write conditionally; re-decide on BadVersion.

        Every written state goes to ``recipients(tp)`` as LeaderAndIsr and to every live
        broker as UpdateMetadata (through ``batch``); the partition becomes Online (Offline if
        the written state has no leader).
        """
        ctx = self._ctx
        started_ms = self._term.stats.now_ms()
        results: dict[TopicPartition, ElectionResult] = {}
        remaining = sorted(set(partitions))
        for _ in range(STATE_WRITE_ATTEMPTS_MAX):
            retry: list[TopicPartition] = []
            for tp in remaining:
                current = await self._zk.read_partition_state(tp)
                if current is None:
                    results[tp] = ElectionResult(
                        None, error=ELIGIBLE_LEADERS_NOT_AVAILABLE, reason="no state znode"
                    )
                    continue
                ctx.leadership[tp] = current
                result = await decide(tp, current)
                proposed = result.leader_and_isr
                if proposed is None:
                    results[tp] = result
                    continue
                sanity_check(tp, proposed, ctx.replicas(tp))
                if proposed.leader_epoch <= current.leader_epoch:
                    raise AssertionError(f"{tp}: leader epoch would not grow: {proposed}")
                try:
                    written = await self._zk.write_partition_state(tp, proposed)
                except BadVersionError:
                    retry.append(tp)
                    continue
                except NoNodeError:
                    results[tp] = ElectionResult(
                        None, error=ELIGIBLE_LEADERS_NOT_AVAILABLE, reason="state znode deleted"
                    )
                    continue
                ctx.leadership[tp] = written
                self._set_from_leader(tp, written)
                results[tp] = replace(result, leader_and_isr=written)
                self._log_state_change(tp, current, written, strategy, result.unclean)
                self._term.add_leader_and_isr(batch, recipients(tp), tp, written)
            remaining = retry
            if not remaining:
                break
        for tp in remaining:
            self._log.error(
                "%s: gave up %s after %d conflicting writes",
                tp,
                strategy,
                STATE_WRITE_ATTEMPTS_MAX,
            )
            results[tp] = ElectionResult(
                None, error=ELIGIBLE_LEADERS_NOT_AVAILABLE, reason="conflicting state writes"
            )
        elected = [r for r in results.values() if r.leader_and_isr is not None]
        self._term.stats.record(started_ms, len(elected), sum(1 for r in elected if r.unclean))
        return results

    def _log_state_change(
        self,
        tp: TopicPartition,
        old: LeaderAndIsr,
        new: LeaderAndIsr,
        strategy: str,
        unclean: bool,
    ) -> None:
        if unclean:
            self._log.warning(
                "UNCLEAN leader election for partition %s: broker %d was not in the ISR %s and "
                "is now leader (epoch %d) because unclean.leader.election.enable is true; "
                "records acknowledged by the previous leader may be LOST",
                tp,
                new.leader,
                list(old.isr),
                new.leader_epoch,
            )
            return
        self._log.info(
            "%s: %s: leader %d -> %d, ISR %s -> %s, leader epoch %d -> %d",
            tp,
            strategy,
            old.leader,
            new.leader,
            list(old.isr),
            list(new.isr),
            old.leader_epoch,
            new.leader_epoch,
        )

    def _live_replicas(self, live: Collection[int]) -> Callable[[TopicPartition], list[int]]:
        return lambda tp: [r for r in self._ctx.replicas(tp) if r in live]

    # -- to OnlinePartition -------------------------------------------------------------------

    async def trigger_online_partition_state_change(self, batch: RequestBatch) -> None:
        """Initialize new partitions and elect leaders for those whose leader is not live
        (Kafka's ``triggerOnlinePartitionStateChange``). Topics being deleted are skipped."""
        ctx = self._ctx
        new = [
            tp
            for tp in ctx.all_partitions()
            if tp not in ctx.leadership and not ctx.is_being_deleted(tp.topic)
        ]
        await self.initialize(new, batch)
        live = ctx.live_broker_ids()
        offline = [
            tp
            for tp, state in sorted(ctx.leadership.items())
            if state.leader not in live and not ctx.is_being_deleted(tp.topic)
        ]
        if offline:
            await self.elect_offline(offline, batch)

    async def on_new_partitions(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> None:
        """Kafka's ``onNewPartitionCreation``: initialize; a state that already existed with a
        dead leader gets an offline election."""
        ctx = self._ctx
        await self.initialize(partitions, batch)
        live = ctx.live_broker_ids()
        offline = [
            tp
            for tp in partitions
            if tp in ctx.leadership and ctx.leadership[tp].leader not in live
        ]
        if offline:
            await self.elect_offline(offline, batch)

    async def initialize(self, partitions: Sequence[TopicPartition], batch: RequestBatch) -> None:
        """NewPartition to OnlinePartition: create the state znodes; the live replicas form
        the ISR and the first of them leads, epoch 0; LeaderAndIsr(is_new) goes to them. A
        partition none of whose replicas is live stays New."""
        ctx = self._ctx
        live = ctx.live_broker_ids()
        prepared: set[str] = set()
        for tp in sorted(partitions):
            if not is_valid_transition(self.state(tp), PartitionState.ONLINE):
                self.transition([tp], PartitionState.ONLINE)  # logs the illegal transition
                continue
            replicas = ctx.replicas(tp)
            state = initial_leader_and_isr(replicas, live, ctx.epoch)
            if state is None:
                self._log.warning(
                    "partition %s stays new: no assigned replica of %s is alive",
                    tp,
                    list(replicas),
                )
                continue
            if tp.topic not in prepared:
                prepared.add(tp.topic)
                try:
                    await self._zk.fenced([CreateOp(zk_data.partitions_path(tp.topic))])
                except NodeExistsError:
                    pass
                except NoNodeError:
                    continue  # the topic went away meanwhile
            encoded = zk_data.encode_partition_state(state)
            state_path = zk_data.partition_state_path(tp)
            try:
                try:
                    await self._zk.fenced(
                        [CreateOp(zk_data.partition_path(tp)), CreateOp(state_path, encoded)]
                    )
                except NodeExistsError:
                    await self._zk.fenced([CreateOp(state_path, encoded)])
            except NodeExistsError:
                # Written before (a controller failed over mid-creation): adopt it.
                existing = await self._zk.read_partition_state(tp)
                if existing is not None:
                    ctx.leadership[tp] = existing
                    self._set_from_leader(tp, existing)
                continue
            except NoNodeError:
                continue
            ctx.leadership[tp] = state
            self.transition([tp], PartitionState.ONLINE)
            self._log.info(
                "%s: new partition: leader %d, ISR %s", tp, state.leader, list(state.isr)
            )
            self._term.add_leader_and_isr(batch, state.isr, tp, state, is_new=True)

    async def elect_offline(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        """Offline partitions (leader not live) to Online: a live ISR member leads, or, where
        the topic allows unclean election, any live replica. Those that cannot stay Offline."""
        ctx = self._ctx
        live = ctx.live_broker_ids()
        self.transition(partitions, PartitionState.OFFLINE)
        default = self._term.config.unclean_leader_election_enable

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            if current.leader in live:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="leader is live")
            replicas = ctx.replicas(tp)
            result = offline_election(
                replicas, current, live, unclean_allowed=False, controller_epoch=ctx.epoch
            )
            if (
                not result.elected
                and any(r in live for r in replicas)
                and await self._zk.unclean_allowed(tp.topic, default)
            ):
                result = offline_election(
                    replicas, current, live, unclean_allowed=True, controller_epoch=ctx.epoch
                )
            return result

        results = await self.elect(
            partitions, decide, batch, self._live_replicas(live), "offline partition election"
        )
        for tp, result in sorted(results.items()):
            if result.error == ELECTION_NOT_NEEDED:
                self._set_from_leader(tp, ctx.leadership[tp])
            elif not result.elected:
                self._log.warning(
                    "partition %s stays offline: %s", tp, result.reason or result.error
                )
        return results

    async def elect_preferred(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        """Give leadership back to the preferred (first) replica where it is live and in the
        ISR (Kafka's ``PreferredReplicaPartitionLeaderElectionStrategy``)."""
        ctx = self._ctx
        live = ctx.live_broker_ids()

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            return preferred_election(ctx.replicas(tp), current, live, controller_epoch=ctx.epoch)

        return await self.elect(
            partitions, decide, batch, ctx.replicas, "preferred replica election"
        )

    async def elect_unclean(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        """ElectLeaders(UNCLEAN), KIP-460: elect for leaderless partitions even outside the
        ISR, whatever the topic config says (the operator asked for it)."""
        ctx = self._ctx
        live = ctx.live_broker_ids()

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            if current.leader in live:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="leader is live")
            return offline_election(
                ctx.replicas(tp), current, live, unclean_allowed=True, controller_epoch=ctx.epoch
            )

        return await self.elect(
            partitions, decide, batch, self._live_replicas(live), "unclean election by request"
        )

    async def elect_for_controlled_shutdown(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        """Move leadership off the brokers shutting down, to a live ISR member (Kafka's
        ``ControlledShutdownPartitionLeaderElectionStrategy``)."""
        ctx = self._ctx
        live_or_shutting_down = ctx.live_or_shutting_down_ids()
        shutting_down = set(ctx.shutting_down)

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            if current.leader not in shutting_down:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="leader moved")
            return controlled_shutdown_election(
                ctx.replicas(tp),
                current,
                live_or_shutting_down,
                shutting_down,
                controller_epoch=ctx.epoch,
            )

        return await self.elect(
            partitions,
            decide,
            batch,
            self._live_replicas(live_or_shutting_down),
            "controlled shutdown election",
        )

    # -- replicas going offline ---------------------------------------------------------------

    async def remove_replica_from_isr(
        self, partitions: Sequence[TopicPartition], replica: int, batch: RequestBatch
    ) -> None:
        """Replica ``replica`` went offline: drop it from these partitions' ISRs (retaining a
        last member) and from leadership (Kafka's OfflineReplica transition)."""
        ctx = self._ctx

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            new = remove_replica_from_isr(current, replica, controller_epoch=ctx.epoch)
            if new is None:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="not in ISR")
            if len(current.isr) == 1 and replica in current.isr:
                self._log.info(
                    "%s: retaining last ISR member %d (leader now %d)", tp, replica, new.leader
                )
            return ElectionResult(new)

        await self.elect(
            partitions,
            decide,
            batch,
            lambda tp: [r for r in ctx.replicas(tp) if r != replica],
            f"removal of replica {replica} from ISR",
        )

    async def offline_replicas_leave_isr(self, dead: Sequence[int], batch: RequestBatch) -> None:
        ctx = self._ctx
        for b in dead:
            partitions = [
                tp
                for tp in ctx.partitions_on_broker(b)
                if tp in ctx.leadership and not ctx.is_being_deleted(tp.topic)
            ]
            await self.remove_replica_from_isr(partitions, b, batch)

    # -- deletion -----------------------------------------------------------------------------

    def to_non_existent(self, partitions: Sequence[TopicPartition]) -> None:
        """A topic's deletion starts: its partitions go Offline, then NonExistent."""
        self.transition(
            self.transition(partitions, PartitionState.OFFLINE), PartitionState.NON_EXISTENT
        )
