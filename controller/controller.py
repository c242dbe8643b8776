"""The controller: one broker at a time decides leaders and ISRs and tells the others.

(One module, ~600 lines: the event routing of every kind of event in one place.)

Runs inside every broker, as in Kafka's ZooKeeper mode; the one that wins ``/controller`` is
*active*, the others only watch that znode and campaign when it goes.

Theory of operation
-------------------
1. **Election and fencing** (:mod:`controller.campaign`, :mod:`controller.zk_writer`): the
   winner of ``/controller`` bumps ``/controller_epoch``; that znode's version then guards
   every write of the winner, so a deposed controller that has not noticed yet (a zombie)
   changes nothing, and resigns when a write fails that way.
2. **One event queue** (:mod:`controller.events`): watches, admin calls, controlled shutdowns
   and broker answers are handled one at a time, so no two decisions interleave.
3. **Read, decide, conditionally write** (:mod:`controller.partition_state_machine`): brokers
   change ISRs themselves, so each decision re-reads the partition state znode and writes
   with the version read; on a conflict it reads and decides again (bounded).
4. **Tell the brokers**: the decisions of one event go out as one
   :class:`~controller.channel.RequestBatch` (ordered, retried per broker).

Invariants (also asserted by :func:`controller.election.sanity_check` before each write):
leader ∈ ISR ⊆ assigned replicas; leader epochs only grow (every new leader or ISR decided by
the controller has epoch + 1); without unclean election the ISR is never emptied and only an
ISR member becomes leader; every controller write is fenced by the controller epoch.

Failures: ZooKeeper connection loss is retried (bounded) on every operation; session expiry
makes the controller resign (it campaigns again once the broker hands it a new session with
:meth:`Controller.replace_session`, or when the same client reports a new session); a broker
that does not answer is retried until it is declared dead; an unexpected error while becoming
controller resigns and deletes ``/controller`` so that another election runs.

The parts
---------
:class:`Controller` owns the :class:`~controller.events.ControllerEventManager` (the queue),
the ZooKeeper watchers, and the election (:mod:`controller.campaign`). Winning builds one
term's objects on a fresh :class:`~controller.term.Term` (context, fenced ZooKeeper writer,
channel): the :class:`~controller.partition_state_machine.PartitionStateMachine`, the
:class:`~controller.topic_deletion.TopicDeletionManager`, the leadership handlers, the
cluster-change handlers and the topic admin. Every event is routed to one of them; resigning
drops them all.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from google.protobuf.message import Message

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import (
    Coordination,
    EventType,
    SessionExpiredError,
    SessionState,
    Watcher,
    WatchEvent,
)
from kafkasim.common.errors import KafkaError
from kafkasim.common.rpc import Transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import campaign, zk_data
from kafkasim.controller.active import ActiveController
from kafkasim.controller.api import (
    BrokerNotAvailableError,
    ControllerConfig,
    ControllerMovedError,
    ElectionOutcome,
    ElectionType,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    NewPartitions,
    NewTopic,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    TopicResult,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.channel import ControllerChannel
from kafkasim.controller.context import ControllerContext, ControllerSnapshot, PartitionView
from kafkasim.controller.events import ControllerEvent, ControllerEventManager
from kafkasim.controller.log import ControllerLog, logger
from kafkasim.controller.stats import ControllerStats
from kafkasim.controller.term import Watches
from kafkasim.controller.topic_admin import await_topics
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.controller.zk_writer import UNCLEAN_LEADER_ELECTION_ENABLE, FencedZkWriter
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = [
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "BrokerNotAvailableError",
    "Controller",
    "ControllerConfig",
    "ControllerContext",
    "ControllerMovedError",
    "ControllerSnapshot",
    "ElectionOutcome",
    "ElectionType",
    "InvalidPartitionsError",
    "InvalidRequestError",
    "InvalidTopicError",
    "NewPartitions",
    "NewTopic",
    "NotControllerError",
    "PartitionView",
    "RequestTimedOutError",
    "StaleBrokerEpochError",
    "TopicAlreadyExistsError",
    "TopicResult",
    "UnknownTopicOrPartitionError",
    "logger",
]

_T = TypeVar("_T")

_MOVE_BACKOFF_S = 1.0  # after failing to become controller, before freeing /controller
_CAMPAIGN_ATTEMPTS_MAX = 3  # /controller vanished between a failed campaign and the re-read


class Controller:
    """Kafka's controller for one broker: campaigns, and when active, manages the cluster.

    The broker creates one per process and calls :meth:`start` after registering itself in
    ``/brokers/ids`` (either order works) and :meth:`stop` on shutdown. While this broker is
    the active controller, the broker's request handlers call the admin entry points
    (:meth:`create_topics`, :meth:`delete_topics`, :meth:`create_partitions`,
    :meth:`elect_leaders`, :meth:`controlled_shutdown`; their protobuf forms are translated in
    the broker's request layer, ``node.apis_admin``); on any other broker those raise
    NOT_CONTROLLER. Topic config changes do not come here: any broker writes them
    (``node.topic_config_admin``), as in Kafka.

    ``rng`` draws Kafka's random start index and shift of new topics' replica assignments
    (seed it for the simulation; the default is seeded with the broker id).
    """

    def __init__(
        self,
        broker_id: int,
        coordination: Coordination,
        transport: Transport,
        clock: Clock,
        *,
        config: ControllerConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._config = config or ControllerConfig()
        self._zk = self._retrying(coordination)
        self._transport = transport
        self._clock = clock
        self._rng = rng if rng is not None else random.Random(broker_id)
        self._events = ControllerEventManager(f"controller-{broker_id}", self._process)
        self._active: ActiveController | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._active_controller_id = zk_data.NO_LEADER
        self._session_id = 0
        self._log = ControllerLog(broker_id, lambda: self.epoch)
        self.stats = ControllerStats(clock.monotonic_ms)
        # One watcher object per path, so that re-registering does not stack duplicates.
        self._controller_watcher: Watcher = self._on_controller_watch
        self._watches = Watches(
            broker_change=self._watcher(
                "BrokerChange", lambda a: a.cluster.process_broker_change()
            ),
            topic_change=self._watcher("TopicChange", lambda a: a.cluster.process_topic_change()),
            topic_deletion=self._watcher(
                "TopicDeletion", lambda a: a.deletion.process_deletion_requests()
            ),
            isr_change=self._watcher(
                "IsrChangeNotification", lambda a: a.cluster.process_isr_change_notification()
            ),
            preferred_election=self._watcher(
                "ReplicaLeaderElection", lambda a: a.leadership.process_preferred_election_znode()
            ),
            make_partition_watcher=self._partition_watcher,
        )

    # -- public state -------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """Whether this broker is the active controller (as far as it knows)."""
        return self._active is not None

    @property
    def active_controller_id(self) -> int:
        """The controller as last seen in ``/controller`` (-1: none or unknown)."""
        return self._active_controller_id

    @property
    def epoch(self) -> int:
        """This controller's epoch while active, else -1."""
        return self._active.term.ctx.epoch if self._active is not None else -1

    def snapshot(self) -> ControllerSnapshot:
        """A frozen copy of the controller's view (see :class:`ControllerSnapshot`)."""
        if self._active is None:
            return ControllerSnapshot.inactive(self.broker_id, self._active_controller_id)
        return self._active.term.ctx.snapshot(self.broker_id, self._active_controller_id)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the event loop and campaign; returns once the first campaign was decided."""
        self._events.start()
        self._listen_to_session(self._zk.zk)
        await self._submit("Startup", self._process_startup, requires_active=False)

    async def stop(self, *, clean: bool = True) -> None:
        """Stop handling events and resign; pending admin calls get NOT_CONTROLLER.

        If this broker is the active controller and ``clean``, ``/controller`` is deleted
        (when it is still this session's) so that another broker takes over without waiting
        for the session to close. A crash (``clean=False``, kill -9) writes nothing: the
        znode goes with the session. The Coordination session itself belongs to the broker
        and stays open.
        """
        if not await self._events.stop():
            return
        was_active = self.is_active
        await self._resign()
        if was_active and clean:
            await campaign.delete_own_controller_znode(self._zk, self.broker_id, self._log)
        self._events.notify_changed()

    async def replace_session(self, coordination: Coordination) -> None:
        """Use a new ZooKeeper session (after the old one expired) and campaign again."""

        async def handler() -> None:
            await self._resign()
            self._zk = self._retrying(coordination)
            self._listen_to_session(coordination)
            await self._process_startup()

        await self._submit("RegisterAndReelect", handler, requires_active=False)

    async def wait_idle(self) -> None:
        """Wait until every queued event is handled and every request answered (for tests;
        it does not return while a broker that is still registered does not answer)."""
        while self._events.running:
            await self._events.join()
            channel = self._active.term.channel if self._active is not None else None
            if channel is not None:
                await channel.drain()
            if self._events.idle() and (channel is None or _channel_idle(channel)):
                return

    def _retrying(self, coordination: Coordination) -> RetryingCoordination:
        return RetryingCoordination(
            coordination, self._config.zk_attempts_max, self._config.zk_backoff_max_ms / 1000
        )

    # -- admin entry points -------------------------------------------------------------------
    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Validate and create topics: ``/config/topics/<t>`` then ``/brokers/topics/<t>``.

        One result per topic, in order. With ``timeout_ms`` > 0, waits until every partition
        of each created topic has a live leader, else that topic's result is
        REQUEST_TIMED_OUT (the topic still exists, as in Kafka). Raises NOT_CONTROLLER.
        """
        results = await self._submit(
            "CreateTopics",
            lambda: self._require_active().admin.create_topics(topics, validate_only),
        )
        if timeout_ms > 0 and not validate_only:
            results = await self._await_topics(
                results,
                lambda t: (ctx := self._ctx()) is not None and ctx.has_leaders(t),
                timeout_ms,
            )
        return results

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Mark topics for deletion (``/admin/delete_topics/<t>``); the deletion itself runs
        as events. With ``timeout_ms`` > 0, waits until it completed (else REQUEST_TIMED_OUT).
        Raises NOT_CONTROLLER."""
        results = await self._submit(
            "DeleteTopics", lambda: self._require_active().admin.delete_topics(names)
        )
        if timeout_ms > 0:
            results = await self._await_topics(
                results,
                lambda t: (ctx := self._ctx()) is not None and t not in ctx.assignments,
                timeout_ms,
            )
        return results

    async def create_partitions(
        self,
        requests: Sequence[NewPartitions],
        *,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> list[TopicResult]:
        """Grow topics (existing partitions keep their replicas). With ``timeout_ms`` > 0,
        waits until the new partitions have leaders. Raises NOT_CONTROLLER."""
        results = await self._submit(
            "CreatePartitions",
            lambda: self._require_active().admin.create_partitions(requests, validate_only),
        )
        if timeout_ms > 0 and not validate_only:
            wanted = {r.topic: r.count for r in requests}

            def grown(topic: str) -> bool:
                ctx = self._ctx()
                return (
                    ctx is not None
                    and len(ctx.assignments.get(topic, {})) >= wanted[topic]
                    and ctx.has_leaders(topic)
                )

            results = await self._await_topics(results, grown, timeout_ms)
        return results

    async def _await_topics(
        self, results: list[TopicResult], done: Callable[[str], bool], timeout_ms: int
    ) -> list[TopicResult]:
        return await await_topics(results, done, timeout_ms, lambda: self._events.changed)

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
            "ControlledShutdown",
            lambda: self._require_active().leadership.controlled_shutdown(broker_id, broker_epoch),
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
            "ReplicaLeaderElection",
            lambda: self._require_active().leadership.elect_leaders(election_type, partitions),
        )

    # -- events: queueing, routing, processing ------------------------------------------------

    def _ctx(self) -> ControllerContext | None:
        return self._active.term.ctx if self._active is not None else None

    def _require_active(self) -> ActiveController:
        if self._active is None:
            raise ControllerMovedError(f"broker {self.broker_id} is no longer the controller")
        return self._active

    def _submit(
        self, name: str, handler: Callable[[], Awaitable[_T]], *, requires_active: bool = True
    ) -> Awaitable[_T]:
        return self._events.submit(
            name,
            handler,
            requires_active=requires_active,
            not_running=f"broker {self.broker_id}: controller not running",
        )

    def _route(
        self, name: str, handler: Callable[[ActiveController], Awaitable[None]]
    ) -> ControllerEvent:
        """An event handled by the term's objects (it requires the active controller)."""
        return ControllerEvent(name, lambda: handler(self._require_active()))

    def _watcher(
        self, name: str, handler: Callable[[ActiveController], Awaitable[None]]
    ) -> Watcher:
        def watcher(event: WatchEvent) -> None:
            self._events.put(self._route(name, handler))

        return watcher

    def _partition_watcher(self, topic: str) -> Watcher:
        def watcher(event: WatchEvent) -> None:
            if event.type is not EventType.DELETED:
                self._events.put(
                    self._route(
                        "PartitionModifications",
                        lambda a: a.cluster.process_partition_modifications(topic),
                    )
                )

        return watcher

    def _on_stop_replica_response(
        self, broker_id: int, request: Message, response: Message
    ) -> None:
        assert isinstance(request, pb.StopReplicaRequest)
        assert isinstance(response, pb.StopReplicaResponse)
        self._events.put(
            self._route(
                "TopicDeletionStopReplicaResponseReceived",
                lambda a: a.deletion.on_stop_replica_response(broker_id, request, response),
            )
        )

    async def _rebalance_timer(self) -> None:
        interval_s = self._config.leader_imbalance_check_interval_seconds
        while True:
            await asyncio.sleep(interval_s)
            self._events.put(
                self._route(
                    "AutoPreferredReplicaLeaderElection",
                    lambda a: a.leadership.check_leader_imbalance(),
                )
            )

    async def _process(self, event: ControllerEvent) -> None:
        if event.requires_active and not self.is_active:
            event.fail(
                NotControllerError(
                    f"broker {self.broker_id} is not the controller "
                    f"(the controller is {self._active_controller_id})"
                )
            )
            return
        try:
            result = await event.handler()
        except asyncio.CancelledError:
            event.fail(NotControllerError("controller stopped"))
            raise
        except ControllerMovedError as e:
            self._log.info("controller moved while handling %s: %s; resigning", event.name, e)
            event.fail(NotControllerError(str(e)))
            await self._resign()
            # If /controller still names this session, nobody else can take over: free it
            # (Kafka's triggerControllerMove); the watch then runs a fresh election.
            await campaign.delete_own_controller_znode(self._zk, self.broker_id, self._log)
        except SessionExpiredError as e:
            self._log.warning("ZooKeeper session expired while handling %s; resigning", event.name)
            await self._resign()
            self._active_controller_id = zk_data.NO_LEADER
            event.fail(NotControllerError(str(e)))
        except KafkaError as e:
            event.fail(e)
        except Exception as e:
            self._log.exception("error while handling %s", event.name)
            event.fail(e)
        else:
            event.succeed(result)

    # -- session and election -----------------------------------------------------------------

    def _listen_to_session(self, coordination: Coordination) -> None:
        self._session_id = coordination.session_id

        def listener(state: SessionState) -> None:
            if coordination is not self._zk.zk or not self._events.running:
                return  # an old session, or stopped
            if state is SessionState.EXPIRED:
                self._put_unrouted("Expire", self._process_expire)
            elif state is SessionState.CONNECTED and coordination.session_id != self._session_id:
                self._session_id = coordination.session_id
                self._put_unrouted("RegisterAndReelect", self._process_startup)
            elif state is SessionState.CONNECTED:
                self._put_unrouted("Reconnected", self._process_reconnected)

        coordination.add_session_listener(listener)

    def _put_unrouted(self, name: str, handler: Callable[[], Awaitable[None]]) -> None:
        """An event of the election itself (it does not require the active controller)."""
        self._events.put(ControllerEvent(name, handler, requires_active=False))

    def _on_controller_watch(self, event: WatchEvent) -> None:
        if event.type is EventType.DELETED:
            self._put_unrouted("Reelect", self._process_reelect)
        else:
            self._put_unrouted("ControllerChange", self._process_controller_change)

    async def _process_startup(self) -> None:
        await campaign.ensure_persistent_paths(self._zk)
        await self._refresh_active_controller()
        await self._elect()

    async def _process_expire(self) -> None:
        self._log.warning("ZooKeeper session expired; resigning")
        await self._resign()
        self._active_controller_id = zk_data.NO_LEADER

    async def _process_reelect(self) -> None:
        await self._maybe_resign()
        await self._elect()

    async def _process_controller_change(self) -> None:
        await self._maybe_resign()
        # /controller came and went before the watch was set again: nobody would campaign.
        await self._elect()

    async def _process_reconnected(self) -> None:
        """Same session after a connection loss: the watches were dropped with the
        connection, so every one is set again by re-reading what it watches."""
        await self._maybe_resign()
        if self._active is None:
            await self._elect()
            return
        await self._active.cluster.resync()

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        await self._refresh_active_controller()
        if was_active and self._active_controller_id != self.broker_id:
            self._log.info("the controller moved to broker %d", self._active_controller_id)
            await self._resign()

    async def _refresh_active_controller(self) -> None:
        self._active_controller_id = zk_data.NO_LEADER
        self._active_controller_id = await campaign.read_active_controller(
            self._zk, self._controller_watcher
        )

    async def _elect(self) -> None:
        """Campaign for ``/controller`` unless somebody holds it (Kafka's ``elect``)."""
        won: tuple[int, int] | None = None
        for _ in range(_CAMPAIGN_ATTEMPTS_MAX):
            if self.is_active or self._active_controller_id != zk_data.NO_LEADER:
                return
            won, self._active_controller_id = await campaign.campaign(
                self._zk, self.broker_id, self._clock.time_ms()
            )
            if won is not None:
                break
            if self._active_controller_id != zk_data.NO_LEADER:
                self._log.debug("broker %d is the controller", self._active_controller_id)
        if won is None:
            return
        new_epoch, new_version = won
        self._active_controller_id = self.broker_id
        self._active = active = ActiveController.begin(
            self.broker_id,
            ControllerContext(new_epoch, new_version),
            FencedZkWriter(self._zk, new_epoch, new_version, self._log),
            self._transport,
            config=self._config,
            log=self._log,
            watches=self._watches,
            on_stop_replica_response=self._on_stop_replica_response,
            rng=self._rng,
            stats=self.stats,
        )
        self._log.info("became the controller with epoch %d", new_epoch)
        try:
            await active.cluster.on_controller_failover()
            if self._config.auto_leader_rebalance_enable:
                self._rebalance_task = asyncio.get_running_loop().create_task(
                    self._rebalance_timer(), name=f"controller-{self.broker_id}-rebalance"
                )
        except (ControllerMovedError, SessionExpiredError, asyncio.CancelledError):
            raise
        except Exception:
            self._log.exception("error while becoming the controller; moving the controller")
            await self._resign()
            # Pause before freeing /controller, so that a persistent failure does not spin
            # elections as fast as ZooKeeper answers.
            await asyncio.sleep(_MOVE_BACKOFF_S)
            await campaign.delete_own_controller_znode(self._zk, self.broker_id, self._log)

    async def _resign(self) -> None:
        """Forget the term and stop talking to brokers (Kafka's onControllerResignation)."""
        active = self._active
        if active is None:
            return
        self._log.info("resigning as controller (epoch %d)", active.term.ctx.epoch)
        self._active = None
        self._watches.forget_partitions()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        await active.term.channel.close()


def _channel_idle(channel: ControllerChannel) -> bool:
    return all(channel.queued(b) == 0 for b in channel.brokers)
