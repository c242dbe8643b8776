"""The controller's core: one event queue, election and fencing, fenced ZooKeeper writes, and
requests to brokers. Every other room of the controller builds on :class:`ControllerCore`.

* **Event queue** (Kafka's ``ControllerEventManager``): ZooKeeper watches, admin calls,
  controlled shutdowns and broker answers become :class:`_Event` s handled one at a time by
  one task, so the :class:`~controller.context.ControllerContext` is only ever changed by the
  event being handled. An event that needs the active controller fails with NOT_CONTROLLER
  elsewhere; one that finds the controller moved (:class:`ControllerMovedError`) resigns.
* **Election and fencing**: campaign with one ``multi`` (create the ephemeral ``/controller``,
  bump ``/controller_epoch``); the epoch znode's version then guards every write
  (:meth:`ControllerCore._fenced`); session expiry, a lost campaign or a fenced write resign.
* **Reads and writes of partition state**: the state znode is read before each decision and
  written with the version read; a state naming a newer controller epoch means this one is a
  zombie.
* **Requests to brokers**: decisions of one event are collected in a
  :class:`~controller.channel.RequestBatch` and sent through the
  :class:`~controller.channel.ControllerChannel`.

Three hooks are left to the rooms that own them: failover and reconnection
(:mod:`controller.cluster_changes`) and StopReplica answers (:mod:`controller.topic_deletion`).
Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from google.protobuf.message import Message

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    Coordination,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
)
from kafkasim.common.errors import KafkaError
from kafkasim.common.rpc import Transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import ControllerConfig, ControllerMovedError, NotControllerError
from kafkasim.controller.channel import ControllerChannel, RequestBatch, partition_state
from kafkasim.controller.context import ControllerContext, ControllerSnapshot, PartitionView
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.controller.zk_data import LeaderAndIsr
from kafkasim.proto import kafkasim_pb2 as pb

# The controller's log lines keep one logger name whichever room writes them.
logger = logging.getLogger("controller.controller")

_T = TypeVar("_T")

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
STATE_WRITE_ATTEMPTS_MAX = 10  # re-read/re-decide rounds after BadVersion before giving up
_MOVE_BACKOFF_S = 1.0  # after failing to become controller, before freeing /controller
_CAMPAIGN_ATTEMPTS_MAX = 3  # /controller vanished between a failed campaign and the re-read


@dataclass(eq=False)
class _Event:
    name: str
    handler: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any] | None = None
    requires_active: bool = True


def _parse_bool(value: str) -> bool | None:
    lowered = value.strip().lower()
    return {"true": True, "false": False}.get(lowered)


class ControllerCore(ABC):
    """Kafka's controller for one broker, its core: state, events, election, fenced writes.

    Instantiated only as :class:`controller.controller.Controller`, which adds the rooms.
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
        self._zk = RetryingCoordination(
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
        # One watcher object per path, so that re-registering does not stack duplicates (the
        # watchers of the other rooms are made by Controller.__init__).
        self._controller_watcher: Watcher = self._on_controller_watch
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

    async def stop(self, *, clean: bool = True) -> None:
        """Stop handling events and resign; pending admin calls get NOT_CONTROLLER.

        If this broker is the active controller and ``clean``, ``/controller`` is deleted
        (when it is still this session's) so that another broker takes over without waiting
        for the session to close. A crash (``clean=False``, kill -9) writes nothing: the
        znode goes with the session. The Coordination session itself belongs to the broker
        and stays open.
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
        if was_active and clean:
            await self._delete_own_controller_znode()
        self._notify_changed()

    async def replace_session(self, coordination: Coordination) -> None:
        """Use a new ZooKeeper session (after the old one expired) and campaign again."""

        async def handler() -> None:
            await self._resign()
            self._zk = RetryingCoordination(
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

    # -- hooks the other rooms fill in --------------------------------------------------------

    @abstractmethod
    async def _on_controller_failover(self) -> None:
        """Load the cluster and take charge (:mod:`controller.cluster_changes`)."""

    @abstractmethod
    async def _process_reconnected(self) -> None:
        """Same session after a connection loss: set every watch again
        (:mod:`controller.cluster_changes`)."""

    @abstractmethod
    def _on_stop_replica_response(
        self, broker_id: int, request: Message, response: Message
    ) -> None:
        """A StopReplica answer arrived (:mod:`controller.topic_deletion`)."""

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

    async def _read_cluster_id(self) -> str:
        try:
            data, _ = await self._zk.get(zk_data.CLUSTER_ID)
            return zk_data.decode_cluster_id(data)
        except (NoNodeError, ValueError, KeyError):
            return self._config.cluster_id

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


class _ControllerLog:
    """Log lines prefixed as Kafka's are: ``[Controller id=1 epoch=3]``."""

    def __init__(self, controller: ControllerCore) -> None:
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
