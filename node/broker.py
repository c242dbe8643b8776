"""A broker: storage, replica manager, fetchers, the hosted controller, and its RPC server.

Lifecycle (``start``):
  1. open the ZooKeeper session, create Kafka's persistent paths and ``/cluster/id`` (the
     first broker to start generates it);
  2. check the log dirs' ``meta.properties`` against the broker id and the cluster id (a dir
     of another cluster is refused), write them where missing, then open every log (recovery
     after a crash) — ``storage.LogManager``;
  3. start the RPC server (client API, replication stream, controller requests);
  4. register ``/brokers/ids/<id>`` (ephemeral; the znode's czxid is this broker's epoch);
     a restart waits until the previous session's registration has expired;
  5. start the controller (every broker campaigns; one wins ``/controller``);
  6. run the periodic tasks: ISR expiration (every ``replica.lag.time.max.ms`` / 2), HW
     checkpoint, log retention/flush/cleaner ticks.

``shutdown`` is a controlled shutdown: ask the controller to move leadership away (retried
``controlled.shutdown.max.retries`` times), then stop fetchers, close logs cleanly (flush,
checkpoints, clean-shutdown marker), close the session and stop serving. ``crash`` (tests and
the simulation) stops everything without any of that.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kafkasim import proto
from kafkasim.common.clock import Clock
from kafkasim.common.coordination import (
    Coordination,
    CoordinationError,
    NodeExistsError,
    NoNodeError,
    SessionState,
)
from kafkasim.common.errors import KafkaError, error_for_code, error_for_name
from kafkasim.common.rpc import RpcError, RpcServer, RpcStatus, Transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.controller import Controller, ControllerConfig
from kafkasim.node.config import BrokerConfig
from kafkasim.node.config_changes import TopicConfigChangeListener
from kafkasim.node.fetcher import ReplicaFetcherManager
from kafkasim.node.group_apis import ReplicaOffsetsTopic, group_handlers
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.node.metrics import BrokerMetrics
from kafkasim.node.producer_ids import ProducerIdManager, handle_init_producer_id
from kafkasim.node.replica_manager import FetchTarget, ReplicaManager
from kafkasim.node.topic_creation import TopicCreator, create_internal_topic
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager, LogManagerSettings

if TYPE_CHECKING:
    from kafkasim.controller.controller import ControllerSnapshot

logger = logging.getLogger(__name__)

NOT_CONTROLLER = error_for_name("NOT_CONTROLLER").code
STALE_BROKER_EPOCH = error_for_name("STALE_BROKER_EPOCH").code


class HostedController(Protocol):
    """What the broker needs from the controller it hosts (``controller.controller``)."""

    @property
    def is_active(self) -> bool: ...

    def snapshot(self) -> ControllerSnapshot: ...

    async def start(self) -> None: ...

    async def stop(self, *, clean: bool = True) -> None: ...

    async def replace_session(self, coordination: Coordination) -> None: ...

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]: ...

    async def handle_create_topics(
        self, request: pb.CreateTopicsRequest
    ) -> pb.CreateTopicsResponse: ...

    async def handle_delete_topics(
        self, request: pb.DeleteTopicsRequest
    ) -> pb.DeleteTopicsResponse: ...

    async def handle_create_partitions(
        self, request: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse: ...

    async def handle_elect_leaders(
        self, request: pb.ElectLeadersRequest
    ) -> pb.ElectLeadersResponse: ...

    async def handle_incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse: ...

    async def handle_controlled_shutdown(
        self, request: pb.ControlledShutdownRequest
    ) -> pb.ControlledShutdownResponse: ...


ControllerFactory = Callable[[int, Coordination, Transport, Clock, BrokerConfig], HostedController]


def controller_factory(rng_for: Callable[[int], random.Random]) -> ControllerFactory:
    """The factory of the controller every broker hosts; ``rng_for(broker_id)`` gives its
    randomness (seeded in the simulation, fresh in real processes)."""

    def make(
        broker_id: int, zk: Coordination, transport: Transport, clock: Clock, config: BrokerConfig
    ) -> HostedController:
        return Controller(
            broker_id,
            zk,
            transport,
            clock,
            config=ControllerConfig.from_broker_config(
                config.config, inter_broker_listener_name=config.inter_broker_listener
            ),
            rng=rng_for(broker_id),
        )

    return make


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        transport: Transport,
        coordination_factory: Callable[[], Coordination],
        clock: Clock,
        controller_factory: ControllerFactory | None = None,
        rng: random.Random | None = None,
        halt: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        # What a fatal storage failure does (Kafka's Exit.halt(1)): the broker process exits at
        # once (cli.broker), or the simulation crashes this broker. None: it crashes itself.
        self._halt = halt
        self._halting: asyncio.Task[None] | None = None
        # Randomness (the cluster id) comes from here: seeded in the simulation.
        self._rng = rng or random.Random()
        self.broker_id = config.broker_id
        self.transport = transport
        # A ZooKeeper session cannot be revived once expired: a new one comes from the factory.
        self._coordination_factory = coordination_factory
        self.zk = coordination_factory()
        self.clock = clock
        self._controller_factory = controller_factory
        self.controller: HostedController | None = None
        self.broker_epoch = -1
        self.metadata = MetadataCache(self.broker_id)
        self._topic_configs: dict[str, LogConfig] = {}
        self.log_manager = LogManager(
            config.log_dirs,
            config.log_config(),
            clock,
            settings=LogManagerSettings.from_broker(config.config),
            broker_id=self.broker_id,
            topic_config=self.topic_config,
        )
        self.log_manager.on_dir_failure = self._on_log_dir_failure
        self.replica_manager = ReplicaManager(
            self.broker_id,
            config,
            self.log_manager,
            clock,
            self.zk,
            topic_config=self.topic_config,
        )
        self.fetchers = ReplicaFetcherManager(
            self.broker_id, self.metadata.address_of, transport, config, clock
        )
        self.replica_manager.on_become_follower = self._follow
        self.replica_manager.on_stop_following = self.fetchers.remove
        self.replica_manager.is_broker_alive = lambda b: b in self.metadata.brokers
        # Topic config changes (/config/changes) applied to the cache and the live logs.
        self.config_changes = TopicConfigChangeListener(
            self.broker_id, self.zk, config, self._topic_configs, self.log_manager
        )
        self.server: RpcServer | None = None  # the inter-broker listener's
        self.servers: dict[str, RpcServer] = {}  # every listener's, by name
        # Idempotent producers' ids; made in start(), once the ZooKeeper session exists.
        self.producer_ids: ProducerIdManager | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        # Consumer groups of the __consumer_offsets partitions this broker leads.
        self.groups = GroupCoordinator(
            self.broker_id, config, ReplicaOffsetsTopic(self.replica_manager), clock, self._rng
        )
        self.topic_creator = TopicCreator(
            config, self._create_topics_via_controller, self._create_internal_topic
        )
        self.metrics = BrokerMetrics(self)

    # -- configuration ----------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        cached = self._topic_configs.get(topic)
        return cached if cached is not None else self.config.log_config()

    async def _load_topic_config(self, topic: str) -> None:
        if topic in self._topic_configs:
            return
        try:
            data, _ = await self.zk.get(zk_data.topic_config_path(topic))
            overrides = zk_data.decode_topic_config(data)
        except NoNodeError:
            overrides = {}
        self._topic_configs[topic] = self.config.log_config(overrides)

    @property
    def address(self) -> str:
        if self.server is None:
            raise RuntimeError(f"broker {self.broker_id} is not serving")
        return self.server.address

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of GET /metrics (Prometheus), or None when ``metrics.port`` is -1."""
        return self.metrics.address

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        logger.info("broker %d starting", self.broker_id)
        # As Kafka: ZooKeeper first, for the cluster id the log dirs must agree with; a log
        # dir of another cluster stops the start (InconsistentClusterIdError).
        await self.zk.start()
        try:
            await self._ensure_persistent_paths()
            self.log_manager.cluster_id = self.metadata.cluster_id
            self.log_manager.startup()
        except BaseException:
            with contextlib.suppress(CoordinationError):
                await self.zk.close()
            raise
        self.zk.add_session_listener(self._on_session_state)
        await self.config_changes.start()
        self.producer_ids = ProducerIdManager(self.broker_id, self.zk)
        # As Kafka's ZooKeeper-mode broker: groups map over the partitions __consumer_offsets
        # has (an older run may have made it with another count), read before serving.
        self.groups.set_partition_count(await self._offsets_topic_partition_count())
        # One server per listener (Kafka's listeners): the same handlers, except that the
        # answers naming brokers name them by the listener the request came in on.
        inter_broker = self.config.inter_broker_listener
        for name, (host, port) in self.config.listeners.items():
            server = self.transport.server(
                f"{host}:{port}",
                self.metrics.instrument(self._unary_handlers(name)),
                self.metrics.instrument_streams(self._stream_handlers()),
            )
            await server.start()
            self.servers[name] = server
            if name == inter_broker:
                self.server = server
        host, _ = self.config.listen_address
        if self.config["metrics.port"] >= 0:
            self.metrics.serve(host, self.config["metrics.port"])
        await self._register()
        if self._controller_factory is not None:
            self.controller = self._controller_factory(
                self.broker_id, self.zk, self.transport, self.clock, self.config
            )
            await self.controller.start()
        self._running = True
        self.groups.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(
                self._every(
                    self.replica_manager.lag_time_max_ms // 2, self.replica_manager.maybe_shrink_isr
                ),
                name=f"broker-{self.broker_id}-isr-expiration",
            ),
            loop.create_task(
                self._every(
                    self.config["replica.high.watermark.checkpoint.interval.ms"],
                    self.replica_manager.checkpoint_high_watermarks,
                ),
                name=f"broker-{self.broker_id}-hw-checkpoint",
            ),
            loop.create_task(
                self._every(1000, self.log_manager.tick), name=f"broker-{self.broker_id}-log-tasks"
            ),
        ]
        logger.info(
            "broker %d started on %s (epoch %d)", self.broker_id, self.address, self.broker_epoch
        )

    async def _every(self, interval_ms: int, task: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 1) / 1000)
            try:
                task()
            except Exception:
                logger.exception("broker %d: periodic task %s failed", self.broker_id, task)

    async def _ensure_persistent_paths(self) -> None:
        for path in zk_data.PERSISTENT_PATHS:
            with contextlib.suppress(NodeExistsError):
                await self.zk.create(path, b"", makepath=True)
        try:
            data, _ = await self.zk.get(zk_data.CLUSTER_ID)
            self.metadata.cluster_id = zk_data.decode_cluster_id(data)
        except NoNodeError:
            cluster_id = new_cluster_id(self._rng)
            try:
                await self.zk.create(
                    zk_data.CLUSTER_ID, zk_data.encode_cluster_id(cluster_id), makepath=True
                )
                self.metadata.cluster_id = cluster_id
            except NodeExistsError:
                data, _ = await self.zk.get(zk_data.CLUSTER_ID)
                self.metadata.cluster_id = zk_data.decode_cluster_id(data)

    async def _register(self) -> None:
        """Create /brokers/ids/<id>, waiting out a previous session's registration."""
        endpoints: list[tuple[str, str, int]] = []
        for name, (host, advertised_port) in self.config.advertised_listeners.items():
            server = self.servers.get(name)
            port = advertised_port
            if port == 0 and server is not None:  # an ephemeral port: the one it got
                port = int(server.address.rpartition(":")[2])
            endpoints.append((name, host, port))
        _, host, port = next(e for e in endpoints if e[0] == self.config.inter_broker_listener)
        info = zk_data.BrokerInfo(
            self.broker_id, host, port, self.config["broker.rack"], endpoints=tuple(endpoints)
        )
        path = zk_data.broker_path(self.broker_id)
        data = zk_data.encode_broker(info, self.clock.time_ms())
        deadline = self.clock.monotonic_ms() + self.config["zookeeper.session.timeout.ms"] * 2
        while True:
            try:
                await self.zk.create(path, data, ephemeral=True)
                break
            except NodeExistsError:
                stat = await self.zk.exists(path)
                if stat is not None and stat.ephemeral_owner == self.zk.session_id:
                    break
                if self.clock.monotonic_ms() > deadline:
                    raise
                logger.info(
                    "broker %d: %s still held by an old session; waiting", self.broker_id, path
                )
                await asyncio.sleep(0.5)
        stat = await self.zk.exists(path)
        self.broker_epoch = stat.czxid if stat is not None else -1
        self.metadata.add_brokers([pb.BrokerEndpoint(node_id=self.broker_id, host=host, port=port)])

    def _on_session_state(self, state: SessionState) -> None:
        if state is SessionState.EXPIRED and self._running:
            logger.warning("broker %d: ZooKeeper session expired; re-registering", self.broker_id)
            task = asyncio.get_running_loop().create_task(self._recover_session())
            self._tasks.append(task)

    async def _recover_session(self) -> None:
        try:
            old = self.zk
            self.zk = self._coordination_factory()
            await self.zk.start()
            self.zk.add_session_listener(self._on_session_state)
            self.replica_manager.set_coordination(self.zk)
            self.config_changes.replace_coordination(self.zk)
            if self.producer_ids is not None:
                self.producer_ids.replace_coordination(self.zk)
            with contextlib.suppress(CoordinationError):
                await old.close()
            await self._register()
            if self.controller is not None:
                await self.controller.replace_session(self.zk)
        except (CoordinationError, KafkaError) as e:
            logger.error(
                "broker %d: could not re-register after session expiry: %s", self.broker_id, e
            )

    async def shutdown(self) -> None:
        """Controlled shutdown, then a clean stop."""
        if not self._running:
            return
        if self.config["controlled.shutdown.enable"]:
            await self._controlled_shutdown()
        await self._stop(clean=True)

    def _on_log_dir_failure(self, log_dir: Path, reason: str) -> None:
        """A log dir went offline (an I/O error: a full or failed disk). Kafka halts the broker
        when no log dir is left; kafkasim halts it on any failed dir, since it does not move
        a failed dir's replicas elsewhere while the broker runs (Kafka's JBOD handling). The
        controller then sees the broker gone and elects new leaders from the ISR; once the disk
        is mended the broker restarts and recovers its logs."""
        message = f"Halting broker {self.broker_id} because log dir {log_dir} has failed ({reason})"
        logger.critical(message)
        if self._halt is not None:
            self._halt(message)
        elif self._running and self._halting is None:
            self._halting = asyncio.get_running_loop().create_task(
                self.crash(), name=f"broker-{self.broker_id}-halt"
            )

    async def crash(self, *, drop_unflushed: bool = False) -> None:
        """Stop at once: no controlled shutdown, no flush, no checkpoints (like kill -9).

        ``drop_unflushed`` (the simulation) also loses every byte not yet fsynced, as a
        machine that loses power would.
        """
        await self._stop(clean=False, drop_unflushed=drop_unflushed)

    async def _stop(self, *, clean: bool, drop_unflushed: bool = False) -> None:
        self._running = False
        self.metrics.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.groups.stop()
        await self.fetchers.shutdown()
        await self.config_changes.stop()
        for server in self.servers.values():
            await server.stop(0.0)
        self.servers = {}
        if self.controller is not None:
            await self.controller.stop(clean=clean)
        await self.replica_manager.close()
        if clean:
            self.log_manager.shutdown()
            with contextlib.suppress(CoordinationError):
                await self.zk.close()
        else:
            # Like kill -9: files as they are, and the ZooKeeper session left to expire on the
            # server after zookeeper.session.timeout.ms (the registration goes then).
            for log in self.log_manager.logs.values():
                if drop_unflushed:
                    log.drop_unflushed()
                log.close_handlers()
        await self.transport.close()
        logger.info("broker %d stopped (%s)", self.broker_id, "clean" if clean else "crash")

    async def _controlled_shutdown(self) -> None:
        retries = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(retries + 1):
            try:
                remaining = await self._request_controlled_shutdown()
            except (RpcError, KafkaError, CoordinationError) as e:
                logger.info(
                    "broker %d: controlled shutdown attempt %d failed: %s",
                    self.broker_id,
                    attempt + 1,
                    e,
                )
            else:
                if not remaining:
                    logger.info("broker %d: controlled shutdown succeeded", self.broker_id)
                    return
                logger.info(
                    "broker %d: %d partitions still led here", self.broker_id, len(remaining)
                )
            if attempt < retries:
                await asyncio.sleep(backoff_s)
        logger.warning(
            "broker %d: controlled shutdown did not complete; stopping anyway", self.broker_id
        )

    async def _request_controlled_shutdown(self) -> list[TopicPartition]:
        if self.controller is not None and self.controller.is_active:
            return await self.controller.controlled_shutdown(self.broker_id, self.broker_epoch)
        response = await self._call_remote_controller(
            proto.METHOD_CONTROLLED_SHUTDOWN,
            pb.ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch),
        )
        assert isinstance(response, pb.ControlledShutdownResponse)
        if response.error_code:
            raise error_for_code(response.error_code)("controlled shutdown refused")
        return [TopicPartition(p.topic, p.partition) for p in response.remaining_partitions]

    async def _call_remote_controller(self, method: str, request: Any) -> Any:
        """Send ``request`` to the active controller named in ``/controller``."""
        data, _ = await self.zk.get(zk_data.CONTROLLER)
        controller_id = zk_data.decode_controller(data)
        address = self.metadata.address_of(controller_id)
        if address is None:
            raise RpcError(
                RpcStatus.UNAVAILABLE, f"controller {controller_id}'s address is unknown"
            )
        return await self.transport.call(
            address, method, request, timeout_s=self.config["controller.socket.timeout.ms"] / 1000
        )

    async def _create_internal_topic(self, topic: pb.CreatableTopic) -> tuple[int, str]:
        """An internal topic, written to ZooKeeper by this broker (see node.topic_creation)."""
        return await create_internal_topic(self.zk, topic, sorted(self.metadata.brokers), self._rng)

    async def _create_topics_via_controller(
        self, request: pb.CreateTopicsRequest
    ) -> pb.CreateTopicsResponse:
        """Topics created on a client's behalf (auto-creation, ``__consumer_offsets``)."""
        if self.controller is not None and self.controller.is_active:
            return await self.controller.handle_create_topics(request)
        try:
            response = await self._call_remote_controller(proto.METHOD_CREATE_TOPICS, request)
        except (RpcError, CoordinationError) as e:
            code = error_for_name("COORDINATOR_NOT_AVAILABLE").code
            return pb.CreateTopicsResponse(
                topics=[
                    pb.TopicResult(name=t.name, error_code=code, error_message=str(e))
                    for t in request.topics
                ]
            )
        assert isinstance(response, pb.CreateTopicsResponse)
        return response

    async def _offsets_topic_partition_count(self) -> int:
        """``__consumer_offsets``' partition count in ZooKeeper, else the count this broker
        would create it with (``offsets.topic.num.partitions``)."""
        try:
            data, _ = await self.zk.get(zk_data.topic_path(OFFSETS_TOPIC))
        except NoNodeError:
            return int(self.config["offsets.topic.num.partitions"])
        return len(zk_data.decode_topic_assignment(data))

    # -- follower plumbing ------------------------------------------------------------------

    def _follow(self, targets: list[FetchTarget]) -> None:
        for target in targets:
            partition = self.replica_manager.partitions.get(target.tp)
            if partition is not None:
                self.fetchers.add(partition, target.leader_id, target.leader_epoch)

    # -- request handlers -------------------------------------------------------------------

    def _unary_handlers(self, listener: str) -> dict[str, Callable[[Any], Awaitable[Any]]]:
        return {
            proto.METHOD_METADATA: functools.partial(self._handle_metadata, listener=listener),
            proto.METHOD_PRODUCE: self._handle_produce,
            proto.METHOD_FETCH: self.replica_manager.fetch,
            proto.METHOD_LIST_OFFSETS: self._sync(self.replica_manager.list_offsets),
            proto.METHOD_DELETE_RECORDS: self.replica_manager.delete_records,
            proto.METHOD_CREATE_TOPICS: self._admin(
                pb.CreateTopicsResponse, "handle_create_topics"
            ),
            proto.METHOD_DELETE_TOPICS: self._admin(
                pb.DeleteTopicsResponse, "handle_delete_topics"
            ),
            proto.METHOD_CREATE_PARTITIONS: self._admin(
                pb.CreatePartitionsResponse, "handle_create_partitions"
            ),
            proto.METHOD_ELECT_LEADERS: self._admin(
                pb.ElectLeadersResponse, "handle_elect_leaders"
            ),
            proto.METHOD_INCREMENTAL_ALTER_CONFIGS: self._admin(
                pb.IncrementalAlterConfigsResponse, "handle_incremental_alter_configs"
            ),
            proto.METHOD_DESCRIBE_CLUSTER: functools.partial(
                self._handle_describe_cluster, listener=listener
            ),
            proto.METHOD_INIT_PRODUCER_ID: self._handle_init_producer_id,
            proto.METHOD_DESCRIBE_REPLICAS: self._sync(self.replica_manager.describe_replicas),
            proto.METHOD_DESCRIBE_CONFIGS: self._handle_describe_configs,
            proto.METHOD_OFFSETS_FOR_LEADER_EPOCH: self._sync(
                self.replica_manager.offsets_for_leader_epoch
            ),
            proto.METHOD_LEADER_AND_ISR: self._handle_leader_and_isr,
            proto.METHOD_UPDATE_METADATA: self._handle_update_metadata,
            proto.METHOD_STOP_REPLICA: self._handle_stop_replica,
            proto.METHOD_CONTROLLED_SHUTDOWN: self._handle_controlled_shutdown,
            proto.METHOD_FIND_COORDINATOR: functools.partial(
                self._handle_find_coordinator, listener=listener
            ),
            **group_handlers(self.groups),
        }

    def _stream_handlers(self) -> dict[str, Callable[[AsyncIterator[Any]], AsyncIterator[Any]]]:
        return {
            proto.METHOD_REPLICA_FETCH: self._handle_replica_fetch,
            proto.METHOD_PRODUCE_STREAM: self._handle_produce_stream,
        }

    def _sync(self, fn: Callable[[Any], Any]) -> Callable[[Any], Awaitable[Any]]:
        async def handler(request: Any) -> Any:
            return fn(request)

        return handler

    def _admin(self, response_cls: type[Any], method: str) -> Callable[[Any], Awaitable[Any]]:
        async def handler(request: Any) -> Any:
            if self.controller is None:
                return _not_controller_response(request, response_cls)
            # The controller answers NOT_CONTROLLER itself when it is not the active one.
            return await getattr(self.controller, method)(request)

        return handler

    async def _handle_metadata(
        self, request: pb.MetadataRequest, *, listener: str
    ) -> pb.MetadataResponse:
        response = self.metadata.metadata(request, listener)
        if not (request.allow_auto_topic_creation and self.topic_creator.auto_create_enabled):
            return response
        unknown = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code
        for entry in response.topics:
            if entry.error_code != unknown:
                continue
            # Kafka creates the topic and answers LEADER_NOT_AVAILABLE until it has leaders.
            code, message = await self.topic_creator.create(
                self.topic_creator.auto_topic(entry.name)
            )
            entry.error_code = code or error_for_name("LEADER_NOT_AVAILABLE").code
            if code:
                logger.info("broker %d: auto-creating %s: %s", self.broker_id, entry.name, message)
        return response

    async def _handle_find_coordinator(
        self, request: pb.FindCoordinatorRequest, *, listener: str
    ) -> pb.FindCoordinatorResponse:
        if request.key_type != 0:
            return pb.FindCoordinatorResponse(
                error_code=error_for_name("INVALID_REQUEST").code,
                error_message=f"key_type {request.key_type}: only groups (0) have coordinators "
                "here (no transactions)",
                node_id=-1,
            )
        if not request.key:
            return pb.FindCoordinatorResponse(
                error_code=error_for_name("INVALID_GROUP_ID").code,
                error_message="the group id is empty",
                node_id=-1,
            )
        not_available = error_for_name("COORDINATOR_NOT_AVAILABLE").code
        partition = self.groups.partition_of(request.key)
        if self.metadata.partition_count(OFFSETS_TOPIC) == 0:
            code, message = await self.topic_creator.create(self.topic_creator.offsets_topic())
            return pb.FindCoordinatorResponse(
                error_code=not_available,
                error_message=f"creating {OFFSETS_TOPIC}"
                + (f": {error_for_code(code).error_name}: {message}" if code else ""),
                node_id=-1,
            )
        state = self.metadata.partitions.get(TopicPartition(OFFSETS_TOPIC, partition))
        endpoint = self.metadata.endpoint_for(state.leader, listener) if state is not None else None
        if endpoint is None:
            return pb.FindCoordinatorResponse(
                error_code=not_available,
                error_message=f"{OFFSETS_TOPIC}-{partition} has no live leader",
                node_id=-1,
            )
        return pb.FindCoordinatorResponse(
            node_id=endpoint.node_id, host=endpoint.host, port=endpoint.port
        )

    async def _handle_produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        # acks=0 producers do not wait for this answer (it comes back at once: no purgatory).
        return await self.replica_manager.produce(request)

    async def _handle_init_producer_id(
        self, request: pb.InitProducerIdRequest
    ) -> pb.InitProducerIdResponse:
        return await handle_init_producer_id(self.producer_ids, request)

    async def _handle_describe_cluster(
        self, _request: pb.DescribeClusterRequest, *, listener: str
    ) -> pb.DescribeClusterResponse:
        response = pb.DescribeClusterResponse(
            cluster_id=self.metadata.cluster_id, controller_id=self.metadata.controller_id
        )
        for broker_id in sorted(self.metadata.brokers):
            endpoint = self.metadata.endpoint_for(broker_id, listener)
            if endpoint is not None:
                response.brokers.append(endpoint)
        return response

    async def _handle_describe_configs(
        self, request: pb.DescribeConfigsRequest
    ) -> pb.DescribeConfigsResponse:
        response = pb.DescribeConfigsResponse()
        for resource in request.resources:
            result = response.results.add(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            if resource.resource_type == 2:  # topic
                try:
                    data, _ = await self.zk.get(zk_data.topic_config_path(resource.resource_name))
                    overrides = zk_data.decode_topic_config(data)
                except NoNodeError:
                    result.error_code = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code
                    result.error_message = f"topic {resource.resource_name} does not exist"
                    continue
                values = self.config.log_config(overrides).to_props()
                for name in sorted(values):
                    if resource.config_names and name not in resource.config_names:
                        continue
                    value = values[name]
                    text = (
                        ",".join(value)
                        if isinstance(value, list)
                        else str(value).lower()
                        if isinstance(value, bool)
                        else str(value)
                    )
                    result.configs.add(
                        name=name,
                        value=text,
                        is_default=name not in overrides,
                        config_source=1 if name in overrides else 5,
                    )
            elif resource.resource_type == 4:  # broker
                for name in sorted(self.config.config.values):
                    if resource.config_names and name not in resource.config_names:
                        continue
                    value = self.config.config.values[name]
                    if value is None:
                        continue
                    text = ",".join(value) if isinstance(value, list) else str(value)
                    result.configs.add(
                        name=name,
                        value=text,
                        read_only=True,
                        is_default=not self.config.config.is_set(name),
                        config_source=4 if self.config.config.is_set(name) else 5,
                    )
            else:
                result.error_code = error_for_name("INVALID_REQUEST").code
                result.error_message = f"unknown resource type {resource.resource_type}"
        return response

    async def _is_current_broker_epoch(self, kind: str, request_epoch: int) -> bool:
        """Whether a controller request is for this incarnation of the broker (KIP-380): its
        ``broker_epoch`` must be the czxid of this broker's current registration znode.

        Checked before anything else of the request, the controller epoch included, so a
        request that does not carry the right broker epoch changes nothing. Kafka accepts an
        unknown epoch (-1, from controllers older than KIP-380) and a newer one (the
        controller may see the new registration before the broker has read its czxid);
        kafkasim has no older controllers, so -1 is refused, and a newer one is accepted only
        when ZooKeeper confirms it is the czxid of this session's registration."""
        if request_epoch >= 0 and request_epoch == self.broker_epoch:
            return True
        if request_epoch > self.broker_epoch:
            try:
                stat = await self.zk.exists(zk_data.broker_path(self.broker_id))
            except CoordinationError:
                stat = None
            if (
                stat is not None
                and stat.ephemeral_owner == self.zk.session_id
                and stat.czxid == request_epoch
            ):
                self.broker_epoch = stat.czxid
                return True
        logger.warning(
            "broker %d: refusing %s with broker epoch %d (STALE_BROKER_EPOCH): the current "
            "broker epoch is %d",
            self.broker_id,
            kind,
            request_epoch,
            self.broker_epoch,
        )
        return False

    async def _handle_leader_and_isr(
        self, request: pb.LeaderAndIsrRequest
    ) -> pb.LeaderAndIsrResponse:
        if not await self._is_current_broker_epoch("LeaderAndIsr", request.broker_epoch):
            return pb.LeaderAndIsrResponse(error_code=STALE_BROKER_EPOCH)
        for topic in sorted({s.topic for s in request.partition_states}):
            await self._load_topic_config(topic)
        self.metadata.add_brokers(list(request.live_leaders))
        response = self.replica_manager.leader_and_isr(request)
        failed = {(e.topic, e.partition) for e in response.partition_errors if e.error_code}
        for state in request.partition_states:
            if state.topic == OFFSETS_TOPIC and (state.topic, state.partition) not in failed:
                if state.leader == self.broker_id:
                    self.groups.elect(state.partition, state.leader_epoch)
                else:
                    self.groups.resign(state.partition)
        return response

    async def _handle_stop_replica(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        if not await self._is_current_broker_epoch("StopReplica", request.broker_epoch):
            return pb.StopReplicaResponse(error_code=STALE_BROKER_EPOCH)
        response = self.replica_manager.stop_replica(request)
        if not response.error_code:
            for part in request.partitions:
                if part.topic == OFFSETS_TOPIC:
                    self.groups.resign(part.partition)
        return response

    async def _handle_update_metadata(
        self, request: pb.UpdateMetadataRequest
    ) -> pb.UpdateMetadataResponse:
        if not await self._is_current_broker_epoch("UpdateMetadata", request.broker_epoch):
            return pb.UpdateMetadataResponse(error_code=STALE_BROKER_EPOCH)
        if request.controller_epoch < self.replica_manager.controller_epoch:
            return pb.UpdateMetadataResponse(
                error_code=error_for_name("STALE_CONTROLLER_EPOCH").code
            )
        self.replica_manager.controller_epoch = request.controller_epoch
        for topic in request.deleted_topics:
            self._topic_configs.pop(topic, None)
        self.metadata.update(request)
        self.replica_manager.maybe_complete_delete_records()  # live brokers may have changed
        return pb.UpdateMetadataResponse()

    async def _handle_controlled_shutdown(
        self, request: pb.ControlledShutdownRequest
    ) -> pb.ControlledShutdownResponse:
        if self.controller is None:
            return pb.ControlledShutdownResponse(error_code=NOT_CONTROLLER)
        return await self.controller.handle_controlled_shutdown(request)

    async def _handle_produce_stream(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """A producer's pipelined connection: one request at a time, answered in order (as
        Kafka handles a connection); the client keeps several in flight to fill the pipe."""
        async for request in requests:
            yield await self.replica_manager.produce(request)

    async def _handle_replica_fetch(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """One follower's stream: answer each fetch in order (long-polling as needed)."""
        async for request in requests:
            yield await self.replica_manager.fetch(request)


def _not_controller_response(request: Any, response_cls: type[Any]) -> Any:
    """An admin response saying NOT_CONTROLLER for every item (or at the top level)."""
    response = response_cls()
    if hasattr(response, "error_code"):
        response.error_code = NOT_CONTROLLER
        return response
    if isinstance(request, pb.IncrementalAlterConfigsRequest):
        for resource in request.resources:
            response.responses.add(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                error_code=NOT_CONTROLLER,
                error_message="This is not the controller",
            )
        return response
    items = getattr(request, "topics", None) or getattr(request, "topic_names", [])
    field = "topics" if hasattr(response, "topics") else "results"
    for item in items:
        name = item if isinstance(item, str) else item.name
        getattr(response, field).add(
            name=name, error_code=NOT_CONTROLLER, error_message="This is not the controller"
        )
    return response


def new_cluster_id(rng: random.Random) -> str:
    """A Kafka-style cluster id: a random UUID as 22 characters of URL-safe base64."""
    raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
