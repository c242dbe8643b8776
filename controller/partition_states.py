"""Partition and replica state changes (Kafka's ``PartitionStateMachine`` and
``ReplicaStateMachine``): initializing new partitions, electing leaders for offline ones,
taking offline replicas out of ISRs.

Every change goes the same way (:meth:`PartitionStateMachine._elect_partitions`): read the
state znode, decide with the pure functions of :mod:`controller.election` (checked by
:func:`~controller.election.sanity_check`), write with the version read inside the fenced
multi; on BadVersion (a leader changed the ISR meanwhile) read and decide again, a bounded
number of times. Written states go to the replicas as LeaderAndIsr and to every live broker
as UpdateMetadata, through the event's :class:`~controller.channel.RequestBatch`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace

from kafkasim.common.coordination import BadVersionError, CreateOp, NodeExistsError, NoNodeError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.core import STATE_WRITE_ATTEMPTS_MAX, ControllerCore
from kafkasim.controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ElectionResult,
    initial_leader_and_isr,
    offline_election,
    remove_replica_from_isr,
    sanity_check,
)
from kafkasim.controller.zk_data import LeaderAndIsr


class PartitionStateMachine(ControllerCore):
    """Leader and ISR changes of partitions, decided and written one event at a time."""

    async def _elect_partitions(
        self,
        partitions: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, LeaderAndIsr], Awaitable[ElectionResult]],
        batch: RequestBatch,
        recipients: Callable[[TopicPartition], Iterable[int]],
        strategy: str,
    ) -> dict[TopicPartition, ElectionResult]:
        """Read each state znode, ``decide``, write conditionally; re-decide on BadVersion.

        Every written state goes to ``recipients(tp)`` as LeaderAndIsr and to every live
        broker as UpdateMetadata (through ``batch``).
        """
        ctx = self._require_ctx()
        results: dict[TopicPartition, ElectionResult] = {}
        remaining = sorted(set(partitions))
        for _ in range(STATE_WRITE_ATTEMPTS_MAX):
            retry: list[TopicPartition] = []
            for tp in remaining:
                current = await self._read_partition_state(tp)
                if current is None:
                    results[tp] = ElectionResult(
                        None, error=ELIGIBLE_LEADERS_NOT_AVAILABLE, reason="no state znode"
                    )
                    continue
                ctx.partition_states[tp] = current
                result = await decide(tp, current)
                proposed = result.leader_and_isr
                if proposed is None:
                    results[tp] = result
                    continue
                sanity_check(tp, proposed, ctx.replicas(tp))
                if proposed.leader_epoch <= current.leader_epoch:
                    raise AssertionError(f"{tp}: leader epoch would not grow: {proposed}")
                try:
                    written = await self._write_partition_state(tp, proposed)
                except BadVersionError:
                    retry.append(tp)
                    continue
                except NoNodeError:
                    results[tp] = ElectionResult(
                        None, error=ELIGIBLE_LEADERS_NOT_AVAILABLE, reason="state znode deleted"
                    )
                    continue
                results[tp] = replace(result, leader_and_isr=written)
                self._log_state_change(tp, current, written, strategy, result.unclean)
                self._add_leader_and_isr(batch, recipients(tp), tp, written)
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

    async def _trigger_online_partition_state_change(self, batch: RequestBatch) -> None:
        """Initialize new partitions and elect leaders for those whose leader is not live
        (Kafka's ``triggerOnlinePartitionStateChange``). Topics being deleted are skipped."""
        ctx = self._require_ctx()
        new = [
            tp
            for tp in ctx.all_partitions()
            if tp not in ctx.partition_states and not ctx.is_being_deleted(tp.topic)
        ]
        await self._initialize_partitions(new, batch)
        live = ctx.live_broker_ids()
        offline = [
            tp
            for tp, state in sorted(ctx.partition_states.items())
            if state.leader not in live and not ctx.is_being_deleted(tp.topic)
        ]
        if offline:
            await self._offline_elections(offline, batch)

    async def _offline_elections(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        ctx = self._require_ctx()
        live = ctx.live_broker_ids()

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
                and await self._unclean_allowed(tp.topic)
            ):
                result = offline_election(
                    replicas, current, live, unclean_allowed=True, controller_epoch=ctx.epoch
                )
            return result

        results = await self._elect_partitions(
            partitions,
            decide,
            batch,
            lambda tp: [r for r in ctx.replicas(tp) if r in live],
            "offline partition election",
        )
        for tp, result in sorted(results.items()):
            if not result.elected and result.error != ELECTION_NOT_NEEDED:
                self._log.warning(
                    "partition %s stays offline: %s", tp, result.reason or result.error
                )
        return results

    async def _initialize_partitions(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> None:
        """Create the state znodes of new partitions: the live replicas form the ISR and the
        first of them leads, epoch 0; LeaderAndIsr(is_new) goes to them."""
        ctx = self._require_ctx()
        live = ctx.live_broker_ids()
        prepared: set[str] = set()
        for tp in sorted(partitions):
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
                    await self._fenced([CreateOp(zk_data.partitions_path(tp.topic))])
                except NodeExistsError:
                    pass
                except NoNodeError:
                    continue  # the topic went away meanwhile
            encoded = zk_data.encode_partition_state(state)
            state_path = zk_data.partition_state_path(tp)
            try:
                try:
                    await self._fenced(
                        [
                            CreateOp(zk_data.partition_path(tp)),
                            CreateOp(state_path, encoded),
                        ]
                    )
                except NodeExistsError:
                    await self._fenced([CreateOp(state_path, encoded)])
            except NodeExistsError:
                # Written before (a controller failed over mid-creation): adopt it.
                existing = await self._read_partition_state(tp)
                if existing is not None:
                    ctx.partition_states[tp] = existing
                continue
            except NoNodeError:
                continue
            ctx.partition_states[tp] = state
            self._log.info(
                "%s: new partition: leader %d, ISR %s", tp, state.leader, list(state.isr)
            )
            self._add_leader_and_isr(batch, state.isr, tp, state, is_new=True)

    async def _on_new_partitions(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> None:
        """Kafka's ``onNewPartitionCreation``: initialize; a state that already existed with a
        dead leader gets an offline election."""
        ctx = self._require_ctx()
        await self._initialize_partitions(partitions, batch)
        live = ctx.live_broker_ids()
        offline = [
            tp
            for tp in partitions
            if tp in ctx.partition_states and ctx.partition_states[tp].leader not in live
        ]
        if offline:
            await self._offline_elections(offline, batch)

    async def _remove_replica_from_isr(
        self, partitions: Sequence[TopicPartition], replica: int, batch: RequestBatch
    ) -> None:
        """Replica ``replica`` went offline: drop it from these partitions' ISRs (retaining a
        last member) and from leadership (Kafka's OfflineReplica transition)."""
        ctx = self._require_ctx()

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            new = remove_replica_from_isr(current, replica, controller_epoch=ctx.epoch)
            if new is None:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="not in ISR")
            if len(current.isr) == 1 and replica in current.isr:
                self._log.info(
                    "%s: retaining last ISR member %d (leader now %d)", tp, replica, new.leader
                )
            return ElectionResult(new)

        await self._elect_partitions(
            partitions,
            decide,
            batch,
            lambda tp: [r for r in ctx.replicas(tp) if r != replica],
            f"removal of replica {replica} from ISR",
        )

    async def _offline_replicas_leave_isr(self, dead: Sequence[int], batch: RequestBatch) -> None:
        ctx = self._require_ctx()
        for b in dead:
            partitions = [
                tp
                for tp in ctx.partitions_on_broker(b)
                if tp in ctx.partition_states and not ctx.is_being_deleted(tp.topic)
            ]
            await self._remove_replica_from_isr(partitions, b, batch)
