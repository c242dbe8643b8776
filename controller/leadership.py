"""Moving leadership on purpose: controlled shutdown, preferred and unclean elections on
request (ElectLeaders and ``/admin/preferred_replica_election``), and the automatic leader
rebalance (``auto.leader.rebalance.enable``).

Each is an event on the controller's queue and uses the partition state machine
(:mod:`controller.partition_states`) to decide and write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kafkasim.common.coordination import NoNodeError, Watcher
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import (
    BrokerNotAvailableError,
    ElectionOutcome,
    ElectionType,
    InvalidRequestError,
    InvalidTopicError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.core import _Event
from kafkasim.controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionResult,
    controlled_shutdown_election,
    leader_imbalance,
    offline_election,
    preferred_election,
)
from kafkasim.controller.partition_states import PartitionStateMachine
from kafkasim.controller.zk_data import LeaderAndIsr
from kafkasim.proto import kafkasim_pb2 as pb


class Leadership(PartitionStateMachine):
    """Controlled shutdown, elections on request and the automatic rebalance."""

    # Made by Controller.__init__ (one watcher object per path).
    _preferred_election_watcher: Watcher

    # -- admin entry points -------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership and ISR membership off ``broker_id`` (Kafka's
        ``doControlledShutdown``); returns the partitions it still leads (retry while any).

        Raises NOT_CONTROLLER, BROKER_NOT_AVAILABLE (not a live broker) or STALE_BROKER_EPOCH
        when ``broker_epoch`` is not the czxid of the broker's registration as the controller
        knows it. Kafka refuses only an older epoch and skips the check for -1 (requests older
        than KIP-380); kafkasim has no such requests and refuses any other epoch, so that
        nobody can shut down a broker without its current epoch (a broker that re-registered
        before the controller saw it is refused until then, and retries).
        """
        return await self._submit(
            "ControlledShutdown", lambda: self._do_controlled_shutdown(broker_id, broker_epoch)
        )

    async def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Sequence[TopicPartition] | None = None,
    ) -> dict[TopicPartition, ElectionOutcome]:
        """Preferred or unclean election for ``partitions`` (None: all). Per partition:
        NONE with the new leader, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
        ELIGIBLE_LEADERS_NOT_AVAILABLE, INVALID_TOPIC_EXCEPTION (being deleted) or
        UNKNOWN_TOPIC_OR_PARTITION. Raises NOT_CONTROLLER."""
        return await self._submit(
            "ReplicaLeaderElection", lambda: self._do_elect_leaders(election_type, partitions)
        )

    async def handle_controlled_shutdown(
        self, request: pb.ControlledShutdownRequest
    ) -> pb.ControlledShutdownResponse:
        try:
            remaining = await self.controlled_shutdown(request.broker_id, request.broker_epoch)
        except KafkaError as e:
            return pb.ControlledShutdownResponse(error_code=e.code)
        return pb.ControlledShutdownResponse(
            remaining_partitions=[
                pb.TopicPartitionId(topic=tp.topic, partition=tp.partition) for tp in remaining
            ]
        )

    async def handle_elect_leaders(
        self, request: pb.ElectLeadersRequest
    ) -> pb.ElectLeadersResponse:
        try:
            election_type = ElectionType(request.election_type)
        except ValueError:
            return pb.ElectLeadersResponse(error_code=InvalidRequestError.code)
        partitions = [TopicPartition(p.topic, p.partition) for p in request.partitions] or None
        try:
            outcomes = await self.elect_leaders(election_type, partitions)
        except KafkaError as e:
            return pb.ElectLeadersResponse(error_code=e.code)
        return pb.ElectLeadersResponse(
            results=[
                pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=o.error_code)
                for tp, o in sorted(outcomes.items())
            ]
        )

    # -- controlled shutdown ------------------------------------------------------------------

    async def _do_controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]:
        ctx = self._require_ctx()
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
                and tp in ctx.partition_states
                and not ctx.is_being_deleted(tp.topic)
            )

        partitions = [tp for tp in ctx.partitions_on_broker(broker_id) if acted_on(tp)]
        led = [tp for tp in partitions if ctx.partition_states[tp].leader == broker_id]
        followed = [tp for tp in partitions if ctx.partition_states[tp].leader != broker_id]
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

        batch = RequestBatch()
        await self._elect_partitions(
            led,
            decide,
            batch,
            lambda tp: [r for r in ctx.replicas(tp) if r in live_or_shutting_down],
            "controlled shutdown election",
        )
        for tp in followed:
            batch.add_stop_replica([broker_id], tp, delete=False)
        await self._remove_replica_from_isr(followed, broker_id, batch)
        self._send(batch)
        remaining = [
            tp
            for tp in ctx.partitions_on_broker(broker_id)
            if acted_on(tp) and ctx.partition_states[tp].leader == broker_id
        ]
        self._log.info(
            "controlled shutdown of broker %d: %d partitions still led by it",
            broker_id,
            len(remaining),
        )
        return remaining

    # -- preferred and unclean elections on request -------------------------------------------

    async def _do_elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, ElectionOutcome]:
        ctx = self._require_ctx()
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
            elif tp not in ctx.partition_states:
                error = (
                    PREFERRED_LEADER_NOT_AVAILABLE
                    if election_type is ElectionType.PREFERRED
                    else ELIGIBLE_LEADERS_NOT_AVAILABLE
                )
                outcomes[tp] = ElectionOutcome(
                    error_for_name(error).code, "The partition has no leader and ISR yet."
                )
            else:
                leader = ctx.partition_states[tp].leader
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
            results = await self._preferred_elections(electable, batch)
        else:
            results = await self._unclean_elections(electable, batch)
        self._send(batch)
        for tp, result in results.items():
            if result.leader_and_isr is not None:
                outcomes[tp] = ElectionOutcome(0, "", result.leader_and_isr.leader)
            else:
                state = ctx.partition_states.get(tp)
                outcomes[tp] = ElectionOutcome(
                    error_for_name(result.error or ELIGIBLE_LEADERS_NOT_AVAILABLE).code,
                    result.reason,
                    state.leader if state is not None else zk_data.NO_LEADER,
                )
        return {tp: outcomes[tp] for tp in wanted}

    async def _preferred_elections(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        ctx = self._require_ctx()
        live = ctx.live_broker_ids()

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            return preferred_election(ctx.replicas(tp), current, live, controller_epoch=ctx.epoch)

        return await self._elect_partitions(
            partitions, decide, batch, ctx.replicas, "preferred replica election"
        )

    async def _unclean_elections(
        self, partitions: Sequence[TopicPartition], batch: RequestBatch
    ) -> dict[TopicPartition, ElectionResult]:
        """ElectLeaders(UNCLEAN), KIP-460: elect for leaderless partitions even outside the
        ISR, whatever the topic config says (the operator asked for it)."""
        ctx = self._require_ctx()
        live = ctx.live_broker_ids()

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> ElectionResult:
            if current.leader in live:
                return ElectionResult(None, error=ELECTION_NOT_NEEDED, reason="leader is live")
            return offline_election(
                ctx.replicas(tp), current, live, unclean_allowed=True, controller_epoch=ctx.epoch
            )

        return await self._elect_partitions(
            partitions,
            decide,
            batch,
            lambda tp: [r for r in ctx.replicas(tp) if r in live],
            "unclean election by request",
        )

    async def _process_preferred_election_znode(self) -> None:
        """``/admin/preferred_replica_election``: elect, then delete the request znode."""
        ctx = self._require_ctx()
        stat = await self._zk.exists(
            zk_data.PREFERRED_REPLICA_ELECTION, self._preferred_election_watcher
        )
        if stat is None:
            return
        try:
            data, _ = await self._zk.get(zk_data.PREFERRED_REPLICA_ELECTION)
            partitions = zk_data.decode_preferred_election(data)
        except NoNodeError:
            return
        except (ValueError, KeyError, TypeError) as e:
            self._log.error("ignoring malformed preferred replica election request: %s", e)
            partitions = []
        electable = [
            tp
            for tp in dict.fromkeys(partitions)
            if tp in ctx.partition_states and not ctx.is_being_deleted(tp.topic)
        ]
        batch = RequestBatch()
        await self._preferred_elections(electable, batch)
        self._send(batch)
        await self._fenced_delete(zk_data.PREFERRED_REPLICA_ELECTION)
        await self._zk.exists(zk_data.PREFERRED_REPLICA_ELECTION, self._preferred_election_watcher)

    # -- automatic leader rebalance -----------------------------------------------------------

    async def _rebalance_timer(self) -> None:
        interval_s = self._config.leader_imbalance_check_interval_seconds
        while True:
            await asyncio.sleep(interval_s)
            self._enqueue(_Event("AutoPreferredReplicaLeaderElection", self._process_rebalance))

    async def _process_rebalance(self) -> None:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``: where more than
        ``leader.imbalance.per.broker.percentage`` of a broker's preferred partitions are led
        elsewhere, give back those whose preferred replica is live and in the ISR."""
        ctx = self._require_ctx()
        tps = [tp for tp in ctx.all_partitions() if not ctx.is_being_deleted(tp.topic)]
        ratios = leader_imbalance(
            {tp: ctx.replicas(tp) for tp in tps},
            {tp: ctx.partition_states[tp].leader for tp in tps if tp in ctx.partition_states},
        )
        live = ctx.live_broker_ids()
        threshold = self._config.leader_imbalance_per_broker_percentage / 100
        candidates = []
        for broker, ratio in ratios.items():
            if ratio <= threshold or broker not in live:
                continue
            for tp in tps:
                state = ctx.partition_states.get(tp)
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
            await self._preferred_elections(candidates, batch)
            self._send(batch)
