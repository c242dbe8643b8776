"""Moving leadership on purpose: controlled shutdown, preferred and unclean elections on
request (ElectLeaders and ``/admin/preferred_replica_election``), and the automatic leader
rebalance (``auto.leader.rebalance.enable``), as Kafka's controller does them.

Each runs as one event of the controller's queue; the elections themselves are the partition
state machine's (:class:`~controller.partition_state_machine.PartitionStateMachine`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kafkasim.common.coordination import NoNodeError
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import (
    BrokerNotAvailableError,
    ElectionOutcome,
    ElectionType,
    InvalidTopicError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_LEADER_NOT_AVAILABLE,
    leader_imbalance,
)
from kafkasim.controller.partition_state_machine import PartitionStateMachine
from kafkasim.controller.term import Term


class Leadership:
    """Controlled shutdown, elections on request and the automatic rebalance, for one term."""

    def __init__(self, term: Term, partitions: PartitionStateMachine) -> None:
        self._term = term
        self._ctx = term.ctx
        self._zk = term.zk
        self._log = term.log
        self._partitions = partitions

    # -- controlled shutdown ------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Kafka's ``doControlledShutdown``: move leadership off ``broker_id``, stop its
        follower replicas and take them out of the ISRs; the partitions it still leads."""
        ctx = self._ctx
        info = ctx.live_brokers.get(broker_id)
        if info is None:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        if broker_epoch != info.epoch:
            raise StaleBrokerEpochError(
                f"Received controlled shutdown request from "
                f"{'an old' if broker_epoch < info.epoch else 'a mismatched'} broker epoch "
                f"{broker_epoch} for broker {broker_id}. Current broker epoch is {info.epoch}."
            )
        self._log.info("shutting down broker %d", broker_id)
        ctx.shutting_down.add(broker_id)

        def acted_on(tp: TopicPartition) -> bool:
            return (
                len(ctx.replicas(tp)) > 1
                and tp in ctx.leadership
                and not ctx.is_being_deleted(tp.topic)
            )

        partitions = [tp for tp in ctx.partitions_on_broker(broker_id) if acted_on(tp)]
        led = [tp for tp in partitions if ctx.leadership[tp].leader == broker_id]
        followed = [tp for tp in partitions if ctx.leadership[tp].leader != broker_id]
        batch = RequestBatch()
        await self._partitions.elect_for_controlled_shutdown(led, batch)
        for tp in followed:
            batch.add_stop_replica([broker_id], tp, delete=False)
        await self._partitions.remove_replica_from_isr(followed, broker_id, batch)
        self._term.send(batch)
        remaining = [
            tp
            for tp in ctx.partitions_on_broker(broker_id)
            if acted_on(tp) and ctx.leadership[tp].leader == broker_id
        ]
        self._log.info(
            "controlled shutdown of broker %d: %d partitions still led by it",
            broker_id,
            len(remaining),
        )
        return remaining

    # -- preferred and unclean elections on request -------------------------------------------

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, ElectionOutcome]:
        ctx = self._ctx
        wanted = ctx.all_partitions() if partitions is None else list(dict.fromkeys(partitions))
        outcomes: dict[TopicPartition, ElectionOutcome] = {}
        electable: list[TopicPartition] = []
        live = ctx.live_broker_ids()
        for tp in wanted:
            if not ctx.replicas(tp):
                outcomes[tp] = ElectionOutcome(
                    UnknownTopicOrPartitionError.code, "The partition does not exist."
                )
            elif ctx.is_being_deleted(tp.topic):
                outcomes[tp] = ElectionOutcome(InvalidTopicError.code, "The topic is being deleted")
            elif tp not in ctx.leadership:
                error = (
                    PREFERRED_LEADER_NOT_AVAILABLE
                    if election_type is ElectionType.PREFERRED
                    else ELIGIBLE_LEADERS_NOT_AVAILABLE
                )
                outcomes[tp] = ElectionOutcome(
                    error_for_name(error).code, "The partition has no leader and ISR yet."
                )
            else:
                leader = ctx.leadership[tp].leader
                needed = (
                    leader != ctx.replicas(tp)[0]
                    if election_type is ElectionType.PREFERRED
                    else leader not in live
                )
                if needed:
                    electable.append(tp)
                else:
                    outcomes[tp] = ElectionOutcome(
                        error_for_name(ELECTION_NOT_NEEDED).code, "", leader
                    )
        batch = RequestBatch()
        if election_type is ElectionType.PREFERRED:
            results = await self._partitions.elect_preferred(electable, batch)
        else:
            results = await self._partitions.elect_unclean(electable, batch)
        self._term.send(batch)
        for tp, result in results.items():
            if result.leader_and_isr is not None:
                outcomes[tp] = ElectionOutcome(0, "", result.leader_and_isr.leader)
            else:
                state = ctx.leadership.get(tp)
                outcomes[tp] = ElectionOutcome(
                    error_for_name(result.error or ELIGIBLE_LEADERS_NOT_AVAILABLE).code,
                    result.reason,
                    state.leader if state is not None else zk_data.NO_LEADER,
                )
        return {tp: outcomes[tp] for tp in wanted}

    async def process_preferred_election_znode(self) -> None:
        """``/admin/preferred_replica_election``: elect, then delete the request znode."""
        ctx = self._ctx
        stat = await self._zk.zk.exists(
            zk_data.PREFERRED_REPLICA_ELECTION, self._term.watches.preferred_election
        )
        if stat is None:
            return
        try:
            data, _ = await self._zk.zk.get(zk_data.PREFERRED_REPLICA_ELECTION)
            partitions = zk_data.decode_preferred_election(data)
        except NoNodeError:
            return
        except (ValueError, KeyError, TypeError) as e:
            self._log.error("ignoring malformed preferred replica election request: %s", e)
            partitions = []
        electable = [
            tp
            for tp in dict.fromkeys(partitions)
            if tp in ctx.leadership and not ctx.is_being_deleted(tp.topic)
        ]
        batch = RequestBatch()
        await self._partitions.elect_preferred(electable, batch)
        self._term.send(batch)
        await self._zk.fenced_delete(zk_data.PREFERRED_REPLICA_ELECTION)
        await self._zk.zk.exists(
            zk_data.PREFERRED_REPLICA_ELECTION, self._term.watches.preferred_election
        )

    # -- automatic leader rebalance -----------------------------------------------------------

    async def check_leader_imbalance(self) -> None:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``: where more than
        ``leader.imbalance.per.broker.percentage`` of a broker's preferred partitions are led
        elsewhere, give back those whose preferred replica is live and in the ISR."""
        ctx = self._ctx
        tps = [tp for tp in ctx.all_partitions() if not ctx.is_being_deleted(tp.topic)]
        ratios = leader_imbalance(
            {tp: ctx.replicas(tp) for tp in tps},
            {tp: ctx.leadership[tp].leader for tp in tps if tp in ctx.leadership},
        )
        live = ctx.live_broker_ids()
        threshold = self._term.config.leader_imbalance_per_broker_percentage / 100
        candidates = []
        for broker, ratio in ratios.items():
            if ratio <= threshold or broker not in live:
                continue
            for tp in tps:
                state = ctx.leadership.get(tp)
                if (
                    ctx.replicas(tp)[0] == broker
                    and state is not None
                    and state.leader != broker
                    and broker in state.isr
                ):
                    candidates.append(tp)
        if candidates:
            self._log.info("leader imbalance: preferred replica election for %s", candidates)
            batch = RequestBatch()
            await self._partitions.elect_preferred(candidates, batch)
            self._term.send(batch)
