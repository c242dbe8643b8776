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

(One module, ~685 lines: it is the wiring of a broker — every component it builds, starts and
stops in one order; the parts live in their own modules (security in ``node.zk_security`` and
``node.sasl_config``, the coordinators in ``node.group_*`` and ``node.txn_*``).)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import random
import uuid
from collections.abc import Callable
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
from kafkasim.controller.stats import ControllerStats
from kafkasim.node import apis_admin
from kafkasim.node.acl_authorizer import acl_authorizer_for
from kafkasim.node.admin_calls import AdminCalls
from kafkasim.node.apis import KafkaApis
from kafkasim.node.broker_config_admin import load_dynamic_config
from kafkasim.node.config import BrokerConfig
from kafkasim.node.config_changes import TopicConfigChangeListener
from kafkasim.node.disk_delay import DiskSlot
from kafkasim.node.fetcher import ReplicaFetcherManager, StreamRoute
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.kafka_apis import KafkaProtocolApis, kafka_handler_tables
from kafkasim.node.kafka_server import KafkaListener
from kafkasim.node.listener_config import WIRE_KAFKA, WIRE_REPLICATION
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.node.metrics import BrokerMetrics
from kafkasim.node.offsets_topic import ReplicaOffsetsTopic, ReplicaTransactionLogTopic
from kafkasim.node.producer_ids import ProducerIdManager
from kafkasim.node.replica_manager import FetchTarget, ReplicaManager
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.node.sasl_auth import ListenerAuthenticator
from kafkasim.node.scram_cache import ScramCredentialCache
from kafkasim.node.topic_creation import TopicCreator, create_internal_topic
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.node.txn_marker_sender import rpc_marker_sender
from kafkasim.node.txn_markers import MarkerSender
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.checkpoint_writer import CheckpointWriter
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager, LogManagerSettings

if TYPE_CHECKING:
    from kafkasim.controller.controller import ControllerSnapshot

logger = logging.getLogger(__name__)

# How long a Kafka-protocol connection waits, before its first request is read, for the
# controller's first UpdateMetadata after a (re)start (node.metadata_cache.wait_ready).
METADATA_READY_WAIT_S = 15.0


class HostedController(AdminCalls, Protocol):
    """What the broker needs from the controller it hosts (``controller.controller``): its
    lifecycle, and the admin entry points the request layer calls (``node.apis_admin``)."""

    @property
    def is_active(self) -> bool: ...

    @property
    def stats(self) -> ControllerStats: ...

    def snapshot(self) -> ControllerSnapshot: ...

    async def start(self) -> None: ...

    async def stop(self, *, clean: bool = True) -> None: ...

    async def replace_session(self, coordination: Coordination) -> None: ...


ControllerFactory = Callable[[int, Coordination, Transport, Clock, BrokerConfig], HostedController]

MarkerSenderFactory = Callable[["Broker"], MarkerSender]
"""WriteTxnMarkers to partition leaders for the transaction coordinator (by default
``node.txn_marker_sender.rpc_marker_sender``: the inter-broker transport)."""


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
        rules: ReplicationRules = KAFKA_RULES,
        marker_sender_factory: MarkerSenderFactory = rpc_marker_sender,
        checkpoint_writer: CheckpointWriter | None = None,
        replication_transport: Transport | None = None,
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
        # What serves and calls replication listeners (replica.fetch.listener.name): the
        # framed transport in a broker process (cli.broker), else the broker's own (the
        # simulation's SimNetwork carries the same stream).
        self.replication_transport = replication_transport or transport
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
            # Inline unless given one (the simulation's brokers: a thread runs outside virtual
            # time); a broker process writes its checkpoints from a thread (cli.broker).
            checkpoint_writer=checkpoint_writer,
        )
        self.log_manager.on_dir_failure = self._on_log_dir_failure
        # How slow its disk is: not slowed unless the simulation's slow_disk sets a delay.
        self.disk = DiskSlot()
        self.replica_manager = ReplicaManager(
            self.broker_id,
            config,
            self.log_manager,
            clock,
            self.zk,
            topic_config=self.topic_config,
            rules=rules,
            disk=self.disk,
        )
        fetch_listener = config.replica_fetch_listener
        self.fetchers = ReplicaFetcherManager(
            self.broker_id,
            self.metadata.address_of,
            transport,
            config,
            clock,
            rules=rules,
            disk=self.disk,
            stream_route=None
            if fetch_listener is None
            else StreamRoute(
                fetch_listener, self.metadata.listener_address_of, self.replication_transport
            ),
        )
        self.replica_manager.on_become_follower = self._follow
        self.replica_manager.on_stop_following = self.fetchers.remove
        self.replica_manager.is_broker_alive = lambda b: b in self.metadata.brokers
        # Kafka's ACL authorizer when authorizer.class.name names it (None: everything allowed).
        self.authorizer = acl_authorizer_for(config, self.zk)
        # SCRAM credentials from /config/users, kept current by the config notifications.
        self.scram_credentials = ScramCredentialCache()
        # Topic config changes (/config/changes) applied to the cache and the live logs.
        self.config_changes = TopicConfigChangeListener(
            self.broker_id,
            self.zk,
            config,
            self._topic_configs,
            self.log_manager,
            scram_credentials=self.scram_credentials,
        )
        self.server: RpcServer | None = None  # the inter-broker listener's
        # Every gRPC and replication listener's server, by name.
        self.servers: dict[str, RpcServer] = {}
        self.kafka_listeners: dict[str, KafkaListener] = {}  # the Kafka-protocol ones
        # Idempotent producers' ids; made in start(), once the ZooKeeper session exists.
        self.producer_ids: ProducerIdManager | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        # Consumer groups of the __consumer_offsets partitions this broker leads; a transaction
        # marker written to one of them completes the transactional offset commits there.
        self.groups = GroupCoordinator(
            self.broker_id, config, ReplicaOffsetsTopic(self.replica_manager), clock, self._rng
        )
        self.replica_manager.on_txn_markers_written = self.groups.on_txn_markers_written
        # Transactional ids of the __transaction_state partitions this broker leads.
        self.transactions = TransactionCoordinator(
            self.broker_id,
            config,
            log_topic=ReplicaTransactionLogTopic(self.replica_manager),
            producer_ids=self._generate_producer_id,
            marker_sender=marker_sender_factory(self),
            leaders=self.metadata.marker_leader,
            offsets_partitions=lambda: self.groups.partition_count,
            clock=clock,
        )
        self.topic_creator = TopicCreator(
            config, self._create_topics_via_controller, self._create_internal_topic
        )
        self.metrics = BrokerMetrics(self)
        # The request layer: every gRPC method's handler (translation to domain calls).
        self.apis = KafkaApis(self)

    # -- configuration ----------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        cached = self._topic_configs.get(topic)
        return cached if cached is not None else self.config.log_config()

    async def load_topic_config(self, topic: str) -> None:
        """Read ``topic``'s config overrides from ZooKeeper into the cache, once."""
        if topic in self._topic_configs:
            return
        try:
            data, _ = await self.zk.get(zk_data.topic_config_path(topic))
            overrides = zk_data.decode_topic_config(data)
        except NoNodeError:
            overrides = {}
        self._topic_configs[topic] = self.config.log_config(overrides)

    def forget_topic_config(self, topic: str) -> None:
        """``topic`` was deleted: its cached config goes with it."""
        self._topic_configs.pop(topic, None)

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

    def _authenticator(self, listener: str) -> ListenerAuthenticator | None:
        """The SASL users of ``listener`` (None: it does not authenticate with SASL)."""
        settings = self.config.listener_sasl(listener)
        if settings is None:
            return None
        return ListenerAuthenticator(settings, self.scram_credentials)

    async def start(self) -> None:
        logger.info("broker %d starting", self.broker_id)
        # As Kafka: ZooKeeper first, for the cluster id the log dirs must agree with; a log
        # dir of another cluster stops the start (InconsistentClusterIdError).
        await self.zk.start()
        try:
            await self._ensure_persistent_paths()
            await load_dynamic_config(self.zk, self.config)  # in force before any log loads
            self.log_manager.cluster_id = self.metadata.cluster_id
            self.log_manager.startup()
        except BaseException:
            with contextlib.suppress(CoordinationError):
                await self.zk.close()
            raise
        self.zk.add_session_listener(self._on_session_state)
        await self.config_changes.start()
        await self.scram_credentials.load_all(self.zk)
        if self.authorizer is not None:
            await self.authorizer.start()
        self.producer_ids = ProducerIdManager(self.broker_id, self.zk)
        # As Kafka's ZooKeeper-mode broker: groups map over the partitions __consumer_offsets
        # has (an older run may have made it with another count), read before serving.
        self.groups.set_partition_count(
            await self._internal_topic_partition_count(
                OFFSETS_TOPIC, "offsets.topic.num.partitions"
            )
        )
        self.transactions.set_partition_count(
            await self._internal_topic_partition_count(
                TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions"
            )
        )
        # One server per listener (Kafka's listeners): the same handlers, except that the
        # answers naming brokers name them by the listener the request came in on.
        inter_broker = self.config.inter_broker_listener
        wire = self.config.wire_protocols
        for name, (host, port) in self.config.listeners.items():
            if wire[name] == WIRE_KAFKA:
                listener = KafkaListener(
                    host,
                    port,
                    KafkaProtocolApis(self, name, kafka_handler_tables(self, name)),
                    max_request_bytes=self.config["socket.request.max.bytes"],
                    idle_timeout_ms=self.config["connections.max.idle.ms"],
                    ready=functools.partial(self.metadata.wait_ready, METADATA_READY_WAIT_S),
                    listener=name,
                    tls=self.config.listener_tls(name),
                    sasl=self._authenticator(name),
                    sasl_max_receive_size=self.config["sasl.server.max.receive.size"],
                )
                await listener.start()
                self.kafka_listeners[name] = listener
                continue
            if wire[name] == WIRE_REPLICATION:
                # Followers' fetches only (node.rpc_framed), authorized as on any listener.
                fetch = self.apis.stream_handlers()[proto.METHOD_REPLICA_FETCH]
                server = self.replication_transport.server(
                    f"{host}:{port}",
                    {},
                    self.metrics.instrument_streams({proto.METHOD_REPLICA_FETCH: fetch}),
                    tls=self.config.listener_tls(name),
                    listener=name,
                )
                await server.start()
                self.servers[name] = server
                continue
            server = self.transport.server(
                f"{host}:{port}",
                self.metrics.instrument(self.apis.unary_handlers(name)),
                self.metrics.instrument_streams(self.apis.stream_handlers()),
                tls=self.config.listener_tls(name),
                listener=name,
                sasl=self._authenticator(name),
            )
            await server.start()
            self.servers[name] = server
            if name == inter_broker:
                self.server = server
        host, _ = self.config.listen_address
        if self.config["metrics.port"] >= 0:
            bound = self.metrics.serve(host, self.config["metrics.port"])
            # With metrics.port=0 the log is the only place that says which port it took.
            logger.info("broker %d: metrics on http://%s/metrics", self.broker_id, bound)
        await self._register()
        if self._controller_factory is not None:
            self.controller = self._controller_factory(
                self.broker_id, self.zk, self.transport, self.clock, self.config
            )
            await self.controller.start()
        self._running = True
        self.groups.start()
        self.transactions.start()
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
            bound = self.servers.get(name) or self.kafka_listeners.get(name)
            port = advertised_port
            if port == 0 and bound is not None:  # an ephemeral port: the one it got
                port = int(bound.address.rpartition(":")[2])
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
            if self.authorizer is not None:
                self.authorizer.replace_coordination(self.zk)
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
        await self.transactions.stop()
        await self.fetchers.shutdown()
        await self.config_changes.stop()
        if self.authorizer is not None:
            await self.authorizer.stop()
        for server in self.servers.values():
            await server.stop(0.0)
        self.servers = {}
        for listener in self.kafka_listeners.values():
            await listener.stop()
        self.kafka_listeners = {}
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
        # Kafka makes controlled.shutdown.max.retries attempts in all (not one plus that many
        # retries: KafkaServer.controlledShutdown counts them down from the setting).
        retries = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(retries):
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
            if attempt < retries - 1:
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
            return await apis_admin.create_topics(self.controller, request)
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

    async def _internal_topic_partition_count(self, topic: str, config_key: str) -> int:
        """An internal topic's partition count in ZooKeeper, else ``config_key``'s."""
        try:
            data, _ = await self.zk.get(zk_data.topic_path(topic))
        except NoNodeError:
            return int(self.config[config_key])
        return len(zk_data.decode_topic_assignment(data))

    # -- transaction coordinator ports ------------------------------------------------------

    async def _generate_producer_id(self) -> int:
        if self.producer_ids is None:
            raise error_for_name("COORDINATOR_LOAD_IN_PROGRESS")(
                f"broker {self.broker_id} has no producer id manager yet"
            )
        return await self.producer_ids.generate_producer_id()

    # -- follower plumbing ------------------------------------------------------------------

    def _follow(self, targets: list[FetchTarget]) -> None:
        for target in targets:
            partition = self.replica_manager.partitions.get(target.tp)
            if partition is not None:
                self.fetchers.add(partition, target.leader_id, target.leader_epoch)


def new_cluster_id(rng: random.Random) -> str:
    """A Kafka-style cluster id: a random UUID as 22 characters of URL-safe base64."""
    raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
