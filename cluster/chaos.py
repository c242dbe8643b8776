"""Failure runs on real brokers: processes on this machine (``LOCAL``) and, through the same
seam, the containers of the compose cluster (``cluster.compose.COMPOSE``).

A real cluster is reached through ``ChaosBackend``: blocking steps (start/stop, kill with a
signal, start a broker, pause/resume, isolate/reconnect, "serving again", the controller, each
broker's log directory on the host). ``ProcessBackend`` turns one into the runner's
``faults.backend.Backend``: each blocking step in a worker thread (the workload shares the
event loop), clients over gRPC, the replicas' states from DescribeReplicas, and at the end
every broker stopped cleanly and its partition directories read from disk (segments in
base-offset order, every batch's CRC checked) into the history; a partition's final high
watermark is the last leader sample's (the HW checkpoint files when there is none).

How faults map onto processes (``INJECTABLE``): ``crash`` is SIGKILL, ``restart`` starts a
broker that is down, ``pause`` is SIGSTOP then SIGCONT, ``controlled_shutdown`` is SIGTERM (the
broker's controlled shutdown) and a wait for the exit, ``rolling_restart`` does that and a
start for each broker in turn. A started broker serves only once its previous ZooKeeper
registration is gone (up to ``zookeeper.session.timeout.ms`` after a kill -9): its log says
when. Everything started here is stopped here, by pid (``LocalCluster.stop``).

(One module, ~670 lines: ``ChaosBackend``, its process implementation and the spec checks
that refuse what a backend cannot inject are one contract; the root-only parts live in
``cluster.root_backend``, ``cluster.netns`` and ``cluster.tmpfs``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from kafkasim import proto
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.coordination import NoNodeError
from kafkasim.common.errors import KafkaError, KafkasimError
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.faults.backend import Backend, BackendSpec, UnsupportedFaultError, broker_props
from kafkasim.faults.final_logs import split_entries
from kafkasim.faults.history import History, ReplicaSample
from kafkasim.faults.scenario import Scenario
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkasim.storage.records.entry import decode_entries

__all__ = [
    "INJECTABLE",
    "LOCAL",
    "NOT_INJECTABLE",
    "RUNTIME",
    "ChaosBackend",
    "ChaosError",
    "LocalBackend",
    "NetworkFaults",
    "OneWayFaults",
    "ProcessBackend",
    "process_backend",
    "read_replica_log",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

RUNTIME: Final = "local processes"

INJECTABLE: Final = frozenset(
    {"crash", "restart", "pause", "controlled_shutdown", "rolling_restart"}
)

_NO_NETNS: Final = (
    "processes on one loopback interface share one network: cutting links needs network "
    "namespaces or iptables, which this runner does not set up"
)
_NO_TMPFS: Final = (
    "a full disk needs a size-limited filesystem mounted under each log dir (the root "
    "backend, local-root, mounts one)"
)
_NO_DM_DELAY: Final = (
    "delaying a real disk needs device-mapper's dm-delay under each log dir, which this "
    "runner does not set up"
)
NOT_INJECTABLE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "isolate": _NO_NETNS,
        "split": _NO_NETNS,
        "isolate_zk": _NO_NETNS,
        "slow_network": "delaying loopback traffic needs tc netem (root), which this runner "
        "does not use",
        "expire_session": "a broker's ZooKeeper session id and password never leave its process",
        "disk_full": _NO_TMPFS,
        "clock_jump": "stepping one process's wall clock needs libfaketime or a time namespace",
        "partition_one_way": "one-way faults need network namespaces: not supported on local "
        "processes (they share one loopback interface)",
        "slow_one_way": "delaying one direction of a link needs network namespaces and tc "
        "netem: not supported on local processes",
        "clock_drift": "making one process's clock run fast or slow needs libfaketime: not "
        "supported on local processes",
        "torn_write": "tearing a write needs a power cut: after kill -9 the page cache still "
        "holds every write",
        "slow_disk": _NO_DM_DELAY,
    }
)
"""Every action local processes cannot inject, with the reason (one clause)."""

LOSE_UNFLUSHED_REASON: Final = (
    "losing unflushed data needs a power cut: after kill -9 the page cache still holds every write"
)

_DESCRIBE_TIMEOUT_S: Final = 2.0


class ChaosError(KafkasimError):
    """A real run that cannot go on (a directory in the way, a broker that never serves)."""


class ChaosBackend(Protocol):
    """A real cluster, step by step. Every method may block (``ProcessBackend`` calls them from
    a worker thread), except the cheap ones (``running``, ``address``, ``bootstrap``,
    ``broker_ids``)."""

    @property
    def spec(self) -> BackendSpec: ...

    @property
    def broker_ids(self) -> tuple[int, ...]: ...

    @property
    def bootstrap(self) -> list[str]: ...

    @property
    def kafka_bootstrap(self) -> list[str]:
        """The brokers' Kafka listeners as the run's host reaches them (empty: none)."""

    def start(self) -> None:
        """Start ZooKeeper and every broker, until all serve."""

    def describe(self) -> str:
        """Where the cluster is, for the "cluster up" line."""

    def stop(self) -> None:
        """Stop every broker cleanly (a controlled shutdown each) and ZooKeeper; their data
        stays readable through ``log_dir``. Idempotent."""

    def close(self) -> None:
        """Release everything the backend started (after ``stop``, or on an error)."""

    def running(self, broker_id: int) -> bool:
        """Alive (paused too), as the backend last knew it (cheap: no engine call)."""

    def refresh(self) -> None:
        """Learn again which brokers run (one may have exited by itself)."""

    def address(self, broker_id: int) -> str:
        """The broker's listener as clients of the run reach it."""

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        """SIGKILL: a crash; SIGTERM: a controlled shutdown. Returns once it exited."""

    def start_broker(self, broker_id: int) -> None:
        """Start a broker that is down."""

    def serving_again(self, broker_id: int) -> bool:
        """Whether the broker serves since its last ``start_broker``."""

    def exit_note(self, broker_id: int) -> str:
        """Its exit status and where its log is, for messages."""

    def pause(self, broker_id: int) -> None: ...

    def resume(self, broker_id: int) -> None: ...

    def isolate(self, broker_id: int) -> None:
        """Cut the broker off its peers and ZooKeeper (where ``isolate`` is injectable)."""

    def reconnect(self, broker_id: int) -> None:
        """Undo ``isolate``."""

    def fill_disk(self, broker_id: int) -> None:
        """Fill the filesystem of the broker's log dir (where ``disk_full`` is injectable)."""

    def free_disk(self, broker_id: int) -> None:
        """Undo ``fill_disk``."""

    async def controller_id(self) -> int:
        """The active controller (-1: none right now)."""

    def log_dir(self, broker_id: int) -> Path | None:
        """The broker's log directory on this host, after ``stop`` (None: unreadable)."""


@runtime_checkable
class NetworkFaults(Protocol):
    """The network faults beyond ``isolate`` a ``ChaosBackend`` may also inject (blocking,
    each where its action is injectable): the root backend's namespaces do."""

    def isolate_zk(self, broker_id: int) -> None: ...

    def reconnect_zk(self, broker_id: int) -> None: ...

    def split(self, groups: list[list[int]]) -> None: ...

    def heal_split(self) -> None: ...

    def slow_network(self, broker_ids: list[int], latency_ms: float, jitter_ms: float) -> None:
        """Delay the brokers' traffic (none given: every broker's)."""

    def normal_network(self) -> None: ...


@runtime_checkable
class OneWayFaults(Protocol):
    """One-way cuts a ``ChaosBackend`` may inject (where ``partition_one_way`` is injectable):
    what ``src`` sends ``dst`` is lost, ``dst`` to ``src`` flows (the compose backend's)."""

    def cut_one_way(self, src: int, dst: int) -> None: ...

    def heal_one_way(self, src: int, dst: int) -> None: ...


def process_backend(
    create: Callable[[Scenario, Path], ChaosBackend],
) -> Callable[[Scenario, int | None, Path], Backend]:
    """A ``BackendSpec.create`` for a real cluster: ``create``'s backend under ``ProcessBackend``,
    in a new or empty run directory (the seed has no part in a real run)."""

    def make(scenario: Scenario, seed: int | None, root: Path) -> Backend:
        del seed
        if root.exists() and any(root.iterdir()):
            raise ChaosError(f"{root} is not empty: a real run needs a new or empty directory")
        return ProcessBackend(scenario, create(scenario, root))

    return make


class ProcessBackend:
    """``faults.backend.Backend`` over a blocking ``ChaosBackend`` (see the module doc)."""

    def __init__(self, scenario: Scenario, cluster: ChaosBackend) -> None:
        self.scenario = scenario
        self.cluster = cluster
        self._clock = SystemClock()
        self._transports: list[GrpcTransport] = []
        self._lookup: GrpcTransport | None = None
        self._started = False

    @property
    def spec(self) -> BackendSpec:
        return self.cluster.spec

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return self.cluster.broker_ids

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.bootstrap

    @property
    def kafka_bootstrap(self) -> list[str]:
        return self.cluster.kafka_bootstrap

    @property
    def clock(self) -> Clock:
        return self._clock

    def run_loop(self, main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        return asyncio.run(main())

    async def start(self) -> None:
        self._started = True
        await asyncio.to_thread(self.cluster.start)

    def describe(self) -> str:
        return self.cluster.describe()

    def transport_for(self, name: str) -> ClientTransport:
        """A transport of its own for each client (closed at the end of the run)."""
        del name  # one channel set per client, as separate client processes would have
        transport = GrpcTransport()
        self._transports.append(transport)
        return transport

    def address(self, broker_id: int) -> str:
        return self.cluster.address(broker_id)

    def running(self, broker_id: int) -> bool:
        return self.cluster.running(broker_id)

    async def refresh(self) -> None:
        await asyncio.to_thread(self.cluster.refresh)

    def set_on_halt(self, callback: Callable[[int], None]) -> None:
        del callback  # a broker that exits by itself is found by refresh()

    async def crash(self, broker_id: int, *, lose_unflushed: bool) -> None:
        del lose_unflushed  # refused before the run (BackendSpec.lose_unflushed)
        await asyncio.to_thread(self.cluster.kill, broker_id, signal.SIGKILL)

    async def shutdown(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.kill, broker_id, signal.SIGTERM)

    async def start_broker(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.start_broker, broker_id)

    async def serving_again(self, broker_id: int) -> bool:
        return await asyncio.to_thread(self.cluster.serving_again, broker_id)

    def exit_note(self, broker_id: int) -> str:
        return self.cluster.exit_note(broker_id)

    async def pause(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.pause, broker_id)

    async def resume(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.resume, broker_id)

    async def isolate(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.isolate, broker_id)

    async def reconnect(self, broker_id: int) -> None:
        await asyncio.to_thread(self.cluster.reconnect, broker_id)

    def _refused(self, action: str) -> UnsupportedFaultError:
        reason = self.spec.not_injectable.get(action, "not injectable")
        return UnsupportedFaultError(f"{self.spec.runtime} cannot inject {action}: {reason}")

    def _network(self, action: str) -> NetworkFaults:
        """The cluster's network faults, when ``action`` is injectable (else refused)."""
        if action not in self.spec.injectable or not isinstance(self.cluster, NetworkFaults):
            raise self._refused(action)
        return self.cluster

    async def isolate_zk(self, broker_id: int) -> None:
        await asyncio.to_thread(self._network("isolate_zk").isolate_zk, broker_id)

    async def reconnect_zk(self, broker_id: int) -> None:
        await asyncio.to_thread(self._network("isolate_zk").reconnect_zk, broker_id)

    async def split(self, groups: list[list[int]]) -> None:
        await asyncio.to_thread(self._network("split").split, groups)

    async def heal_split(self) -> None:
        await asyncio.to_thread(self._network("split").heal_split)

    async def expire_session(self, broker_id: int) -> None:
        raise self._refused("expire_session")

    async def slow_network(
        self, broker_ids: list[int], latency_ms: float, jitter_ms: float
    ) -> None:
        network = self._network("slow_network")
        await asyncio.to_thread(network.slow_network, broker_ids, latency_ms, jitter_ms)

    async def normal_network(self) -> None:
        await asyncio.to_thread(self._network("slow_network").normal_network)

    async def clock_jump(self, broker_ids: list[int], seconds: float) -> None:
        raise self._refused("clock_jump")

    def _one_way(self) -> OneWayFaults:
        if "partition_one_way" not in self.spec.injectable or not isinstance(
            self.cluster, OneWayFaults
        ):
            raise self._refused("partition_one_way")
        return self.cluster

    async def cut_one_way(self, src: int, dst: int) -> None:
        await asyncio.to_thread(self._one_way().cut_one_way, src, dst)

    async def heal_one_way(self, src: int, dst: int) -> None:
        await asyncio.to_thread(self._one_way().heal_one_way, src, dst)

    async def slow_link(self, src: int, dst: int, latency_ms: float, jitter_ms: float) -> None:
        raise self._refused("slow_one_way")

    async def normal_link(self, src: int, dst: int) -> None:
        raise self._refused("slow_one_way")

    async def clock_drift(self, broker_id: int, rate: float) -> None:
        raise self._refused("clock_drift")

    async def crash_torn(self, broker_id: int) -> None:
        raise self._refused("torn_write")

    async def fill_disk(self, broker_id: int) -> None:
        if "disk_full" not in self.spec.injectable:
            raise self._refused("disk_full")
        await asyncio.to_thread(self.cluster.fill_disk, broker_id)

    async def free_disk(self, broker_id: int) -> None:
        if "disk_full" not in self.spec.injectable:
            raise self._refused("disk_full")
        await asyncio.to_thread(self.cluster.free_disk, broker_id)

    async def slow_disk(self, broker_id: int, write_ms: float, fsync_ms: float) -> None:
        raise self._refused("slow_disk")

    async def normal_disk(self, broker_id: int) -> None:
        raise self._refused("slow_disk")

    async def heal_network(self) -> None:
        pass  # every cut this backend makes is undone by the runner, one by one

    async def controller_id(self) -> int:
        return await self.cluster.controller_id()

    async def describe_replicas(self, broker_ids: list[int]) -> tuple[ReplicaSample, ...]:
        if self._lookup is None:
            self._lookup = GrpcTransport()
            self._transports.append(self._lookup)
        found: list[ReplicaSample] = []
        for broker_id in broker_ids:
            address = self.cluster.address(broker_id)
            try:
                response = await self._lookup.call(
                    address,
                    proto.METHOD_DESCRIBE_REPLICAS,
                    pb.DescribeReplicasRequest(),
                    timeout_s=_DESCRIBE_TIMEOUT_S,
                )
            except RpcError as e:
                logger.info("DescribeReplicas to %s failed: %s", address, e)
                continue
            assert isinstance(response, pb.DescribeReplicasResponse)
            found.extend(
                ReplicaSample.from_state(response.monotonic_ms, r) for r in response.replicas
            )
        return tuple(found)

    async def finish(self, history: History) -> list[str]:
        """Stop every broker cleanly, then read every replica's log from disk."""
        await asyncio.to_thread(self.cluster.stop)
        return await asyncio.to_thread(self._read_final_logs, history)

    async def close(self) -> None:
        for transport in self._transports:
            await transport.close()
        self._transports.clear()
        await asyncio.to_thread(self.cluster.close)

    def _read_final_logs(self, history: History) -> list[str]:
        """The logs of the scenario's topics on every broker; notes on what could not be read."""
        notes: list[str] = []
        topics = self.scenario.cluster.topics
        checkpointed: dict[tuple[str, int], int] = {}
        for broker_id in self.cluster.broker_ids:
            log_dir = self.cluster.log_dir(broker_id)
            if log_dir is None:
                notes.append(f"broker {broker_id}: its log directory cannot be read, left out")
                continue
            for topic in topics:
                for p in range(topic.partitions):
                    partition_dir = log_dir / f"{topic.name}-{p}"
                    if not partition_dir.is_dir():
                        continue
                    markers: list[tuple[int, str]] = []
                    entries, problem = read_replica_log(partition_dir, markers)
                    if problem is not None:
                        notes.append(
                            f"broker {broker_id}: corrupt batch, log read up to it: {problem}"
                        )
                    history.final_logs[(topic.name, p, broker_id)] = entries
                    if markers:
                        history.final_markers[(topic.name, p, broker_id)] = markers
            checkpoint = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
            if checkpoint.is_file():
                with contextlib.suppress(KafkaError, OSError):
                    for tp, hw in OffsetCheckpointFile(checkpoint).read().items():
                        # A follower's HW never exceeds its leader's: the highest is the
                        # last leader's.
                        key = (tp.topic, tp.partition)
                        checkpointed[key] = max(hw, checkpointed.get(key, -1))
        leaders = _last_leader_hw(history.samples)
        for topic in topics:
            for p in range(topic.partitions):
                key = (topic.name, p)
                final_hw = leaders.get(TopicPartition(topic.name, p), checkpointed.get(key))
                if final_hw is not None:
                    history.final_hw[key] = final_hw
        return notes


class LocalBackend:
    """``LocalCluster``: ZooKeeper and broker processes on loopback, faults by signal."""

    def __init__(self, scenario: Scenario | None, root: Path) -> None:
        self.scenario = scenario
        self.root = root
        self._cluster: LocalCluster | None = None
        self._marks: dict[int, int] = {}

    @classmethod
    def over(cls, cluster: LocalCluster) -> LocalBackend:
        """The same steps on a cluster that runs already (``kafkasim cluster stop|kill|pause|
        resume|start --broker N`` on the cluster of ``cluster up``)."""
        backend = cls(None, cluster.root)
        backend._cluster = cluster
        return backend

    @property
    def spec(self) -> BackendSpec:
        return LOCAL

    @property
    def cluster(self) -> LocalCluster:
        if self._cluster is None:
            assert self.scenario is not None, "a backend over a running cluster has it already"
            self._cluster = LocalCluster(
                self.root,
                brokers=self.scenario.cluster.brokers,
                broker_props=broker_props(self.scenario),
            )
        return self._cluster

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.cluster.brokers))

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.bootstrap

    @property
    def kafka_bootstrap(self) -> list[str]:
        return [self.cluster.brokers[b].kafka_address for b in self.broker_ids]

    def start(self) -> None:
        self.cluster.start()

    def describe(self) -> str:
        return f"ZooKeeper at {self.cluster.zookeeper.connect_string}"

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()

    def close(self) -> None:
        self.stop()

    def running(self, broker_id: int) -> bool:
        return self.cluster.brokers[broker_id].running

    def refresh(self) -> None:
        pass  # running() asks the process itself

    def address(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].address

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        self.cluster.kill(broker_id, sig)

    def start_broker(self, broker_id: int) -> None:
        broker = self.cluster.brokers[broker_id]
        self._marks[broker_id] = _serving_marks(broker.log_path, broker_id)
        self.cluster.start_broker(broker_id)

    def serving_again(self, broker_id: int) -> bool:
        broker = self.cluster.brokers[broker_id]
        return _serving_marks(broker.log_path, broker_id) > self._marks.get(broker_id, 0)

    def exit_note(self, broker_id: int) -> str:
        broker = self.cluster.brokers[broker_id]
        status = broker.process.poll() if broker.process is not None else None
        return f"status {status}; log: {broker.log_path}"

    def pause(self, broker_id: int) -> None:
        self.cluster.pause(broker_id)

    def resume(self, broker_id: int) -> None:
        self.cluster.resume(broker_id)

    def isolate(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot isolate broker {broker_id}: {_NO_NETNS}")

    def reconnect(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot isolate broker {broker_id}: {_NO_NETNS}")

    def fill_disk(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot fill broker {broker_id}'s disk: {_NO_TMPFS}")

    def free_disk(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot fill broker {broker_id}'s disk: {_NO_TMPFS}")

    async def controller_id(self) -> int:
        zk = KazooCoordination(self.cluster.zookeeper.connect_string, DEV_ZK_SESSION_TIMEOUT_MS)
        await zk.start()
        try:
            data, _ = await zk.get(zk_data.CONTROLLER)
            return zk_data.decode_controller(data)
        except NoNodeError:
            return -1
        finally:
            await zk.close()

    def log_dir(self, broker_id: int) -> Path:
        return self.cluster.brokers[broker_id].data_dir / "logs"


LOCAL: Final = BackendSpec(
    name="local",
    runtime=RUNTIME,
    injectable=INJECTABLE,
    not_injectable=NOT_INJECTABLE,
    lose_unflushed=LOSE_UNFLUSHED_REASON,
    create=process_backend(LocalBackend),
)
"""Local processes (``LocalBackend``)."""


# -- final logs ---------------------------------------------------------------------------------


def read_replica_log(
    partition_dir: Path, markers: list[tuple[int, str]] | None = None
) -> tuple[list[tuple[int, str]], str | None]:
    """Every data record of one replica's log on disk, ``(offset, value as text)``, segments
    in base-offset order, entries of every message format (v2 batches, v0/v1 messages of a log
    written before Kafka 0.11), each entry's checksum checked; transaction markers are not
    data: they go to ``markers`` (``(offset, "COMMIT"|"ABORT")``) when it is given. Reading
    stops at the first entry that does not check; the second item then says where and why
    (None when the whole log is sound). A zero-filled tail (a preallocated segment) ends a
    segment quietly."""
    entries: list[tuple[int, str]] = []
    found_markers: list[tuple[int, str]] = [] if markers is None else markers
    segments = sorted(
        (file_names.offset_from_file_name(p.name), p)
        for p in partition_dir.glob("*" + file_names.LOG_SUFFIX)
    )
    for _, path in segments:
        data = path.read_bytes()
        position = 0  # the end of the last entry read whole
        try:
            for header, records in decode_entries(data):
                split_entries(((header, records),), entries, found_markers)
                position += header.size_in_bytes
        except KafkaError as e:
            if not any(data[position:]):
                continue
            return entries, f"{path}: {e}"
    return entries, None


def _serving_marks(log_path: Path, broker_id: int) -> int:
    """How often the broker's log says it serves: once per start that got that far (the
    log is appended to across restarts)."""
    if not log_path.exists():
        return 0
    return log_path.read_bytes().count(f"kafkasim broker {broker_id} serving on".encode())


def _last_leader_hw(samples: list[ReplicaSample]) -> dict[TopicPartition, int]:
    """Per partition, the HW of the latest sample taken on its leader."""
    latest: dict[TopicPartition, ReplicaSample] = {}
    for sample in samples:
        if not sample.is_leader:
            continue
        tp = TopicPartition(sample.topic, sample.partition)
        known = latest.get(tp)
        if known is None or sample.time_ms >= known.time_ms:
            latest[tp] = sample
    return {tp: sample.high_watermark for tp, sample in latest.items()}
