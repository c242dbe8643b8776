"""A scenario's workload, recorded into a ``History``: the same code on every backend of a
failure run — only the transport, the clock and the bootstrap addresses differ.

The producers and consumers are kafkasim's own client (below) or, with ``workload.client``,
a real Kafka client on the brokers' Kafka listeners (``faults.real_client``), recording the
same events; the sampler and the final read are the run's own instruments either way.

* **Producers** send unique values (``<producer>-<n>``) at the scenario's rate, round robin
  over the topic's partitions (explicit partitions, so every partition gets a stream), through
  the real ``client.producer.Producer`` with the scenario's acks and idempotence. Each send is
  an ``invoke`` op, then ``ok`` (with its offset) or ``info`` (the outcome is unknown: a
  timeout, a lost connection, an error after which the record may still have been written) or
  ``fail`` (refused before any append, such as a record that is too large).
* **Consumers** fetch every partition from offset 0 as a consumer (never past the HW) and
  record each record read with the high watermark of its fetch response.
* **Transactional producers and transformers** (consume-transform-produce) are
  ``faults.txn_workload``'s; consumers with ``isolation = "read_committed"`` fetch below the
  last stable offset and drop the aborted transactions the answer names (the consumer's own
  ``consumed_entries``); every read records its isolation. Control batches (transaction
  markers) give no read at either level.
* **The sampler** asks every broker for its replicas (DescribeReplicas) every
  ``sample_interval_ms`` and records leader, epoch, HW, LEO and ISR per replica.
* **The final read**, once the faults have healed, reads every partition from its log start to
  its high watermark: what the checker compares the acknowledged sends with.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkasim import proto
from kafkasim.client.completed_fetch import consumed_entries
from kafkasim.client.producer import Producer
from kafkasim.client.simple import MinimalClient
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, KafkasimError, error_for_name
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import READ_COMMITTED, History, Op, OpType, ReplicaSample
from kafkasim.faults.real_client import ConfluentWorkload
from kafkasim.faults.scenario import CLIENT_KAFKASIM, ProducerSpec, Scenario, TransformerSpec
from kafkasim.faults.txn_workload import TxnClients
from kafkasim.proto import kafkasim_pb2 as pb

logger = logging.getLogger(__name__)

# Errors after which the record was certainly not appended (Kafka refuses before writing).
_DEFINITELY_NOT_WRITTEN = frozenset(
    error_for_name(name).code
    for name in (
        "MESSAGE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_RECORD",
        "INVALID_TOPIC_EXCEPTION",
        "INVALID_REQUIRED_ACKS",
        "CORRUPT_MESSAGE",
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    )
)
OffsetOutOfRangeError = error_for_name("OFFSET_OUT_OF_RANGE")


class FinalReadError(KafkasimError):
    """The final read could not read a partition to its high watermark in time."""


@dataclass
class Workload:
    """Runs ``scenario.workload`` against a cluster reachable at ``bootstrap`` (its Kafka
    listeners at ``kafka_bootstrap``, for a real Kafka client)."""

    scenario: Scenario
    history: History
    clock: Clock
    transport_for: Callable[[str], ClientTransport]
    bootstrap: list[str]
    start_ms: int
    broker_addresses: Callable[[], list[str]]
    sample_interval_ms: int = 500
    kafka_bootstrap: list[str] = field(default_factory=list)
    _real: ConfluentWorkload | None = None
    _txn: TxnClients | None = None
    _txn_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _producers: list[Producer] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: set[asyncio.Future[object]] = field(default_factory=set)

    def now(self) -> int:
        return self.clock.monotonic_ms() - self.start_ms

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the producers are to stop."""
        return self._stopping

    def partitions_of(self, topic: str) -> int:
        for spec in self.scenario.cluster.topics:
            if spec.name == topic:
                return spec.partitions
        raise KafkasimError(f"topic {topic} is not declared in the scenario")

    # -- running ----------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.scenario.workload.client != CLIENT_KAFKASIM:
            self._real = ConfluentWorkload(self.scenario, self.kafka_bootstrap, self)
            self._tasks.extend(self._real.start())
        else:
            self._txn = TxnClients(self)
            for spec in self.scenario.workload.producers:
                if spec.transactional:
                    task = loop.create_task(self._txn.produce(spec), name=f"wl-{spec.name}")
                    self._txn_tasks.append(task)
                else:
                    self._tasks.append(
                        loop.create_task(self._produce(spec), name=f"wl-{spec.name}")
                    )
            for t in self.scenario.workload.transformers:
                self._txn_tasks.append(
                    loop.create_task(self._txn.transform(t), name=f"wl-{t.name}")
                )
            for consumer in self.scenario.workload.consumers:
                committed = consumer.isolation == READ_COMMITTED
                for p in range(self.partitions_of(consumer.topic)):
                    tp = TopicPartition(consumer.topic, p)
                    self._tasks.append(
                        loop.create_task(
                            self._consume(consumer.name, tp, read_committed=committed),
                            name=f"wl-{consumer.name}",
                        )
                    )
        self._tasks.append(loop.create_task(self._sample(), name="wl-sampler"))

    async def stop_producers(self, timeout_s: float = 30.0) -> None:
        """Stop sending; wait (bounded) for outstanding sends; the rest stay unknown."""
        self._stopping.set()
        if self._real is not None:
            await self._real.stop_producers(timeout_s)
        if self._txn_tasks:  # each ends its transaction first
            done, late = await asyncio.wait(set(self._txn_tasks), timeout=timeout_s)
            for task in late:
                task.cancel()
            for task in [*done, *late]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task  # a bug in a transactional client fails the run here
            self._txn_tasks.clear()
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)
        for producer in self._producers:
            with contextlib.suppress(KafkasimError, RpcError, asyncio.TimeoutError):
                await producer.close(timeout_s=0)

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for task in self._txn_tasks:
            task.cancel()
        await asyncio.gather(*self._txn_tasks, return_exceptions=True)
        self._txn_tasks.clear()
        if self._txn is not None:
            await self._txn.close()
        if self._real is not None:
            real, self._real = self._real, None
            await real.close()

    # -- producers --------------------------------------------------------------------------

    async def _produce(self, spec: ProducerSpec) -> None:
        config: dict[str, object] = {
            "bootstrap.servers": ",".join(self.bootstrap),
            "acks": spec.acks,
            "enable.idempotence": spec.idempotent,
            "client.id": spec.name,
            "linger.ms": 5,
            "delivery.timeout.ms": 30_000,
            "request.timeout.ms": 5_000,
            **spec.config,
        }
        producer = Producer(config, transport=self.transport_for(spec.name), clock=self.clock)
        self._producers.append(producer)
        partitions = self.partitions_of(spec.topic)
        interval_s = 1.0 / spec.rate
        # One send per tick of a timer chain, each tick arming the next one interval later
        # (as a loop sleeping interval_s after each send, without a task step and a future
        # per record); the task waits for the chain to end when the producers stop.
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        numbers = itertools.count()
        timer: asyncio.TimerHandle | None = None

        def tick() -> None:
            nonlocal timer
            if self._stopping.is_set():
                ended.set_result(None)
                return
            try:
                self._send_one(spec, producer, next(numbers), partitions)
            except BaseException as e:  # a bug: the task raises it
                ended.set_exception(e)
                return
            timer = loop.call_later(interval_s, tick)

        tick()
        try:
            await ended
        finally:
            if timer is not None:
                timer.cancel()

    def _send_one(self, spec: ProducerSpec, producer: Producer, n: int, partitions: int) -> None:
        """Producer ``spec``'s ``n``-th send: value ``<name>-<n>``, round robin over the
        topic's ``partitions``."""
        value = f"{spec.name}-{n}"
        partition = n % partitions
        self.record_send(spec, OpType.INVOKE, partition, value)
        try:
            future = producer.send(spec.topic, value.encode(), partition=partition)
        except KafkasimError as e:
            self.record_send(spec, OpType.FAIL, partition, value, error=str(e))
        else:
            self._pending.add(future)  # type: ignore[arg-type]
            future.add_done_callback(
                lambda f, p=partition, v=value: self._sent(spec, p, v, f)  # type: ignore[misc]
            )

    def _sent(self, spec: ProducerSpec, partition: int, value: str, future: asyncio.Future) -> None:  # type: ignore[type-arg]
        self._pending.discard(future)
        if future.cancelled():
            self.record_send(spec, OpType.INFO, partition, value, error="cancelled")
            return
        error = future.exception()
        if error is None:
            self.record_send(spec, OpType.OK, partition, value, offset=future.result().offset)
        else:
            code = error.code if isinstance(error, KafkaError) else None
            self.send_failed(spec, partition, value, code, str(error))

    def send_failed(
        self,
        spec: ProducerSpec | TransformerSpec,
        partition: int,
        value: str,
        code: int | None,
        error: str,
        **where: str | None,
    ) -> None:
        """A send that ended in an error: ``fail`` when Kafka's error ``code`` says the record
        was refused before any append, ``info`` (unknown) otherwise. ``where``: ``topic``,
        ``txn`` and ``process`` as ``record_send`` takes them."""
        certain = code is not None and code in _DEFINITELY_NOT_WRITTEN
        type_ = OpType.FAIL if certain else OpType.INFO
        self.record_send(spec, type_, partition, value, error=error, topic=where.get("topic"),
                         txn=where.get("txn"), process=where.get("process"))  # fmt: skip

    def record_send(
        self,
        spec: ProducerSpec | TransformerSpec,
        type_: OpType,
        partition: int,
        value: str,
        *,
        offset: int | None = None,
        error: str | None = None,
        topic: str | None = None,
        txn: str | None = None,
        process: str | None = None,
    ) -> None:
        """One send op: to ``topic`` (default: the producer's), in transaction ``txn`` (a
        transformer's and a transactional producer's sends), by ``process`` (default: the
        spec's name)."""
        producer = spec if isinstance(spec, ProducerSpec) else None
        self.history.add(
            Op(
                type=type_,
                f="send",
                process=process or spec.name,
                time_ms=self.now(),
                topic=topic or (producer.topic if producer is not None else ""),
                partition=partition,
                value=value,
                offset=offset if offset is not None and offset >= 0 else None,
                error=error,
                idempotent=True if producer is None else producer.idempotent,
                acks="all" if producer is None else producer.acks,
                txn=txn,
            )
        )

    # -- consumers --------------------------------------------------------------------------

    def _reader(self, name: str) -> MinimalClient:
        return MinimalClient(
            self.transport_for(name),
            self.bootstrap,
            self.clock,
            request_timeout_ms=5_000,
            delivery_timeout_ms=5_000,
        )

    async def _consume(self, name: str, tp: TopicPartition, *, read_committed: bool) -> None:
        client = self._reader(f"{name}-{tp.partition}")
        position = 0
        while True:
            try:
                position = await self._read_once(
                    client, name, tp, position, max_wait_ms=500, read_committed=read_committed
                )
            except OffsetOutOfRangeError:
                position = await self._log_start(client, tp, position)
            except (KafkaError, RpcError) as e:
                logger.debug("%s: read of %s failed: %s", name, tp, e)
                await asyncio.sleep(0.5)

    async def _read_once(
        self,
        client: MinimalClient,
        name: str,
        tp: TopicPartition,
        position: int,
        *,
        max_wait_ms: int,
        read_committed: bool = False,
    ) -> int:
        """One fetch from ``position`` (as a consumer: below the HW, or below the LSO without
        the aborted transactions when ``read_committed``): each record read becomes an op;
        the next position (past every entry of the answer, markers and skipped batches too)."""
        part = await self._fetch(client, tp, position, max_wait_ms, read_committed)
        aborted = (
            [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
            if read_committed
            else None
        )
        isolation = READ_COMMITTED if read_committed else None
        for header, records in consumed_entries(
            part.records, fetch_offset=position, aborted=aborted
        ):
            for record in records:
                if record.offset < position:
                    continue  # the batch began before the position
                value = (record.value or b"").decode(errors="replace")
                self.record_read(name, tp.topic, tp.partition, value, offset=record.offset,
                                 hw=part.high_watermark, isolation=isolation)  # fmt: skip
            position = max(position, header.next_offset)
        return position

    @staticmethod
    async def _fetch(
        client: MinimalClient,
        tp: TopicPartition,
        position: int,
        max_wait_ms: int,
        read_committed: bool,
    ) -> pb.FetchPartitionResponse:
        """One fetch answer, retried under the client's policy (as ``MinimalClient.fetch``)."""
        return await client.retry(
            lambda: client.fetch_raw(
                tp,
                position,
                max_wait_ms=max_wait_ms,
                isolation_level=1 if read_committed else 0,
            )
        )

    def record_read(
        self,
        name: str,
        topic: str,
        partition: int,
        value: str,
        *,
        offset: int,
        hw: int | None,
        isolation: str | None = None,
    ) -> None:
        """One record a consumer received, with the HW of the fetch that carried it (None:
        the client does not say) and the consumer's isolation (None: read_uncommitted)."""
        self.history.add(
            Op(
                type=OpType.OK,
                f="read",
                process=name,
                time_ms=self.now(),
                topic=topic,
                partition=partition,
                value=value,
                offset=offset,
                hw=hw,
                isolation=isolation,
            )
        )

    async def _log_start(self, client: MinimalClient, tp: TopicPartition, position: int) -> int:
        with contextlib.suppress(KafkaError, RpcError):
            found = await client.list_offsets({tp: -2})
            return max(found[tp][0], 0)
        return position

    async def final_read(self, name: str = "final-reader", *, timeout_s: float = 60.0) -> None:
        """Read every partition of every topic from its log start to its high watermark."""
        client = self._reader(name)
        for spec in self.scenario.cluster.topics:
            for p in range(spec.partitions):
                tp = TopicPartition(spec.name, p)
                try:
                    await asyncio.wait_for(self._read_to_hw(client, name, tp), timeout_s)
                except TimeoutError:
                    raise FinalReadError(
                        f"final read of {tp.topic}-{tp.partition}: its high watermark not "
                        f"reached within {timeout_s:g} s (no leader, or none that answers)"
                    ) from None
        if self._txn is not None and self.scenario.workload.transformers:
            await asyncio.wait_for(self._txn.group_offsets(), timeout_s)

    async def _read_to_hw(self, client: MinimalClient, name: str, tp: TopicPartition) -> None:
        position = await self._log_start(client, tp, 0)
        while True:
            try:
                end = (await client.list_offsets({tp: -1}))[tp][0]
                if position >= end:
                    return
                position = await self._read_once(client, name, tp, position, max_wait_ms=0)
            except OffsetOutOfRangeError:
                position = await self._log_start(client, tp, position)
            except (KafkaError, RpcError) as e:
                logger.info("%s: final read of %s: %s; retrying", name, tp, e)
                await asyncio.sleep(0.5)

    # -- the sampler ------------------------------------------------------------------------

    async def _sample(self) -> None:
        transport = self.transport_for("sampler")
        topics = {t.name for t in self.scenario.cluster.topics}
        while True:
            for address in self.broker_addresses():
                try:
                    response = await transport.call(
                        address,
                        proto.METHOD_DESCRIBE_REPLICAS,
                        pb.DescribeReplicasRequest(),
                        timeout_s=1.0,
                    )
                except RpcError:
                    continue
                assert isinstance(response, pb.DescribeReplicasResponse)
                # The broker's own time of the state (same monotonic clock: one host, or the
                # simulation's), not when the answer arrived: a slow network would skew it.
                now = response.monotonic_ms - self.start_ms
                for r in response.replicas:
                    if r.topic not in topics:
                        continue
                    self.history.samples.append(ReplicaSample.from_state(now, r))
            await asyncio.sleep(self.sample_interval_ms / 1000)
