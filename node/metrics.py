"""A broker's Prometheus metrics, named as Kafka's JMX exporter names Kafka's MBeans.

Every name is ``kafka_<domain>_<type>_<name>`` in lower case (``kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions`` → ``kafka_server_replicamanager_underreplicatedpartitions``), so
a Kafka dashboard or alert finds what it expects. Each help text names the MBean it stands for.

Each broker has its own ``CollectorRegistry``: the simulation runs several brokers in one
process, so nothing goes to prometheus_client's global registry.

Two kinds of series, both exposed by one collector (:class:`_BrokerCollector`):

1. Request counts, request latency and bytes in/out are counted on the request path:
   :meth:`BrokerMetrics.instrument` and :meth:`BrokerMetrics.instrument_streams` wrap the
   broker's handler tables, so every request (handlers added later included) is recorded under
   its rpc's name. They are plain integers (:class:`RequestStats`, two dicts of bytes): a
   request pays a few additions and no lock, and no ``_created`` series reads the wall clock.
2. State gauges (partitions, ISR health, controller, log sizes) are computed at scrape time
   from the live objects (:class:`StateReading`); nothing about them runs per request.

Threading: everything above belongs to the broker's event loop and is not thread-safe. The
HTTP endpoint (:meth:`BrokerMetrics.serve`) answers from prometheus_client's server threads, so
a scrape hands the whole collection to the loop (``call_soon_threadsafe``) and waits at most
``SCRAPE_TIMEOUT_S`` for it; on the loop itself (:meth:`BrokerMetrics.render`, the tests) it
collects directly.

Latency comes from the broker's Clock (``monotonic_ms``), not ``time.perf_counter``: the
layering keeps wall-clock reads in the adapters, Kafka's metric is in milliseconds anyway
(``TotalTimeMs``), and in the simulation the clock is virtual, so the histogram shows the
simulated time a request took (acks=all waits, fetch long-polls) and a scrape is the same on
every replay. The cost: a request shorter than a millisecond counts as 0 or 1 ms.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import start_http_server as start_prometheus_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kafkasim import proto
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

if TYPE_CHECKING:
    from kafkasim.common.clock import Clock
    from kafkasim.controller.controller import ControllerSnapshot
    from kafkasim.node.replica_manager import ReplicaManager
    from kafkasim.storage.log_manager import LogManager


class ControllerView(Protocol):
    """What the metrics read of the controller a broker hosts."""

    @property
    def is_active(self) -> bool: ...

    def snapshot(self) -> ControllerSnapshot: ...


class Broker(Protocol):
    """What the metrics read of a broker (``node.broker.Broker`` is one): a protocol, so that
    this module does not import the broker module, which imports it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...

    @property
    def controller(self) -> ControllerView | None: ...

    @property
    def log_manager(self) -> LogManager: ...


UnaryHandler = Callable[[Any], Awaitable[Any]]
StreamHandler = Callable[[AsyncIterator[Any]], AsyncIterator[Any]]

_T = TypeVar("_T")

# A scrape waits this long for the event loop to collect (Prometheus's default scrape timeout
# is 10 s; failing sooner leaves the next scrape its chance).
SCRAPE_TIMEOUT_S = 5.0
# How long closing waits for the HTTP server's thread after telling it to stop.
SERVER_JOIN_TIMEOUT_S = 5.0

# Upper bounds of the request latency histogram's buckets, in ms (the Clock's unit).
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000)
_BUCKET_LABELS = (*(str(float(b)) for b in LATENCY_BUCKETS_MS), "+Inf")  # le="1.0", ...

# Rpcs whose requests Kafka counts under another request name: a producer's pipelined
# connection carries Produce requests.
_REQUEST_NAMES = {proto.METHOD_PRODUCE_STREAM: "Produce"}

CONSUMER = "consumer"
FOLLOWER = "follower"


def request_name(method: str) -> str:
    """The Kafka request name a full rpc name is counted under (``/x.Y/Produce`` → Produce)."""
    return _REQUEST_NAMES.get(method, method.rpartition("/")[2])


class RequestStats:
    """Count and latency histogram of one request type (RequestsPerSec and TotalTimeMs).

    Invariant: ``count == sum(bucket_counts)``; ``bucket_counts[i]`` counts the requests with
    ``LATENCY_BUCKETS_MS[i - 1] < elapsed_ms <= LATENCY_BUCKETS_MS[i]``, the last one those
    above every bound.
    """

    __slots__ = ("bucket_counts", "count", "sum_ms")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ms = 0
        self.bucket_counts = [0] * len(_BUCKET_LABELS)

    def record(self, elapsed_ms: int) -> None:
        self.count += 1
        self.sum_ms += elapsed_ms
        self.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)] += 1

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        """``(le, requests at or under it)`` as Prometheus's histogram wants them."""
        buckets: list[tuple[str, float]] = []
        total = 0
        for label, count in zip(_BUCKET_LABELS, self.bucket_counts, strict=True):
            total += count
            buckets.append((label, total))
        assert total == self.count, f"histogram buckets hold {total} of {self.count} requests"
        return buckets


class BrokerMetrics:
    """One broker's metrics: its own registry, the request-path counters, the state gauges.

    Not thread-safe: use it on the broker's event loop (the HTTP endpoint does; see the module
    docstring).
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._clock = broker.clock
        self.requests: dict[str, RequestStats] = {}
        self.bytes_in: dict[str, int] = {}  # by topic
        self.bytes_out: dict[tuple[str, str], int] = {}  # by (topic, fetcher)
        self.registry = CollectorRegistry()
        self.registry.register(_BrokerCollector(self, broker))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._host = ""
        self._server: WSGIServer | None = None
        self._server_thread: threading.Thread | None = None

    # -- exposition -------------------------------------------------------------------------

    def render(self) -> bytes:
        """Every series in Prometheus's text exposition format (what GET /metrics answers)."""
        return generate_latest(self.registry)

    @property
    def address(self) -> str | None:
        """``host:port`` of the HTTP endpoint while it serves, else None."""
        if self._server is None:
            return None
        return f"{self._host}:{self._server.server_port}"

    def serve(self, host: str, port: int) -> str:
        """Serve GET /metrics on ``host:port`` (port 0: a free one) from a daemon thread.

        Call on the broker's event loop: scrapes collect on it. Returns the address bound.
        """
        if self._server is not None:
            raise RuntimeError(f"metrics are already served on {self.address}")
        self._loop = asyncio.get_running_loop()
        self._server, self._server_thread = start_prometheus_http_server(
            port, addr=host, registry=_ScrapeOnLoop(self.registry, self._run_on_loop)
        )
        self._host = host
        return f"{host}:{self._server.server_port}"

    def close(self) -> None:
        """Stop the HTTP endpoint (idempotent); its port is free when this returns."""
        server, thread = self._server, self._server_thread
        self._server = self._server_thread = None
        if server is None:
            return
        # Blocks until serve_forever notices, at most its poll interval (0.5 s): only when a
        # broker stops, and it frees the port for a restart.
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(SERVER_JOIN_TIMEOUT_S)

    def _run_on_loop(self, collect: Callable[[], _T]) -> _T:
        """``collect()`` on the broker's event loop, waiting for it from another thread."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return collect()
        result: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(collect())
            except Exception as e:  # the scrape answers 500; the loop goes on
                result.set_exception(e)

        loop.call_soon_threadsafe(run)
        return result.result(timeout=SCRAPE_TIMEOUT_S)

    # -- the request path -------------------------------------------------------------------

    def instrument(self, handlers: Mapping[str, UnaryHandler]) -> dict[str, UnaryHandler]:
        """The same unary handlers, each recording count, latency and bytes of its requests."""
        return {method: self._timed(method, handler) for method, handler in handlers.items()}

    def instrument_streams(self, handlers: Mapping[str, StreamHandler]) -> dict[str, StreamHandler]:
        """The same stream handlers, recording every request on a stream as the unary ones do.

        A request's time runs from when the handler takes it to when it yields the answer
        (streams answer in order, one answer per request).
        """
        return {method: self._timed_stream(method, fn) for method, fn in handlers.items()}

    def _stats(self, method: str) -> RequestStats:
        # Created with the handler table, so every request type shows (as 0) from the start.
        return self.requests.setdefault(request_name(method), RequestStats())

    def _timed(self, method: str, handler: UnaryHandler) -> UnaryHandler:
        stats = self._stats(method)
        clock = self._clock

        async def timed(request: Any) -> Any:
            start_ms = clock.monotonic_ms()
            try:
                response = await handler(request)
            finally:
                stats.record(clock.monotonic_ms() - start_ms)
            self._count_bytes(request, response)
            return response

        return timed

    def _timed_stream(self, method: str, handler: StreamHandler) -> StreamHandler:
        stats = self._stats(method)
        clock = self._clock

        async def timed(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            taken: deque[tuple[Any, int]] = deque()

            async def stamped() -> AsyncIterator[Any]:
                async for request in requests:
                    taken.append((request, clock.monotonic_ms()))
                    yield request

            arrivals = stamped()
            responses = handler(arrivals)
            try:
                async for response in responses:
                    now_ms = clock.monotonic_ms()
                    request, start_ms = taken.popleft() if taken else (None, now_ms)
                    stats.record(now_ms - start_ms)
                    self._count_bytes(request, response)
                    yield response
            finally:
                # Closed here, not by the garbage collector: the simulation stays deterministic.
                await _aclose(responses)
                await _aclose(arrivals)

        return timed

    def _count_bytes(self, request: Any, response: Any) -> None:
        if isinstance(response, pb.ProduceResponse) and isinstance(request, pb.ProduceRequest):
            # A partition answered with a base offset was appended to the log; as in Kafka it
            # counts whatever the acks wait brings afterwards.
            appended = {(p.topic, p.partition) for p in response.partitions if p.base_offset >= 0}
            for data in request.partitions:
                if (data.topic, data.partition) in appended:
                    self.bytes_in[data.topic] = self.bytes_in.get(data.topic, 0) + len(data.records)
        elif isinstance(response, pb.FetchResponse) and isinstance(request, pb.FetchRequest):
            fetcher = FOLLOWER if request.replica_id >= 0 else CONSUMER
            for part in response.partitions:
                if part.records:
                    key = (part.topic, fetcher)
                    self.bytes_out[key] = self.bytes_out.get(key, 0) + len(part.records)


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


@dataclass(frozen=True, slots=True)
class StateReading:
    """The broker's state as one scrape reads it from the live objects."""

    under_replicated: int
    partition_count: int
    leader_count: int
    isr_shrinks: int
    isr_expands: int
    active_controller: int
    offline_partitions: int
    log_sizes: tuple[tuple[TopicPartition, int], ...]

    @classmethod
    def of(cls, broker: Broker) -> StateReading:
        replica_manager = broker.replica_manager
        partitions = list(replica_manager.partitions.values())
        controller = broker.controller
        active = controller is not None and controller.is_active
        return cls(
            under_replicated=sum(1 for p in partitions if p.under_replicated),
            partition_count=len(partitions),
            leader_count=sum(1 for p in partitions if p.is_leader),
            isr_shrinks=replica_manager.isr_shrinks,
            isr_expands=replica_manager.isr_expands,
            active_controller=1 if active else 0,
            # As in Kafka, only the active controller knows (and reports) offline partitions.
            offline_partitions=(
                len(controller.snapshot().offline_partitions())
                if controller is not None and active
                else 0
            ),
            log_sizes=tuple(
                (tp, log.size_in_bytes) for tp, log in sorted(broker.log_manager.logs.items())
            ),
        )


_NO_STATE = StateReading(0, 0, 0, 0, 0, 0, 0, ())


class _BrokerCollector:
    """Every series of one broker, built at scrape time (on the broker's event loop)."""

    def __init__(self, metrics: BrokerMetrics, broker: Broker) -> None:
        self._metrics = metrics
        self._broker = broker

    def describe(self) -> Iterable[Metric]:
        # The registry checks names for clashes from this; values do not matter.
        return [*self._request_families(), *_state_families(_NO_STATE)]

    def collect(self) -> Iterable[Metric]:
        return [*self._request_families(), *_state_families(StateReading.of(self._broker))]

    def _request_families(self) -> Iterator[Metric]:
        metrics = self._metrics
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by request type "
            "(kafka.network:type=RequestMetrics,name=RequestsPerSec).",
            labels=["request"],
        )
        total_time_ms = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from taking a request to answering it, in ms, by request type "
            "(kafka.network:type=RequestMetrics,name=TotalTimeMs).",
            labels=["request"],
        )
        for name, stats in metrics.requests.items():
            requests.add_metric([name], stats.count)
            total_time_ms.add_metric([name], stats.cumulative_buckets(), stats.sum_ms)
        bytes_in = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes of record batches appended by produce requests, by topic "
            "(kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec).",
            labels=["topic"],
        )
        for topic, count in sorted(metrics.bytes_in.items()):
            bytes_in.add_metric([topic], count)
        bytes_out = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes of record batches returned by fetch requests, by topic and fetcher "
            '(kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec for fetcher="consumer", '
            'name=ReplicationBytesOutPerSec for fetcher="follower").',
            labels=["topic", "fetcher"],
        )
        for (topic, fetcher), count in sorted(metrics.bytes_out.items()):
            bytes_out.add_metric([topic, fetcher], count)
        yield from (requests, total_time_ms, bytes_in, bytes_out)


def _state_families(r: StateReading) -> list[Metric]:
    log_size = GaugeMetricFamily(
        "kafka_log_log_size",
        "Bytes of a partition replica's log on disk (kafka.log:type=Log,name=Size).",
        labels=["topic", "partition"],
    )
    for tp, size in r.log_sizes:
        log_size.add_metric([tp.topic, str(tp.partition)], size)
    return [
        GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica set "
            "(kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions).",
            value=r.under_replicated,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partition replicas on this broker "
            "(kafka.server:type=ReplicaManager,name=PartitionCount).",
            value=r.partition_count,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions led by this broker (kafka.server:type=ReplicaManager,name=LeaderCount).",
            value=r.leader_count,
        ),
        CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks written by this broker as leader "
            "(kafka.server:type=ReplicaManager,name=IsrShrinksPerSec).",
            value=r.isr_shrinks,
        ),
        CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions written by this broker as leader "
            "(kafka.server:type=ReplicaManager,name=IsrExpandsPerSec).",
            value=r.isr_expands,
        ),
        GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, else 0 "
            "(kafka.controller:type=KafkaController,name=ActiveControllerCount).",
            value=r.active_controller,
        ),
        GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader, reported by the active controller "
            "(kafka.controller:type=KafkaController,name=OfflinePartitionsCount).",
            value=r.offline_partitions,
        ),
        log_size,
    ]


class _ScrapeOnLoop:
    """The registry as the HTTP server sees it: collected on the broker's event loop."""

    def __init__(
        self, registry: Collector, run_on_loop: Callable[[Callable[[], Any]], Any]
    ) -> None:
        self._registry = registry
        self._run_on_loop = run_on_loop

    def collect(self) -> Iterable[Metric]:
        metrics: list[Metric] = self._run_on_loop(lambda: list(self._registry.collect()))
        return metrics

    def restricted_registry(self, names: Iterable[str]) -> _ScrapeOnLoop:
        """For GET /metrics?name[]=...: only those series, still collected on the loop."""
        assert isinstance(self._registry, CollectorRegistry)
        return _ScrapeOnLoop(self._registry.restricted_registry(names), self._run_on_loop)
