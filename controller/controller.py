"""The controller: one broker at a time decides leaders and ISRs and tells the others.

Runs inside every broker, as in Kafka's ZooKeeper mode; the one that wins ``/controller`` is
*active*, the others only watch that znode and campaign when it goes.

Theory of operation
-------------------
1. **Election and fencing.** A broker campaigns by creating the ephemeral ``/controller`` and
   incrementing ``/controller_epoch`` in one ZooKeeper ``multi`` (creating the epoch znode
   with 0 first if absent, so the first controller has epoch 1). The epoch znode's *version*
   after that write is the fence: every later write of the active controller is a ``multi``
   that starts with ``CheckOp("/controller_epoch", version)``. A deposed controller that has
   not noticed yet (a zombie) therefore cannot change anything; when one of its writes fails
   that way, it resigns. Brokers drop requests carrying an older ``controller_epoch``.
2. **One event queue.** ZooKeeper watches, admin calls, controlled shutdowns and broker
   answers become events, handled one at a time by one asyncio task (Kafka's
   ``ControllerEventManager``). No two decisions interleave, so the in-memory
   :class:`ControllerContext` is only ever changed by the event being handled.
3. **Read, decide, conditionally write.** Brokers change ISRs themselves (version-checked
   writes), so before any decision the controller re-reads the partition state znode, decides
   with the pure functions of :mod:`controller.election`, and writes with the version it read
   (``SetOp(path, data, zk_version)``) inside the fenced multi. ``BadVersionError``: somebody
   wrote meanwhile; re-read and decide again (bounded attempts, then the partition is reported
   as failed and logged). A partition state znode naming a newer controller epoch means this
   controller is a zombie: resign.
4. **Tell the brokers.** Decisions of one event are collected in a
   :class:`~controller.channel.RequestBatch` and sent through the
   :class:`~controller.channel.ControllerChannel` (ordered, retried per broker).

Invariants (also asserted by :func:`controller.election.sanity_check` before each write):
leader ∈ ISR ⊆ assigned replicas; leader epochs only grow (every new leader or ISR decided by
the controller has epoch + 1); without unclean election the ISR is never emptied and only an
ISR member becomes leader; every controller write is fenced by the controller epoch.

Failures: ZooKeeper connection loss is retried (bounded) on every operation; session expiry
makes the controller resign (it campaigns again once the broker hands it a new session with
:meth:`Controller.replace_session`, or when the same client reports a new session); a broker
that does not answer is retried until it is declared dead; an unexpected error while becoming
controller resigns and deletes ``/controller`` so that another election runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from types import MappingProxyType
from typing import Any, TypeVar

from google.protobuf.message import Message
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from common.clock import Clock
from common.config import Config
from common.coordination import (
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    Coordination,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
)
from common.errors import KafkaError, KafkasimError, error_for_name
from common.rpc import Transport
from common.types import TopicPartition, validate_topic_name
from controller import zk_data
from controller.assignment import add_partitions, assign_new_topic, validate_manual_assignment
from controller.channel import ControllerChannel, RequestBatch, partition_state
from controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionResult,
    controlled_shutdown_election,
    initial_leader_and_isr,
    leader_imbalance,
    offline_election,
    preferred_election,
    remove_replica_from_isr,
    sanity_check,
)
from controller.zk_data import BrokerInfo, LeaderAndIsr
from proto import kafkasim_pb2 as pb
from storage.config import LOG_CONFIG_DEF

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

NotControllerError = error_for_name("NOT_CONTROLLER")
StaleBrokerEpochError = error_for_name("STALE_BROKER_EPOCH")
BrokerNotAvailableError = error_for_name("BROKER_NOT_AVAILABLE")
TopicAlreadyExistsError = error_for_name("TOPIC_ALREADY_EXISTS")
InvalidTopicError = error_for_name("INVALID_TOPIC_EXCEPTION")
InvalidRequestError = error_for_name("INVALID_REQUEST")
InvalidPartitionsError = error_for_name("INVALID_PARTITIONS")
UnknownTopicOrPartitionError = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
RequestTimedOutError = error_for_name("REQUEST_TIMED_OUT")

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
_STATE_WRITE_ATTEMPTS_MAX = 10  # re-read/re-decide rounds after BadVersion before giving up
_TOPIC_DELETE_ATTEMPTS_MAX = 5
_MOVE_BACKOFF_S = 1.0  # after failing to become controller, before freeing /controller
_CAMPAIGN_ATTEMPTS_MAX = 3  # /controller vanished between a failed campaign and the re-read


class ControllerMovedError(KafkasimError):
    """A newer controller exists (the epoch znode moved, or a state carries a newer epoch).

    Raised inside event handling; the controller resigns. Callers of the admin API see
    NOT_CONTROLLER instead.
    """


class ElectionType(IntEnum):
    """ElectLeaders' election types (Kafka's ``ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The broker settings the controller reads (Kafka's names in each field's comment)."""

    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    delete_topic_enable: bool = True  # delete.topic.enable
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    controller_socket_timeout_ms: int = 30_000  # controller.socket.timeout.ms
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_seconds: int = 300  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    request_backoff_ms: int = 100  # first retry of a controller request
    request_backoff_max_ms: int = 1_000  # the retry backoff doubles up to this
    zk_attempts_max: int = 10  # attempts of one ZooKeeper operation on connection loss
    zk_backoff_max_ms: int = 2_000
    cluster_id: str = ""  # used when /cluster/id is absent

    _BROKER_KEYS = MappingProxyType(
        {
            "unclean.leader.election.enable": "unclean_leader_election_enable",
            "delete.topic.enable": "delete_topic_enable",
            "num.partitions": "num_partitions",
            "default.replication.factor": "default_replication_factor",
            "controller.socket.timeout.ms": "controller_socket_timeout_ms",
            "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
            "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
            "leader.imbalance.per.broker.percentage": "leader_imbalance_per_broker_percentage",
        }
    )

    @classmethod
    def from_broker_config(cls, config: Config, **overrides: Any) -> ControllerConfig:
        """The controller's view of a parsed broker config (keys it lacks keep defaults)."""
        values: dict[str, Any] = {}
        for key, attr in cls._BROKER_KEYS.items():
            if key in config.definition.keys:
                values[attr] = config[key]
        values.update(overrides)
        return cls(**values)


# -- admin API values -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. -1 means the broker default (``num.partitions``,
    ``default.replication.factor``); ``assignments`` (partition → replicas) excludes both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow ``topic`` to ``count`` partitions; ``assignments`` lists the new ones' replicas."""

    topic: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicResult:
    """The outcome for one topic of an admin call (error code 0: NONE)."""

    name: str
    error_code: int = 0
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """The outcome of an ElectLeaders request for one partition."""

    error_code: int = 0
    error_message: str = ""
    leader: int = zk_data.NO_LEADER


def _error_result(name: str, e: KafkaError) -> TopicResult:
    return TopicResult(name, e.code, e.message)


# -- the context and its read-only view -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as the active controller sees it (leader -1 and epoch -1: no state)."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int
    offline_replicas: tuple[int, ...]

    @property
    def online(self) -> bool:
        return self.leader >= 0 and self.leader not in self.offline_replicas


@dataclass(frozen=True)
class ControllerSnapshot:
    """A frozen copy of the controller's view, for ``cluster status`` and tests.

    A broker that is not the active controller has empty maps and ``active`` False.
    """

    broker_id: int
    active: bool
    active_controller_id: int
    epoch: int
    epoch_zk_version: int
    cluster_id: str
    live_brokers: Mapping[int, BrokerInfo]
    shutting_down_brokers: frozenset[int]
    partitions: Mapping[TopicPartition, PartitionView]
    topics_being_deleted: frozenset[str]

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.partitions})

    def offline_partitions(self) -> list[TopicPartition]:
        return [tp for tp, p in self.partitions.items() if not p.online]

    def leader_of(self, tp: TopicPartition) -> int:
        view = self.partitions.get(tp)
        return zk_data.NO_LEADER if view is None else view.leader


class ControllerContext:
    """The active controller's picture of the cluster (Kafka's ``ControllerContext``).

    Changed only by the event being handled. ``partition_states`` mirrors the state znodes as
    last read or written (with their versions); a partition in ``assignments`` without a state
    is *new* (no replica was live when it was created). Live brokers include the ones shutting
    down; :meth:`live_broker_ids` excludes them, as Kafka's ``liveBrokerIds`` does.
    """

    def __init__(self, epoch: int, epoch_zk_version: int) -> None:
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.cluster_id = ""
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_zk_versions: dict[str, int] = {}
        self.partition_states: dict[TopicPartition, LeaderAndIsr] = {}
        self.topics_to_delete: set[str] = set()
        # Started deletions: the (partition, broker) replicas whose StopReplica(delete) is
        # not yet acknowledged.
        self.deletion_pending: dict[str, set[tuple[TopicPartition, int]]] = {}

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for topic in sorted(self.assignments) for tp in self.partitions_of(topic)]

    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.live_brokers)

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if r not in self.live_brokers)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def is_being_deleted(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    def add_topic(self, topic: str, assignment: Mapping[int, Sequence[int]], version: int) -> None:
        self.assignments[topic] = {p: tuple(r) for p, r in assignment.items()}
        self.topic_zk_versions[topic] = version

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.partition_states.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topic_zk_versions.pop(topic, None)
        self.topics_to_delete.discard(topic)
        self.deletion_pending.pop(topic, None)

    def has_leaders(self, topic: str) -> bool:
        """Every partition of ``topic`` has a live leader."""
        tps = self.partitions_of(topic)
        return bool(tps) and all(
            tp in self.partition_states and self.partition_states[tp].leader in self.live_brokers
            for tp in tps
        )


# -- ZooKeeper access -------------------------------------------------------------------------


class _RetryingCoordination:
    """The Coordination port with connection loss retried (bounded backoff, bounded attempts).

    Connection loss is ambiguous (the operation may have happened): every write the controller
    retries is conditional, so a repeat fails with BadVersion/NodeExists and is re-decided.
    """

    def __init__(self, zk: Coordination, attempts_max: int, backoff_max_s: float) -> None:
        self.zk = zk
        self._attempts_max = attempts_max
        self._backoff_max_s = backoff_max_s

    async def _call(self, op: Callable[[], Awaitable[_T]]) -> _T:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(ConnectionLossError),
            wait=wait_exponential(multiplier=0.05, min=0.05, max=self._backoff_max_s),
            stop=stop_after_attempt(self._attempts_max),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await op()
        raise AssertionError("unreachable: reraise=True")  # pragma: no cover

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        return await self._call(lambda: self.zk.get(path, watch))

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        return await self._call(lambda: self.zk.exists(path, watch))

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        return await self._call(lambda: self.zk.get_children(path, watch))

    async def create(self, path: str, data: bytes = b"", *, makepath: bool = False) -> str:
        return await self._call(lambda: self.zk.create(path, data, makepath=makepath))

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        return await self._call(lambda: self.zk.multi(ops))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda: self.zk.delete(path, version))


# -- events -----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Event:
    name: str
    handler: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any] | None = None
    requires_active: bool = True


def _topics_collide(a: str, b: str) -> bool:
    """Kafka's ``Topic.hasCollision``: '.' and '_' map to the same metric name."""
    return a.replace(".", "_") == b.replace(".", "_")


def _parse_bool(value: str) -> bool | None:
    lowered = value.strip().lower()
    return {"true": True, "false": False}.get(lowered)


class Controller:
    """Kafka's controller for one broker: campaigns, and when active, manages the cluster.

    The broker creates one per process and calls :meth:`start` after registering itself in
    ``/brokers/ids`` (either order works) and :meth:`stop` on shutdown. While this broker is
    the active controller, the broker's request handlers call the admin entry points
    (:meth:`create_topics`, :meth:`delete_topics`, :meth:`create_partitions`,
    :meth:`elect_leaders`, :meth:`controlled_shutdown`, or their ``handle_*`` protobuf forms);
    on any other broker those raise (or answer) NOT_CONTROLLER.

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
        self._zk = _RetryingCoordination(
            coordination, self._config.zk_attempts_max, self._config.zk_backoff_max_ms / 1000
        )
        self._transport = transport
        self._clock = clock
        self._rng = rng if rng is not None else random.Random(broker_id)
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ctx: ControllerContext | None = None
        self._channel: ControllerChannel | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._active_controller_id = zk_data.NO_LEADER
        self._session_id = 0
        self._changed = asyncio.Event()
        self._log = _ControllerLog(self)
        # One watcher object per path, so that re-registering does not stack duplicates.
        self._controller_watcher: Watcher = self._on_controller_watch
        self._broker_change_watcher = self._watcher("BrokerChange", self._process_broker_change)
        self._topic_change_watcher = self._watcher("TopicChange", self._process_topic_change)
        self._topic_deletion_watcher = self._watcher("TopicDeletion", self._process_topic_deletion)
        self._isr_change_watcher = self._watcher(
            "IsrChangeNotification", self._process_isr_change_notification
        )
        self._preferred_election_watcher = self._watcher(
            "ReplicaLeaderElection", self._process_preferred_election_znode
        )
        self._partition_watchers: dict[str, Watcher] = {}

    # -- public state -------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """Whether this broker is the active controller (as far as it knows)."""
        return self._ctx is not None

    @property
    def active_controller_id(self) -> int:
        """The controller as last seen in ``/controller`` (-1: none or unknown)."""
        return self._active_controller_id

    @property
    def epoch(self) -> int:
        """This controller's epoch while active, else -1."""
        return self._ctx.epoch if self._ctx is not None else -1

    def snapshot(self) -> ControllerSnapshot:
        """A frozen copy of the controller's view (see :class:`ControllerSnapshot`)."""
        ctx = self._ctx
        if ctx is None:
            return ControllerSnapshot(
                self.broker_id,
                False,
                self._active_controller_id,
                -1,
                -1,
                "",
                MappingProxyType({}),
                frozenset(),
                MappingProxyType({}),
                frozenset(),
            )
        partitions: dict[TopicPartition, PartitionView] = {}
        for tp in ctx.all_partitions():
            state = ctx.partition_states.get(tp)
            offline = tuple(r for r in ctx.replicas(tp) if r not in ctx.live_brokers)
            if state is None:
                partitions[tp] = PartitionView(
                    tp, ctx.replicas(tp), zk_data.NO_LEADER, -1, (), -1, -1, offline
                )
            else:
                partitions[tp] = PartitionView(
                    tp,
                    ctx.replicas(tp),
                    state.leader,
                    state.leader_epoch,
                    state.isr,
                    state.controller_epoch,
                    state.zk_version,
                    offline,
                )
        return ControllerSnapshot(
            self.broker_id,
            True,
            self._active_controller_id,
            ctx.epoch,
            ctx.epoch_zk_version,
            ctx.cluster_id,
            MappingProxyType(dict(sorted(ctx.live_brokers.items()))),
            frozenset(ctx.shutting_down),
            MappingProxyType(partitions),
            frozenset(ctx.topics_to_delete),
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the event loop and campaign; returns once the first campaign was decided."""
        if self._task is not None:
            raise RuntimeError("the controller is already started")
        self._listen_to_session(self._zk.zk)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{self.broker_id}"
        )
        await self._submit("Startup", self._process_startup, requires_active=False)

    async def stop(self) -> None:
        """Stop handling events and resign; pending admin calls get NOT_CONTROLLER.

        If this broker is the active controller, ``/controller`` is deleted (when it is still
        this session's) so that another broker takes over without waiting for the session to
        close. The Coordination session itself belongs to the broker and stays open.
        """
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        while not self._queue.empty():
            self._fail_event(self._queue.get_nowait(), NotControllerError("controller stopped"))
            self._queue.task_done()
        was_active = self.is_active
        await self._resign()
        if was_active:
            await self._delete_own_controller_znode()
        self._notify_changed()

    async def replace_session(self, coordination: Coordination) -> None:
        """Use a new ZooKeeper session (after the old one expired) and campaign again."""

        async def handler() -> None:
            await self._resign()
            self._zk = _RetryingCoordination(
                coordination, self._config.zk_attempts_max, self._config.zk_backoff_max_ms / 1000
            )
            self._listen_to_session(coordination)
            await self._process_startup()

        await self._submit("RegisterAndReelect", handler, requires_active=False)

    async def wait_idle(self) -> None:
        """Wait until every queued event is handled and every request answered (for tests;
        it does not return while a broker that is still registered does not answer)."""
        while self._task is not None:
            await self._queue.join()
            channel = self._channel
            if channel is not None:
                await channel.drain()
            if self._queue.empty() and (channel is None or self._channel_idle(channel)):
                return

    @staticmethod
    def _channel_idle(channel: ControllerChannel) -> bool:
        return all(channel.queued(b) == 0 for b in channel.brokers)

    # -- admin entry points -------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership and ISR membership off ``broker_id`` (Kafka's
        ``doControlledShutdown``); returns the partitions it still leads (retry while any).

        Raises NOT_CONTROLLER, STALE_BROKER_EPOCH (the request is from an older incarnation of
        the broker) or BROKER_NOT_AVAILABLE (not a live broker). ``broker_epoch`` -1: unknown,
        not checked.
        """
        return await self._submit(
            "ControlledShutdown", lambda: self._do_controlled_shutdown(broker_id, broker_epoch)
        )

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Validate and create topics: ``/config/topics/<t>`` then ``/brokers/topics/<t>``.

        One result per topic, in order. With ``timeout_ms`` > 0, waits until every partition
        of each created topic has a live leader, else that topic's result is
        REQUEST_TIMED_OUT (the topic still exists, as in Kafka). Raises NOT_CONTROLLER.
        """
        results = await self._submit(
            "CreateTopics", lambda: self._do_create_topics(topics, validate_only)
        )
        if timeout_ms > 0 and not validate_only:
            results = await self._await_topics(
                results, lambda t: self._ctx is not None and self._ctx.has_leaders(t), timeout_ms
            )
        return results

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Mark topics for deletion (``/admin/delete_topics/<t>``); the deletion itself runs
        as events. With ``timeout_ms`` > 0, waits until it completed (else REQUEST_TIMED_OUT).
        Raises NOT_CONTROLLER."""
        results = await self._submit("DeleteTopics", lambda: self._do_delete_topics(names))
        if timeout_ms > 0:
            results = await self._await_topics(
                results,
                lambda t: self._ctx is not None and t not in self._ctx.assignments,
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
            "CreatePartitions", lambda: self._do_create_partitions(requests, validate_only)
        )
        if timeout_ms > 0 and not validate_only:
            wanted = {r.topic: r.count for r in requests}

            def grown(topic: str) -> bool:
                ctx = self._ctx
                return (
                    ctx is not None
                    and len(ctx.assignments.get(topic, {})) >= wanted[topic]
                    and ctx.has_leaders(topic)
                )

            results = await self._await_topics(results, grown, timeout_ms)
        return results

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

    # -- the same, in protobuf form, for the broker's request handlers ------------------------

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

    async def handle_create_topics(
        self, request: pb.CreateTopicsRequest
    ) -> pb.CreateTopicsResponse:
        """Clients send -1 for "broker default" (proto3 reads an unset count as 0, which is
        INVALID_PARTITIONS, except next to a manual assignment, where it counts as unset)."""
        topics = [
            NewTopic(
                t.name,
                -1 if t.assignments and t.num_partitions == 0 else t.num_partitions,
                -1 if t.assignments and t.replication_factor == 0 else t.replication_factor,
                {a.partition: list(a.broker_ids) for a in t.assignments} or None,
                dict(t.configs),
            )
            for t in request.topics
        ]
        try:
            results = await self.create_topics(
                topics, validate_only=request.validate_only, timeout_ms=request.timeout_ms
            )
        except KafkaError as e:
            results = [_error_result(t.name, e) for t in topics]
        return pb.CreateTopicsResponse(topics=[_topic_result_pb(r) for r in results])

    async def handle_delete_topics(
        self, request: pb.DeleteTopicsRequest
    ) -> pb.DeleteTopicsResponse:
        names = list(request.topic_names)
        try:
            results = await self.delete_topics(names, timeout_ms=request.timeout_ms)
        except KafkaError as e:
            results = [_error_result(n, e) for n in names]
        return pb.DeleteTopicsResponse(topics=[_topic_result_pb(r) for r in results])

    async def handle_create_partitions(
        self, request: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse:
        asks = [
            NewPartitions(
                t.name,
                t.count,
                [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition)]
                or None,
            )
            for t in request.topics
        ]
        try:
            results = await self.create_partitions(
                asks, validate_only=request.validate_only, timeout_ms=request.timeout_ms
            )
        except KafkaError as e:
            results = [_error_result(a.topic, e) for a in asks]
        return pb.CreatePartitionsResponse(results=[_topic_result_pb(r) for r in results])

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

    # -- the event queue ----------------------------------------------------------------------

    def _watcher(self, name: str, handler: Callable[[], Awaitable[None]]) -> Watcher:
        def watcher(event: WatchEvent) -> None:
            self._enqueue(_Event(name, handler))

        return watcher

    def _enqueue(self, event: _Event) -> None:
        if self._task is None:  # stopped: watches of the old term may still fire
            self._fail_event(event, NotControllerError("controller stopped"))
            return
        self._queue.put_nowait(event)

    async def _submit(
        self, name: str, handler: Callable[[], Awaitable[_T]], *, requires_active: bool = True
    ) -> _T:
        if self._task is None:
            raise NotControllerError(f"broker {self.broker_id}: controller not running")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._enqueue(_Event(name, handler, future, requires_active))
        return await future

    @staticmethod
    def _fail_event(event: _Event, error: BaseException) -> None:
        if event.future is not None and not event.future.done():
            event.future.set_exception(error)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._process(event)
            finally:
                self._queue.task_done()
                self._notify_changed()

    async def _process(self, event: _Event) -> None:
        if event.requires_active and not self.is_active:
            self._fail_event(
                event,
                NotControllerError(
                    f"broker {self.broker_id} is not the controller "
                    f"(the controller is {self._active_controller_id})"
                ),
            )
            return
        try:
            result = await event.handler()
        except asyncio.CancelledError:
            self._fail_event(event, NotControllerError("controller stopped"))
            raise
        except ControllerMovedError as e:
            self._log.info("controller moved while handling %s: %s; resigning", event.name, e)
            self._fail_event(event, NotControllerError(str(e)))
            await self._resign()
            # If /controller still names this session, nobody else can take over: free it
            # (Kafka's triggerControllerMove); the watch then runs a fresh election.
            await self._delete_own_controller_znode()
        except SessionExpiredError as e:
            self._log.warning("ZooKeeper session expired while handling %s; resigning", event.name)
            await self._resign()
            self._active_controller_id = zk_data.NO_LEADER
            self._fail_event(event, NotControllerError(str(e)))
        except KafkaError as e:
            self._fail_event(event, e)
        except Exception as e:
            self._log.exception("error while handling %s", event.name)
            self._fail_event(event, e)
        else:
            if event.future is not None and not event.future.done():
                event.future.set_result(result)

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _await_topics(
        self, results: list[TopicResult], done: Callable[[str], bool], timeout_ms: int
    ) -> list[TopicResult]:
        """Wait until ``done(topic)`` for every successful result, or the timeout."""
        pending = [r.name for r in results if r.ok]

        async def wait() -> None:
            while not all(done(t) for t in pending):
                await self._changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout_ms / 1000)
        except TimeoutError:
            return [
                r
                if not r.ok or done(r.name)
                else TopicResult(r.name, RequestTimedOutError.code, "Operation timed out.")
                for r in results
            ]
        return results

    # -- session and election -----------------------------------------------------------------

    def _listen_to_session(self, coordination: Coordination) -> None:
        self._session_id = coordination.session_id

        def listener(state: SessionState) -> None:
            if coordination is not self._zk.zk or self._task is None:
                return  # an old session, or stopped
            if state is SessionState.EXPIRED:
                self._enqueue(_Event("Expire", self._process_expire, requires_active=False))
            elif state is SessionState.CONNECTED and coordination.session_id != self._session_id:
                self._session_id = coordination.session_id
                self._enqueue(
                    _Event("RegisterAndReelect", self._process_startup, requires_active=False)
                )
            elif state is SessionState.CONNECTED:
                # Same session after a connection loss: the watches were dropped with the
                # connection, so every one is set again by re-reading what it watches.
                self._enqueue(
                    _Event("Reconnected", self._process_reconnected, requires_active=False)
                )

        coordination.add_session_listener(listener)

    def _on_controller_watch(self, event: WatchEvent) -> None:
        if event.type is EventType.DELETED:
            self._enqueue(_Event("Reelect", self._process_reelect, requires_active=False))
        else:
            self._enqueue(
                _Event("ControllerChange", self._process_controller_change, requires_active=False)
            )

    async def _process_startup(self) -> None:
        await self._ensure_persistent_paths()
        await self._refresh_active_controller()
        await self._elect()

    async def _process_reconnected(self) -> None:
        await self._maybe_resign()
        if not self.is_active:
            await self._elect()
            return
        await self._process_broker_change()
        await self._process_topic_change()
        for topic in sorted(self._require_ctx().assignments):
            await self._process_partition_modifications(topic)
        await self._process_isr_change_notification()
        await self._process_topic_deletion()
        await self._process_preferred_election_znode()

    async def _process_expire(self) -> None:
        self._log.warning("ZooKeeper session expired; resigning")
        await self._resign()
        self._active_controller_id = zk_data.NO_LEADER

    async def _process_reelect(self) -> None:
        await self._maybe_resign()
        await self._elect()

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        await self._refresh_active_controller()
        if was_active and self._active_controller_id != self.broker_id:
            self._log.info("the controller moved to broker %d", self._active_controller_id)
            await self._resign()

    async def _process_controller_change(self) -> None:
        await self._maybe_resign()
        # /controller came and went before the watch was set again: nobody would campaign.
        await self._elect()

    async def _refresh_active_controller(self) -> None:
        """Re-register the ``/controller`` watch and read who is controller."""
        stat = await self._zk.exists(zk_data.CONTROLLER, self._controller_watcher)
        self._active_controller_id = zk_data.NO_LEADER
        if stat is not None:
            try:
                data, _ = await self._zk.get(zk_data.CONTROLLER)
                self._active_controller_id = zk_data.decode_controller(data)
            except NoNodeError:
                pass

    async def _ensure_persistent_paths(self) -> None:
        for path in zk_data.PERSISTENT_PATHS:
            if await self._zk.exists(path) is None:
                with contextlib.suppress(NodeExistsError):
                    await self._zk.create(path, makepath=True)

    async def _read_controller_epoch(self) -> tuple[int, int]:
        """(epoch, znode version) of ``/controller_epoch``, creating it with 0 if absent."""
        try:
            data, stat = await self._zk.get(zk_data.CONTROLLER_EPOCH)
            return zk_data.decode_controller_epoch(data), stat.version
        except NoNodeError:
            pass
        try:
            await self._zk.create(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(0))
            return 0, 0
        except NodeExistsError:
            data, stat = await self._zk.get(zk_data.CONTROLLER_EPOCH)
            return zk_data.decode_controller_epoch(data), stat.version

    async def _elect(self) -> None:
        """Campaign for ``/controller`` unless somebody holds it (Kafka's ``elect``)."""
        won: tuple[int, int] | None = None
        for _ in range(_CAMPAIGN_ATTEMPTS_MAX):
            if self.is_active or self._active_controller_id != zk_data.NO_LEADER:
                return
            won = await self._campaign()
            if won is not None:
                break
        if won is None:
            return
        new_epoch, new_version = won
        self._active_controller_id = self.broker_id
        self._ctx = ControllerContext(new_epoch, new_version)
        self._log.info("became the controller with epoch %d", new_epoch)
        try:
            await self._on_controller_failover()
        except (ControllerMovedError, SessionExpiredError, asyncio.CancelledError):
            raise
        except Exception:
            self._log.exception("error while becoming the controller; moving the controller")
            await self._resign()
            # Pause before freeing /controller, so that a persistent failure does not spin
            # elections as fast as ZooKeeper answers.
            await asyncio.sleep(_MOVE_BACKOFF_S)
            await self._delete_own_controller_znode()

    async def _campaign(self) -> tuple[int, int] | None:
        """One attempt: create ``/controller`` and bump the epoch atomically.

        Returns (epoch, epoch znode version) when won; None when lost, with
        ``active_controller_id`` set to the winner (or -1 if it is gone again: try again).
        """
        epoch, epoch_version = await self._read_controller_epoch()
        new_epoch = epoch + 1
        payload = zk_data.encode_controller(self.broker_id, self._clock.time_ms())
        try:
            results = await self._zk.multi(
                [
                    CreateOp(zk_data.CONTROLLER, payload, ephemeral=True),
                    SetOp(
                        zk_data.CONTROLLER_EPOCH,
                        zk_data.encode_controller_epoch(new_epoch),
                        epoch_version,
                    ),
                ]
            )
        except (NodeExistsError, BadVersionError):
            pass
        else:
            stat = results[1]
            assert isinstance(stat, Stat)
            return new_epoch, stat.version
        # Lost the race, or our own attempt went through before a connection loss.
        try:
            data, controller_stat = await self._zk.get(zk_data.CONTROLLER)
        except NoNodeError:
            self._active_controller_id = zk_data.NO_LEADER
            return None
        controller_id = zk_data.decode_controller(data)
        self._active_controller_id = controller_id
        ours = (
            controller_id == self.broker_id
            and controller_stat.ephemeral_owner == self._zk.zk.session_id
        )
        current_epoch, current_version = await self._read_controller_epoch()
        if ours and current_epoch == new_epoch:
            return new_epoch, current_version
        self._log.debug("broker %d is the controller", controller_id)
        return None

    async def _resign(self) -> None:
        """Forget the context and stop talking to brokers (Kafka's onControllerResignation)."""
        if self._ctx is None:
            return
        self._log.info("resigning as controller (epoch %d)", self._ctx.epoch)
        self._ctx = None
        self._partition_watchers.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    async def _delete_own_controller_znode(self) -> None:
        try:
            data, stat = await self._zk.get(zk_data.CONTROLLER)
            if (
                zk_data.decode_controller(data) == self.broker_id
                and stat.ephemeral_owner == self._zk.zk.session_id
            ):
                await self._zk.delete(zk_data.CONTROLLER, stat.version)
        except CoordinationError as e:
            self._log.debug("could not delete /controller: %s", e)

    # -- becoming controller ------------------------------------------------------------------

    async def _on_controller_failover(self) -> None:
        """Load the cluster from ZooKeeper, register watches, resend every partition's state
        and elect leaders where needed (Kafka's ``onControllerFailover``)."""
        ctx = self._require_ctx()
        ctx.cluster_id = await self._read_cluster_id()
        self._channel = ControllerChannel(
            self._transport,
            request_timeout_s=self._config.controller_socket_timeout_ms / 1000,
            backoff_initial_s=self._config.request_backoff_ms / 1000,
            backoff_max_s=self._config.request_backoff_max_ms / 1000,
        )
        for info in (await self._read_live_brokers()).values():
            ctx.live_brokers[info.broker_id] = info
            self._channel.add_broker(info)
        for topic in sorted(
            await self._zk.get_children(zk_data.BROKER_TOPICS, self._topic_change_watcher)
        ):
            await self._load_topic(topic)
        for tp in ctx.all_partitions():
            state = await self._read_partition_state(tp)
            if state is not None:
                ctx.partition_states[tp] = state
        # Notifications written before now are covered by the states just read.
        await self._delete_isr_change_notifications(
            await self._zk.get_children(zk_data.ISR_CHANGE_NOTIFICATION, self._isr_change_watcher)
        )
        # Every live replica gets its partitions' state at the new epoch, after the elections
        # this controller owes (one batch: a newer state of a partition replaces the older).
        batch = RequestBatch()
        live = ctx.live_or_shutting_down_ids()
        for tp, state in sorted(ctx.partition_states.items()):
            if not ctx.is_being_deleted(tp.topic):
                self._add_leader_and_isr(batch, ctx.replicas(tp), tp, state)
        batch.add_update_metadata(live)
        await self._trigger_online_partition_state_change(batch)
        # Replicas on brokers that died before this controller took over leave the ISRs now
        # (Kafka's replica state machine startup moves them to OfflineReplica).
        assigned = {b for tp in ctx.all_partitions() for b in ctx.replicas(tp)}
        await self._offline_replicas_leave_isr(sorted(assigned - live), batch)
        self._send(batch)
        await self._process_topic_deletion()
        await self._process_preferred_election_znode()
        if self._config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_timer(), name=f"controller-{self.broker_id}-rebalance"
            )

    async def _read_cluster_id(self) -> str:
        try:
            data, _ = await self._zk.get(zk_data.CLUSTER_ID)
            return zk_data.decode_cluster_id(data)
        except (NoNodeError, ValueError, KeyError):
            return self._config.cluster_id

    async def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        """Registered brokers, re-registering the children watch; epoch = znode czxid."""
        brokers: dict[int, BrokerInfo] = {}
        for child in await self._zk.get_children(zk_data.BROKER_IDS, self._broker_change_watcher):
            try:
                broker_id = int(child)
                data, stat = await self._zk.get(zk_data.broker_path(broker_id))
                brokers[broker_id] = zk_data.decode_broker(broker_id, data, stat.czxid)
            except NoNodeError:
                continue
            except (ValueError, KeyError, IndexError) as e:
                self._log.error("ignoring malformed broker registration %s: %s", child, e)
        return dict(sorted(brokers.items()))

    def _partition_watcher(self, topic: str) -> Watcher:
        watcher = self._partition_watchers.get(topic)
        if watcher is None:

            def watcher(event: WatchEvent) -> None:
                if event.type is not EventType.DELETED:
                    self._enqueue(
                        _Event(
                            "PartitionModifications",
                            lambda: self._process_partition_modifications(topic),
                        )
                    )

            self._partition_watchers[topic] = watcher
        return watcher

    async def _load_topic(self, topic: str) -> bool:
        """Read a topic's assignment into the context (with its data watch); False if gone."""
        try:
            data, stat = await self._zk.get(
                zk_data.topic_path(topic), self._partition_watcher(topic)
            )
        except NoNodeError:
            return False
        try:
            assignment = zk_data.decode_topic_assignment(data)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self._log.error("ignoring topic %s: malformed assignment: %s", topic, e)
            return False
        self._require_ctx().add_topic(topic, assignment, stat.version)
        return True

    # -- ZooKeeper reads and fenced writes ----------------------------------------------------

    def _require_ctx(self) -> ControllerContext:
        if self._ctx is None:
            raise ControllerMovedError(f"broker {self.broker_id} is no longer the controller")
        return self._ctx

    async def _fenced(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """``multi([CheckOp(/controller_epoch, our version), *ops])``.

        ControllerMovedError if the epoch znode moved (this controller is a zombie); otherwise
        the error of the failing op (BadVersion, NoNode, NodeExists...).
        """
        ctx = self._require_ctx()
        try:
            return await self._zk.multi(
                [
                    CheckOp(zk_data.CONTROLLER_EPOCH, ctx.epoch_zk_version),
                    *ops,
                ]
            )
        except BadVersionError:
            stat = await self._zk.exists(zk_data.CONTROLLER_EPOCH)
            if stat is None or stat.version != ctx.epoch_zk_version:
                raise ControllerMovedError(
                    f"/controller_epoch is at version "
                    f"{None if stat is None else stat.version}, not {ctx.epoch_zk_version}: "
                    f"epoch {ctx.epoch} is stale"
                ) from None
            raise

    async def _read_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """The state znode (None if absent); ControllerMovedError if a newer controller
        wrote it."""
        ctx = self._require_ctx()
        try:
            data, stat = await self._zk.get(zk_data.partition_state_path(tp))
        except NoNodeError:
            return None
        try:
            state = zk_data.decode_partition_state(data, stat.version)
        except (ValueError, KeyError, TypeError) as e:
            self._log.error("%s: ignoring malformed partition state: %s", tp, e)
            return None
        if state.controller_epoch > ctx.epoch:
            raise ControllerMovedError(
                f"{tp}: state written by controller epoch {state.controller_epoch} > {ctx.epoch}"
            )
        return state

    async def _write_partition_state(self, tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr:
        """Conditional (``state.zk_version``), fenced write; the state with its new version."""
        results = await self._fenced(
            [
                SetOp(
                    zk_data.partition_state_path(tp),
                    zk_data.encode_partition_state(state),
                    state.zk_version,
                )
            ]
        )
        stat = results[1]
        assert isinstance(stat, Stat)
        written = state.with_(zk_version=stat.version)
        self._require_ctx().partition_states[tp] = written
        return written

    async def _fenced_delete(self, path: str) -> bool:
        """Fenced delete; False if the node was already gone."""
        try:
            await self._fenced([DeleteOp(path)])
        except NoNodeError:
            return False
        return True

    async def _unclean_allowed(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable``, else the broker default; read from
        ZooKeeper at election time, as Kafka does (topic configs can change at runtime)."""
        default = self._config.unclean_leader_election_enable
        try:
            data, _ = await self._zk.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            return default
        try:
            value = zk_data.decode_topic_config(data).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        except ValueError:
            return default
        parsed = None if value is None else _parse_bool(value)
        return default if parsed is None else parsed

    # -- requests to brokers ------------------------------------------------------------------

    def _send(self, batch: RequestBatch) -> None:
        ctx = self._require_ctx()
        channel = self._channel
        if channel is None or batch.is_empty():
            return
        batch.send(
            channel,
            controller_id=self.broker_id,
            controller_epoch=ctx.epoch,
            cluster_id=ctx.cluster_id,
            on_stop_replica_response=self._on_stop_replica_response,
        )

    def _metadata_state(self, tp: TopicPartition) -> pb.PartitionState | None:
        ctx = self._require_ctx()
        state = ctx.partition_states.get(tp)
        if state is None:
            return None
        return partition_state(
            tp, state, ctx.replicas(tp), offline_replicas=ctx.offline_replicas(tp)
        )

    def _add_update_metadata(
        self, batch: RequestBatch, broker_ids: Iterable[int], tps: Iterable[TopicPartition]
    ) -> None:
        states = [s for s in (self._metadata_state(tp) for tp in tps) if s is not None]
        batch.add_update_metadata(broker_ids, states)

    def _add_leader_and_isr(
        self,
        batch: RequestBatch,
        recipients: Iterable[int],
        tp: TopicPartition,
        state: LeaderAndIsr,
        *,
        is_new: bool = False,
    ) -> None:
        """LeaderAndIsr to the live ``recipients``, and UpdateMetadata of ``tp`` to every live
        broker (as Kafka's ``addLeaderAndIsrRequestForBrokers`` does)."""
        ctx = self._require_ctx()
        live = ctx.live_or_shutting_down_ids()
        batch.add_leader_and_isr(
            sorted(b for b in set(recipients) if b in live),
            tp,
            state,
            ctx.replicas(tp),
            is_new=is_new,
            offline_replicas=ctx.offline_replicas(tp),
        )
        self._add_update_metadata(batch, sorted(live), [tp])

    # -- elections ----------------------------------------------------------------------------

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
        for _ in range(_STATE_WRITE_ATTEMPTS_MAX):
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
                _STATE_WRITE_ATTEMPTS_MAX,
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

    # -- broker changes -----------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        ctx = self._require_ctx()
        channel = self._channel
        assert channel is not None
        current = await self._read_live_brokers()
        known = dict(ctx.live_brokers)
        new = sorted(set(current) - set(known))
        dead = sorted(set(known) - set(current))
        bounced = sorted(b for b in set(current) & set(known) if current[b].epoch > known[b].epoch)
        if new or dead or bounced:
            self._log.info(
                "broker change: new %s, dead %s, bounced %s, live %s",
                new,
                dead,
                bounced,
                sorted(current),
            )
        for b in new + bounced:
            channel.add_broker(current[b])
        for b in dead:
            channel.remove_broker(b)
        if new:
            ctx.live_brokers.update({b: current[b] for b in new})
            await self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                del ctx.live_brokers[b]
            await self._on_broker_failure(bounced)
            ctx.live_brokers.update({b: current[b] for b in bounced})
            await self._on_broker_startup(bounced)
        if dead:
            for b in dead:
                del ctx.live_brokers[b]
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, new: Sequence[int]) -> None:
        """Tell everyone about the new brokers, tell the new brokers everything, and elect
        where they make it possible (Kafka's ``onBrokerStartup``)."""
        ctx = self._require_ctx()
        existing = sorted(ctx.live_or_shutting_down_ids() - set(new))
        batch = RequestBatch()
        batch.add_update_metadata(existing)
        self._send(batch)
        batch = RequestBatch()
        known = [tp for tp in sorted(ctx.partition_states) if not ctx.is_being_deleted(tp.topic)]
        self._add_update_metadata(batch, new, known)
        self._send(batch)
        batch = RequestBatch()
        for b in new:
            for tp in ctx.partitions_on_broker(b):
                state = ctx.partition_states.get(tp)
                if state is not None and not ctx.is_being_deleted(tp.topic):
                    self._add_leader_and_isr(batch, [b], tp, state)
        await self._trigger_online_partition_state_change(batch)
        self._send(batch)
        await self._try_topic_deletion(restarted=set(new))

    async def _on_broker_failure(self, dead: Sequence[int]) -> None:
        """Elect new leaders where the dead brokers led, then remove them from the ISRs of
        the rest (Kafka's ``onBrokerFailure`` / ``onReplicasBecomeOffline``)."""
        ctx = self._require_ctx()
        ctx.shutting_down.difference_update(dead)
        batch = RequestBatch()
        await self._trigger_online_partition_state_change(batch)
        await self._offline_replicas_leave_isr(dead, batch)
        for topic in sorted(ctx.topics_to_delete):
            if any(b in ctx.replicas(tp) for tp in ctx.partitions_of(topic) for b in dead):
                self._log.info("deletion of topic %s waits for brokers %s", topic, list(dead))
        if batch.is_empty():
            # Nothing changed leader or ISR: still tell everyone which brokers are gone.
            batch.add_update_metadata(sorted(ctx.live_or_shutting_down_ids()))
        self._send(batch)

    async def _offline_replicas_leave_isr(self, dead: Sequence[int], batch: RequestBatch) -> None:
        ctx = self._require_ctx()
        for b in dead:
            partitions = [
                tp
                for tp in ctx.partitions_on_broker(b)
                if tp in ctx.partition_states and not ctx.is_being_deleted(tp.topic)
            ]
            await self._remove_replica_from_isr(partitions, b, batch)

    # -- topic and partition changes ----------------------------------------------------------

    async def _process_topic_change(self) -> None:
        ctx = self._require_ctx()
        topics = set(await self._zk.get_children(zk_data.BROKER_TOPICS, self._topic_change_watcher))
        known = set(ctx.assignments)
        batch = RequestBatch()
        for topic in sorted(known - topics):
            self._log.info("topic %s is gone from ZooKeeper", topic)
            ctx.remove_topic(topic)
            self._partition_watchers.pop(topic, None)
            batch.add_deleted_topics(sorted(ctx.live_or_shutting_down_ids()), [topic])
        created: list[TopicPartition] = []
        for topic in sorted(topics - known):
            if await self._load_topic(topic):
                self._log.info("new topic %s: assignment %s", topic, ctx.assignments[topic])
                created.extend(ctx.partitions_of(topic))
        await self._on_new_partitions(created, batch)
        self._send(batch)

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

    async def _process_partition_modifications(self, topic: str) -> None:
        ctx = self._require_ctx()
        if topic not in ctx.assignments:
            return
        try:
            data, stat = await self._zk.get(
                zk_data.topic_path(topic), self._partition_watcher(topic)
            )
        except NoNodeError:
            return
        assignment = zk_data.decode_topic_assignment(data)
        ctx.topic_zk_versions[topic] = stat.version
        if ctx.is_being_deleted(topic):
            self._log.info("not adding partitions to topic %s: it is being deleted", topic)
            return
        existing = ctx.assignments[topic]
        added = {p: tuple(r) for p, r in assignment.items() if p not in existing}
        if not added:
            return
        existing.update(added)
        self._log.info("topic %s: new partitions %s", topic, dict(sorted(added.items())))
        batch = RequestBatch()
        await self._on_new_partitions([TopicPartition(topic, p) for p in sorted(added)], batch)
        self._send(batch)

    # -- ISR change notifications -------------------------------------------------------------

    async def _process_isr_change_notification(self) -> None:
        """Leaders changed ISRs: refresh those states and broadcast them (UpdateMetadata)."""
        ctx = self._require_ctx()
        children = await self._zk.get_children(
            zk_data.ISR_CHANGE_NOTIFICATION, self._isr_change_watcher
        )
        try:
            changed: set[TopicPartition] = set()
            for child in sorted(children):
                try:
                    data, _ = await self._zk.get(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")
                    changed.update(zk_data.decode_isr_change(data))
                except NoNodeError:
                    continue
                except (ValueError, KeyError, TypeError) as e:
                    self._log.error("ignoring malformed ISR change notification %s: %s", child, e)
            refreshed: list[TopicPartition] = []
            for tp in sorted(changed):
                if not ctx.replicas(tp) or ctx.is_being_deleted(tp.topic):
                    continue
                state = await self._read_partition_state(tp)
                if state is not None:
                    ctx.partition_states[tp] = state
                    refreshed.append(tp)
            if refreshed:
                batch = RequestBatch()
                self._add_update_metadata(batch, sorted(ctx.live_or_shutting_down_ids()), refreshed)
                self._send(batch)
        finally:
            await self._delete_isr_change_notifications(children)

    async def _delete_isr_change_notifications(self, children: Iterable[str]) -> None:
        for child in sorted(children):
            await self._fenced_delete(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")

    # -- controlled shutdown ------------------------------------------------------------------

    async def _do_controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]:
        ctx = self._require_ctx()
        info = ctx.live_brokers.get(broker_id)
        if broker_epoch != -1 and info is not None and broker_epoch < info.epoch:
            raise StaleBrokerEpochError(
                f"Received controlled shutdown request from an old broker epoch {broker_epoch} "
                f"for broker {broker_id}. Current broker epoch is {info.epoch}."
            )
        if info is None:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
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

    # -- admin: create topics and partitions --------------------------------------------------

    async def _do_create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._require_ctx()
        broker_ids = sorted(ctx.live_brokers)
        names = [t.name for t in topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for topic in topics:
            if topic.name in duplicates:
                results.append(
                    _error_result(
                        topic.name,
                        InvalidRequestError(
                            "Create topics request contains multiple entries for the following "
                            f"topics: {', '.join(duplicates)}"
                        ),
                    )
                )
                continue
            try:
                assignment = await self._validate_new_topic(topic, broker_ids)
                if not validate_only:
                    await self._write_new_topic(topic, assignment)
            except KafkaError as e:
                results.append(_error_result(topic.name, e))
                continue
            results.append(TopicResult(topic.name))
        return results

    async def _validate_new_topic(
        self, topic: NewTopic, broker_ids: Sequence[int]
    ) -> dict[int, list[int]]:
        """Kafka's ``createTopics`` checks, in Kafka's order; the assignment to write."""
        ctx = self._require_ctx()
        validate_topic_name(topic.name)
        if (
            topic.name in ctx.assignments
            or await self._zk.exists(zk_data.topic_path(topic.name)) is not None
        ):
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
        collisions = sorted(
            t for t in ctx.assignments if t != topic.name and _topics_collide(t, topic.name)
        )
        if collisions:
            raise InvalidTopicError(
                f"Topic '{topic.name}' collides with existing topics: {', '.join(collisions)}"
            )
        if topic.assignments and (topic.num_partitions != -1 or topic.replication_factor != -1):
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
        if topic.assignments:
            validate_manual_assignment(topic.assignments, broker_ids)
            assignment = {p: list(r) for p, r in sorted(topic.assignments.items())}
        else:
            n = self._config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = (
                self._config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            assignment = assign_new_topic(broker_ids, n, rf, self._rng)
        LOG_CONFIG_DEF.parse(dict(topic.configs))
        return assignment

    async def _write_new_topic(self, topic: NewTopic, assignment: dict[int, list[int]]) -> None:
        """Config, then assignment, in one fenced multi (Kafka writes them one after the
        other; together, a failure leaves neither)."""
        config_path = zk_data.topic_config_path(topic.name)
        config_data = zk_data.encode_topic_config(dict(topic.configs))
        config_op: Op = (
            SetOp(config_path, config_data)
            if await self._zk.exists(config_path) is not None
            else CreateOp(config_path, config_data)
        )
        try:
            await self._fenced(
                [
                    config_op,
                    CreateOp(
                        zk_data.topic_path(topic.name), zk_data.encode_topic_assignment(assignment)
                    ),
                ]
            )
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.") from None
        self._log.info(
            "creating topic %s with configuration %s and initial partition assignment %s",
            topic.name,
            dict(topic.configs),
            assignment,
        )

    async def _do_create_partitions(
        self, requests: Sequence[NewPartitions], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._require_ctx()
        names = [r.topic for r in requests]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for ask in requests:
            try:
                if ask.topic in duplicates:
                    raise InvalidRequestError("Duplicate topic in request.")
                if ask.topic not in ctx.assignments:
                    raise UnknownTopicOrPartitionError(f"The topic '{ask.topic}' does not exist.")
                if ctx.is_being_deleted(ask.topic):
                    raise InvalidTopicError("The topic is queued for deletion.")
                current = len(ctx.assignments[ask.topic])
                if ask.count < current:
                    raise InvalidPartitionsError(
                        f"Topic currently has {current} partitions, which is higher than the "
                        f"requested {ask.count}."
                    )
                if ask.count == current:
                    raise InvalidPartitionsError(f"Topic already has {current} partitions.")
                existing = {p: list(r) for p, r in ctx.assignments[ask.topic].items()}
                added = add_partitions(
                    ask.topic, existing, sorted(ctx.live_brokers), ask.count, ask.assignments
                )
                if not validate_only:
                    await self._write_topic_assignment(ask.topic, {**existing, **added})
            except KafkaError as e:
                results.append(_error_result(ask.topic, e))
                continue
            results.append(TopicResult(ask.topic))
        return results

    async def _write_topic_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        ctx = self._require_ctx()
        try:
            await self._fenced(
                [
                    SetOp(
                        zk_data.topic_path(topic),
                        zk_data.encode_topic_assignment(assignment),
                        ctx.topic_zk_versions[topic],
                    )
                ]
            )
        except (BadVersionError, NoNodeError):
            raise InvalidRequestError(
                f"The assignment of topic '{topic}' changed concurrently; retry."
            ) from None
        self._log.info("topic %s: assignment now %s", topic, assignment)

    # -- admin: topic deletion ----------------------------------------------------------------

    async def _do_delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        ctx = self._require_ctx()
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for name in names:
            if name in duplicates:
                results.append(
                    TopicResult(name, InvalidRequestError.code, "Duplicate topic in request.")
                )
            elif not self._config.delete_topic_enable:
                # Kafka answers TOPIC_DELETION_DISABLED from v3 of the API, INVALID_REQUEST
                # before; the error table has only the latter.
                results.append(
                    TopicResult(name, InvalidRequestError.code, "Topic deletion is disabled.")
                )
            elif name not in ctx.assignments:
                results.append(
                    TopicResult(
                        name,
                        UnknownTopicOrPartitionError.code,
                        "This server does not host this topic-partition.",
                    )
                )
            else:
                # Already marked (NodeExists): the deletion is under way.
                with contextlib.suppress(NodeExistsError):
                    await self._fenced([CreateOp(zk_data.delete_topic_path(name))])
                results.append(TopicResult(name))
        return results

    async def _process_topic_deletion(self) -> None:
        """``/admin/delete_topics`` children: queue the existing topics and try deleting."""
        ctx = self._require_ctx()
        children = sorted(
            await self._zk.get_children(zk_data.DELETE_TOPICS, self._topic_deletion_watcher)
        )
        if not children:
            return
        if not self._config.delete_topic_enable:
            self._log.info("removing deletion requests for %s: topic deletion is off", children)
            for topic in children:
                await self._fenced_delete(zk_data.delete_topic_path(topic))
            return
        for topic in children:
            if topic not in ctx.assignments:
                self._log.warning("ignoring request to delete non-existing topic %s", topic)
                await self._fenced_delete(zk_data.delete_topic_path(topic))
            elif topic not in ctx.topics_to_delete:
                self._log.info("topic %s queued for deletion", topic)
                ctx.topics_to_delete.add(topic)
        await self._try_topic_deletion()

    async def _try_topic_deletion(self, restarted: Collection[int] = ()) -> None:
        """Start the deletion of queued topics whose replicas are all on live brokers: tell
        every broker the topic is gone, StopReplica(delete) to each replica; complete once all
        replicas acknowledged. Pending replicas on ``restarted`` brokers are asked again."""
        ctx = self._require_ctx()
        batch = RequestBatch()
        live = ctx.live_or_shutting_down_ids()
        completed: list[str] = []
        for topic in sorted(ctx.topics_to_delete):
            pending = ctx.deletion_pending.get(topic)
            if pending is None:
                replicas = {(tp, b) for tp in ctx.partitions_of(topic) for b in ctx.replicas(tp)}
                offline = sorted({b for _, b in replicas if b not in live})
                if offline:
                    self._log.info(
                        "deletion of topic %s waits for brokers %s to come back", topic, offline
                    )
                    continue
                ctx.deletion_pending[topic] = replicas
                batch.add_deleted_topics(sorted(live), [topic])
                resend = sorted(replicas)
            else:
                resend = sorted((tp, b) for tp, b in pending if b in restarted)
            for tp, b in resend:
                state = ctx.partition_states.get(tp)
                batch.add_stop_replica(
                    [b], tp, delete=True, leader_epoch=-1 if state is None else state.leader_epoch
                )
            if not ctx.deletion_pending[topic]:
                completed.append(topic)
        self._send(batch)
        for topic in completed:
            await self._complete_topic_deletion(topic)

    def _on_stop_replica_response(
        self, broker_id: int, request: Message, response: Message
    ) -> None:
        assert isinstance(request, pb.StopReplicaRequest)
        assert isinstance(response, pb.StopReplicaResponse)

        async def handler() -> None:
            await self._process_stop_replica_response(broker_id, request, response)

        self._enqueue(_Event("TopicDeletionStopReplicaResponseReceived", handler))

    async def _process_stop_replica_response(
        self, broker_id: int, request: pb.StopReplicaRequest, response: pb.StopReplicaResponse
    ) -> None:
        """A replica acknowledged its deletion (or failed: it is asked again when its broker
        restarts or a new controller takes over). The topic completes when all did."""
        ctx = self._require_ctx()
        errors = {(e.topic, e.partition): e.error_code for e in response.partition_errors}
        touched: set[str] = set()
        for part in request.partitions:
            pending = ctx.deletion_pending.get(part.topic)
            if not part.delete_partition or pending is None:
                continue
            code = response.error_code or errors.get((part.topic, part.partition), 0)
            if code:
                self._log.warning(
                    "broker %d could not delete %s-%d (error %d); retried when it restarts",
                    broker_id,
                    part.topic,
                    part.partition,
                    code,
                )
                continue
            pending.discard((TopicPartition(part.topic, part.partition), broker_id))
            touched.add(part.topic)
        for topic in sorted(touched):
            pending = ctx.deletion_pending.get(topic)
            if pending is not None and not pending:
                await self._complete_topic_deletion(topic)

    async def _complete_topic_deletion(self, topic: str) -> None:
        """Delete the topic's znodes (fenced, bottom up) and forget it."""
        ctx = self._require_ctx()
        for attempt in range(1, _TOPIC_DELETE_ATTEMPTS_MAX + 1):
            paths: list[str] = []
            try:
                partitions = await self._zk.get_children(zk_data.partitions_path(topic))
            except NoNodeError:
                partitions = []
            for p in sorted(partitions, key=lambda s: int(s) if s.isdigit() else -1):
                tp_path = f"{zk_data.partitions_path(topic)}/{p}"
                for child in await self._children_or_empty(tp_path):
                    paths.append(f"{tp_path}/{child}")
                paths.append(tp_path)
            if partitions or await self._zk.exists(zk_data.partitions_path(topic)) is not None:
                paths.append(zk_data.partitions_path(topic))
            for path in (
                zk_data.topic_path(topic),
                zk_data.topic_config_path(topic),
                zk_data.delete_topic_path(topic),
            ):
                if await self._zk.exists(path) is not None:
                    paths.append(path)
            try:
                if paths:
                    await self._fenced([DeleteOp(p) for p in paths])
                break
            except (NoNodeError, NotEmptyError) as e:
                if attempt == _TOPIC_DELETE_ATTEMPTS_MAX:
                    self._log.error("could not delete the znodes of topic %s: %s", topic, e)
                    return
        ctx.remove_topic(topic)
        self._partition_watchers.pop(topic, None)
        self._log.info("deletion of topic %s successfully completed", topic)

    async def _children_or_empty(self, path: str) -> list[str]:
        try:
            return await self._zk.get_children(path)
        except NoNodeError:
            return []


def _topic_result_pb(result: TopicResult) -> pb.TopicResult:
    return pb.TopicResult(
        name=result.name, error_code=result.error_code, error_message=result.error_message
    )


class _ControllerLog:
    """Log lines prefixed as Kafka's are: ``[Controller id=1 epoch=3]``."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    def _prefix(self) -> str:
        c = self._controller
        return f"[Controller id={c.broker_id} epoch={c.epoch}] "

    def debug(self, msg: str, *args: object) -> None:
        logger.debug(self._prefix() + msg, *args)

    def info(self, msg: str, *args: object) -> None:
        logger.info(self._prefix() + msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        logger.warning(self._prefix() + msg, *args)

    def error(self, msg: str, *args: object) -> None:
        logger.error(self._prefix() + msg, *args)

    def exception(self, msg: str, *args: object) -> None:
        logger.exception(self._prefix() + msg, *args)
