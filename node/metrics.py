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
3. The event loop's idle fraction (Kafka's RequestHandlerAvgIdlePercent), timed around the
   loop's selector by :mod:`node.loop_idle` when the loop was made by its factory.

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
from typing import Any, TypeVar
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
from kafkasim.common.errors import error_for_name
from kafkasim.node.apis_replica import EncodedFetchResponse, EncodedProduceResponse
from kafkasim.node.loop_idle import meter_of_running_loop
from kafkasim.node.metrics_state import NO_STATE, Broker, StateReading, state_families
from kafkasim.node.produce_wire import ProduceRequestView
from kafkasim.proto import kafkasim_pb2 as pb

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

# Errors Kafka's ReplicaManager answers without marking FailedProduceRequestsPerSec /
# FailedFetchRequestsPerSec: a client's stale view or a broker-side condition it handles itself.
# Every other partition error (INVALID_RECORD, NOT_ENOUGH_REPLICAS, ...) counts as failed.
_EXPECTED_PRODUCE_ERRORS = frozenset(
    error_for_name(name).code
    for name in (
        "UNKNOWN_TOPIC_OR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "MESSAGE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "CORRUPT_MESSAGE",
        "KAFKA_STORAGE_ERROR",
    )
)
_EXPECTED_FETCH_ERRORS = frozenset(
    error_for_name(name).code
    for name in (
        "UNKNOWN_TOPIC_OR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_LEADER_EPOCH",
        "FENCED_LEADER_EPOCH",
        "REPLICA_NOT_AVAILABLE",
        "KAFKA_STORAGE_ERROR",
        "OFFSET_OUT_OF_RANGE",
    )
)


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
        self.failed_produce: dict[str, int] = {}  # partitions answered with an error, by topic
        self.failed_fetch: dict[str, int] = {}
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
            # Bound once per stream, not looked up per request.
            monotonic_ms, take, record, count = (
                clock.monotonic_ms,
                taken.append,
                stats.record,
                self._count_bytes,
            )

            async def stamped() -> AsyncIterator[Any]:
                async for request in requests:
                    take((request, monotonic_ms()))
                    yield request

            arrivals = stamped()
            responses = handler(arrivals)
            try:
                async for response in responses:
                    now_ms = monotonic_ms()
                    request, start_ms = taken.popleft() if taken else (None, now_ms)
                    record(now_ms - start_ms)
                    count(request, response)
                    yield response
            finally:
                # Closed here, not by the garbage collector: the simulation stays deterministic.
                await _aclose(responses)
                await _aclose(arrivals)

        return timed

    def _count_bytes(self, request: Any, response: Any) -> None:
        if isinstance(response, EncodedProduceResponse) and isinstance(
            request, (pb.ProduceRequest, ProduceRequestView)
        ):
            self._count_produce(response)
        elif isinstance(response, pb.ProduceResponse) and isinstance(
            request, (pb.ProduceRequest, ProduceRequestView)
        ):
            # A partition answered with a base offset was appended to the log; as in Kafka it
            # counts whatever the acks wait brings afterwards.
            appended = {(p.topic, p.partition) for p in response.partitions if p.base_offset >= 0}
            for p in response.partitions:
                if p.error_code and p.error_code not in _EXPECTED_PRODUCE_ERRORS:
                    self.failed_produce[p.topic] = self.failed_produce.get(p.topic, 0) + 1
            for data in request.partitions:
                if (data.topic, data.partition) in appended:
                    self.bytes_in[data.topic] = self.bytes_in.get(data.topic, 0) + len(data.records)
        elif isinstance(response, EncodedFetchResponse) and isinstance(request, pb.FetchRequest):
            # Sizes the answer knew before encoding: nothing reads the records back.
            fetcher = FOLLOWER if request.replica_id >= 0 else CONSUMER
            for part in response.partitions:
                if part.error_code and part.error_code not in _EXPECTED_FETCH_ERRORS:
                    self.failed_fetch[part.topic] = self.failed_fetch.get(part.topic, 0) + 1
                if part.records_size:
                    key = (part.topic, fetcher)
                    self.bytes_out[key] = self.bytes_out.get(key, 0) + part.records_size

    def _count_produce(self, response: EncodedProduceResponse) -> None:
        """The results the answer was written from and the request's partitions (nothing
        parses the answer back, nor reads the request's records again). A partition answered
        with a base offset was appended to the log; as in Kafka it counts whatever the acks
        wait brings afterwards."""
        results, partitions = response.results, response.partitions
        failed, bytes_in = self.failed_produce, self.bytes_in
        for r in results:
            code = 0 if r.error is None else r.error.code
            if code and code not in _EXPECTED_PRODUCE_ERRORS:
                failed[r.tp.topic] = failed.get(r.tp.topic, 0) + 1
        if len(results) == 1 and len(partitions) == 1:  # the common case
            result, part = results[0], partitions[0]
            if result.base_offset >= 0 and result.tp == part.tp:
                bytes_in[part.tp.topic] = bytes_in.get(part.tp.topic, 0) + len(part.records)
            return
        written = {r.tp for r in results if r.base_offset >= 0}
        for part in partitions:
            if part.tp in written:
                bytes_in[part.tp.topic] = bytes_in.get(part.tp.topic, 0) + len(part.records)


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


class _BrokerCollector:
    """Every series of one broker, built at scrape time (on the broker's event loop)."""

    def __init__(self, metrics: BrokerMetrics, broker: Broker) -> None:
        self._metrics = metrics
        self._broker = broker

    def describe(self) -> Iterable[Metric]:
        # The registry checks names for clashes from this; values do not matter.
        return [*self._request_families(), *state_families(NO_STATE)]

    def collect(self) -> Iterable[Metric]:
        return [*self._request_families(), *state_families(StateReading.of(self._broker))]

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
        failed = []
        for what, counts in (("Produce", metrics.failed_produce), ("Fetch", metrics.failed_fetch)):
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_failed{what.lower()}requests",
                f"Partitions of {what} requests that failed with an error other than a "
                "client's stale view, by topic "
                f"(kafka.server:type=BrokerTopicMetrics,name=Failed{what}RequestsPerSec).",
                labels=["topic"],
            )
            for topic, count in sorted(counts.items()):
                family.add_metric([topic], count)
            failed.append(family)
        yield from (requests, total_time_ms, bytes_in, bytes_out, *failed, *idle_families())


def idle_families() -> list[Metric]:
    """RequestHandlerAvgIdlePercent of the running loop, if it was made by
    ``node.loop_idle.idle_timing_loop`` (as ``kafkasim broker``'s is); else nothing."""
    meter = meter_of_running_loop()
    if meter is None:
        return []
    return [
        GaugeMetricFamily(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Fraction of the last minute the broker's event loop, which handles every "
            "request, waited for work instead of running it (0 to 1; node.loop_idle) "
            "(kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent).",
            value=meter.ratio(),
        )
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
