"""The transactional half of a scenario's workload (KIP-98): transactional producers and
consume-transform-produce loops, driven through kafkasim's own ``Producer`` and ``Consumer`` and
recorded as ``faults.history`` and the checker (``faults.transactions``) read them.

Theory of operation
-------------------
* **Numbering.** Every transaction gets ``"<transactional.id>:<n>"``, ``n`` counting per
  transactional id across every instance that uses it (two producers sharing an id, or a
  restarted instance, never reuse a number).
* **A transactional producer** (``ProducerSpec.transactional``) calls ``init_transactions``,
  then loops: ``begin_transaction``; ``transaction_records`` sends at ``rate`` (each an
  ``invoke`` and its outcome, with ``txn``); then ``commit_transaction`` (``commit`` invoke,
  then ok or info) or, every ``abort_every``-th time, ``abort_transaction`` (``abort`` ok or
  info). A commit that raised leaves its outcome unknown (``info``): an EndTxn that reached the
  coordinator may commit although its answer was lost or fenced. The instance then aborts; an
  abort that returns ok makes the transaction aborted.
* **Failures.** A commit that timed out is waited for again (Kafka's KAFKA-13412 rule). An
  instance fenced (PRODUCER_FENCED: another instance of its transactional id took over) is a
  zombie and stops for good, as a Kafka application closes a fenced producer (fenced with no
  other instance of its id, by the coordinator's timeout abort, it is replaced). An instance that
  cannot go on otherwise (an abort refused, a fatal error) is replaced by a new one (a new
  ``init_transactions``, which finishes or aborts whatever the old one left open).
* **A stall** (``pause_at_s``/``pause_s``) stops the application in the middle of a transaction,
  after at least one send: nothing more is sent or committed until it wakes up. It happens
  once per producer: the instance that replaces a stalled one does not stall again. The producer's
  own sender keeps running (what matters is that the transaction stays open: the coordinator
  aborts it after ``transaction_timeout_ms``, or a new instance fences it).
* **A transformer** consumes its input in a group (read_committed, no auto-commit) and writes
  each polled batch to its output in one transaction, value ``<name>:<input value>`` to the
  input's partition modulo the output's partitions, with ``send_offsets_to_transaction`` of the
  batch's next offsets (one ``send_offsets`` op per partition). Its reads are recorded as
  read_committed reads of process ``<name>`` (``<name>#k`` for its k-th replacement). After an
  abort it seeks back to the group's committed offsets (Kafka's
  ``resetToLastCommittedPositions``: ``committed()``, the beginning where there is none,
  recorded as ``fetch_offsets`` ops); its consumer is read_committed, so the fetch is stable
  (KIP-447) and waits until the aborted transaction's offsets are dropped. After an unknown
  outcome it is replaced: the new instance's ``init_transactions`` completes the old
  transaction, then it reads the group's committed offsets (``fetch_offsets`` ops) and
  resumes from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kafkasim.client.consumer import Consumer
from kafkasim.client.producer import Producer
from kafkasim.client.producer_errors import DeliveryTimeoutError
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, KafkasimError, ProducerFencedError
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import (
    ABORT,
    COMMIT,
    FETCH_OFFSETS,
    READ_COMMITTED,
    SEND_OFFSETS,
    History,
    Op,
    OpType,
)
from kafkasim.faults.scenario import ProducerSpec, Scenario, TransformerSpec


class Workload(Protocol):
    """What the transactional clients use of ``faults.workload.Workload`` (which starts
    them): its clock, transports, history and recording calls."""

    scenario: Scenario
    history: History
    clock: Clock
    bootstrap: list[str]

    @property
    def transport_for(self) -> Callable[[str], ClientTransport]: ...

    def now(self) -> int: ...

    @property
    def stopping(self) -> asyncio.Event: ...

    def partitions_of(self, topic: str) -> int: ...

    def send_failed(
        self,
        spec: ProducerSpec | TransformerSpec,
        partition: int,
        value: str,
        code: int | None,
        error: str,
        **where: str | None,
    ) -> None: ...

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
    ) -> None: ...

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
    ) -> None: ...


__all__ = ["TxnClients"]

logger = logging.getLogger(__name__)

# Client errors after which the workload goes on (anything else is a bug and propagates).
_CLIENT_ERRORS = (KafkasimError, RpcError, asyncio.TimeoutError)
COMMITTED, ABORTED, REPLACE = "committed", "aborted", "replace"  # how ``finish`` ended
COMMIT_WAITS = 3  # a commit that timed out is waited for this many more times
TXN_CALL_TIMEOUT_S = 20.0


class FencedError(Exception):
    """This instance was fenced by a newer one: a zombie, it stops."""


@dataclass
class TxnClients:
    """The transactional clients of one workload (``Workload`` starts them)."""

    workload: Workload
    _numbers: dict[str, int] = field(default_factory=dict)
    _live: list[Producer | Consumer] = field(default_factory=list)

    def next_txn(self, transactional_id: str) -> str:
        n = self._numbers.get(transactional_id, 0)
        self._numbers[transactional_id] = n + 1
        return f"{transactional_id}:{n}"

    def _end(self, type_: OpType, f: str, process: str, txn: str, error: str | None = None) -> None:
        wl = self.workload
        wl.history.add(Op.end(type_, f, process, time_ms=wl.now(), txn=txn, error=error))

    def _producer(self, name: str, transactional_id: str, extra: dict[str, object]) -> Producer:
        wl = self.workload
        config: dict[str, object] = {
            "bootstrap.servers": ",".join(wl.bootstrap),
            "acks": "all",
            "enable.idempotence": True,
            "client.id": name,
            "linger.ms": 5,
            "delivery.timeout.ms": 30_000,
            "request.timeout.ms": 5_000,
            "max.block.ms": int(TXN_CALL_TIMEOUT_S * 1000),
            **extra,
            "transactional.id": transactional_id,
        }
        producer = Producer(config, transport=wl.transport_for(name), clock=wl.clock)
        self._live.append(producer)
        return producer

    async def _init(self, producer: Producer) -> None:
        """``init_transactions`` until it succeeds (a coordinator may be down for a while);
        FencedError if a newer instance already holds the id."""
        while True:
            try:
                await producer.init_transactions()
                return
            except ProducerFencedError:
                raise FencedError from None
            except DeliveryTimeoutError:
                continue  # the call may be repeated (KAFKA-13412)

    async def close(self) -> None:
        for client in self._live:
            with contextlib.suppress(*_CLIENT_ERRORS):
                if isinstance(client, Producer):
                    await client.close(timeout_s=0)
                else:
                    await client.close()
        self._live.clear()

    # -- ending a transaction ---------------------------------------------------------------------

    async def finish(self, producer: Producer, process: str, txn: str, *, abort: bool) -> str:
        """Commit (or abort) the open transaction, recording it: COMMITTED or ABORTED when the
        instance may go on, REPLACE when it must be replaced; FencedError for a zombie."""
        if abort:
            return await self._abort(producer, process, txn)
        self._end(OpType.INVOKE, COMMIT, process, txn)
        error: BaseException | None = None
        for _ in range(1 + COMMIT_WAITS):
            try:
                await producer.commit_transaction()
            except DeliveryTimeoutError as e:
                error = e
                continue
            except _CLIENT_ERRORS as e:
                error = e
                break
            self._end(OpType.OK, COMMIT, process, txn)
            return COMMITTED
        self._end(OpType.INFO, COMMIT, process, txn, error=str(error))
        if isinstance(error, ProducerFencedError):
            raise FencedError
        if isinstance(error, DeliveryTimeoutError):
            return REPLACE  # still committing, maybe: a new instance finishes it
        return await self._abort(producer, process, txn)

    async def _abort(self, producer: Producer, process: str, txn: str) -> str:
        self._end(OpType.INVOKE, ABORT, process, txn)
        try:
            await producer.abort_transaction()
        except _CLIENT_ERRORS as e:
            self._end(OpType.INFO, ABORT, process, txn, error=str(e))
            if isinstance(e, ProducerFencedError):
                raise FencedError from None
            return REPLACE
        self._end(OpType.OK, ABORT, process, txn)
        return ABORTED

    # -- the transactional producer ---------------------------------------------------------------

    async def produce(self, spec: ProducerSpec) -> None:
        """One transactional producer (see the module doc), replaced when it must be."""
        wl = self.workload
        await asyncio.sleep(max(spec.start_s * 1000 - wl.now(), 0) / 1000)
        extra: dict[str, object] = dict(spec.config)
        if spec.transaction_timeout_ms is not None:
            extra["transaction.timeout.ms"] = spec.transaction_timeout_ms
        progress = _Progress(stalled=spec.pause_at_s is None)
        incarnation = 0
        while not wl.stopping.is_set():
            name = spec.name if incarnation == 0 else f"{spec.name}#{incarnation}"
            incarnation += 1
            producer = self._producer(name, spec.txn_id, extra)
            try:
                await self._init(producer)
                while not wl.stopping.is_set():
                    if not await self._one_transaction(spec, producer, progress):
                        break
            except FencedError:
                if self._shared(spec):
                    logger.info("%s: fenced by another instance of %s; stopping", name, spec.txn_id)
                    return
                # Nobody else has the id: the coordinator fenced it (a transaction that timed
                # out bumps the epoch). Its application starts it again.
                logger.info("%s: fenced by its coordinator; starting a new instance", name)
            except _CLIENT_ERRORS as e:
                logger.info("%s: %s; replacing the instance", name, e)
            with contextlib.suppress(*_CLIENT_ERRORS):
                await producer.close(timeout_s=0)

    def _shared(self, spec: ProducerSpec) -> bool:
        """Whether another producer of the workload uses ``spec``'s transactional id."""
        return any(
            p is not spec and p.transactional and p.txn_id == spec.txn_id
            for p in self.workload.scenario.workload.producers
        )

    async def _one_transaction(
        self, spec: ProducerSpec, producer: Producer, progress: _Progress
    ) -> bool:
        """One transaction; whether the instance may go on. The stall happens once per
        producer, whichever instance reaches ``pause_at_s`` first: the instance that replaces
        a stalled one (fenced by the timeout abort) does not stall again."""
        wl = self.workload
        partitions = wl.partitions_of(spec.topic)
        txn = self.next_txn(spec.txn_id)
        producer.begin_transaction()
        failed = False
        for i in range(spec.transaction_records):
            if wl.stopping.is_set():
                break
            at_ms = None if spec.pause_at_s is None else spec.pause_at_s * 1000
            if not progress.stalled and i > 0 and at_ms is not None and wl.now() >= at_ms:
                progress.stalled = True
                await asyncio.sleep(spec.pause_s)
            n = progress.take()
            value = f"{spec.name}-{n}"
            partition = n % partitions
            if not self.send(producer, spec, topic=spec.topic, partition=partition, value=value,
                             txn=txn):  # fmt: skip
                failed = True
                break
            await asyncio.sleep(1.0 / spec.rate)
        number = int(txn.rpartition(":")[2])
        abort = failed or (spec.abort_every > 0 and (number + 1) % spec.abort_every == 0)
        outcome = await self.finish(producer, spec.name, txn, abort=abort)
        return outcome != REPLACE

    def send(self, producer: Producer, spec: ProducerSpec | TransformerSpec, *, topic: str,
             partition: int, value: str, txn: str, process: str = "") -> bool:  # fmt: skip
        """One transactional send, recorded (invoke, then its outcome); False if refused."""
        wl = self.workload
        record: Callable[..., None] = lambda type_, **kw: wl.record_send(  # noqa: E731
            spec, type_, partition, value, topic=topic, txn=txn, process=process, **kw
        )
        record(OpType.INVOKE)
        try:
            future = producer.send(topic, value.encode(), partition=partition)
        except _CLIENT_ERRORS as e:
            record(OpType.FAIL, error=str(e))  # refused before anything was sent
            return False

        def done(f: asyncio.Future[object]) -> None:
            if f.cancelled():
                record(OpType.INFO, error="cancelled")
                return
            error = f.exception()
            if error is None:
                record(OpType.OK, offset=getattr(f.result(), "offset", None))
            else:
                code = error.code if isinstance(error, KafkaError) else None
                wl.send_failed(spec, partition, value, code, str(error), topic=topic, txn=txn,
                               process=process)  # fmt: skip

        future.add_done_callback(done)  # type: ignore[arg-type]
        return True

    # -- the consume-transform-produce loop -------------------------------------------------------

    async def transform(self, spec: TransformerSpec) -> None:
        """One transformer (see the module doc), replaced when it must be."""
        wl = self.workload
        incarnation = 0
        while not wl.stopping.is_set():
            name = spec.name if incarnation == 0 else f"{spec.name}#{incarnation}"
            incarnation += 1
            producer = self._producer(name, spec.txn_id, {})
            consumer = Consumer(
                {
                    "bootstrap.servers": ",".join(wl.bootstrap),
                    "group.id": spec.group_id,
                    "client.id": name,
                    "isolation.level": READ_COMMITTED,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
                transport=wl.transport_for(f"{name}-consumer"),
                clock=wl.clock,
            )
            self._live.append(consumer)
            try:
                await self._init(producer)
                consumer.subscribe([spec.input])
                await self._transform_loop(spec, name, producer, consumer)
            except FencedError:
                logger.info("%s: fenced; stopping", name)
                return
            except _CLIENT_ERRORS as e:
                logger.info("%s: %s; replacing the instance", name, e)
            for client in (producer, consumer):
                with contextlib.suppress(*_CLIENT_ERRORS):
                    await (client.close(timeout_s=0) if isinstance(client, Producer)
                           else client.close())  # fmt: skip

    async def _transform_loop(
        self, spec: TransformerSpec, name: str, producer: Producer, consumer: Consumer
    ) -> None:
        wl = self.workload
        out_partitions = wl.partitions_of(spec.output)
        resumed: set[TopicPartition] = set()
        while not wl.stopping.is_set():
            polled = await consumer.poll(500)
            fresh = await self._resume_from_committed(spec, name, consumer, resumed)
            # What came before the seek to the committed offsets is fetched again after it.
            records = [r for r in polled if r.topic_partition not in fresh]
            if not records:
                continue
            txn = self.next_txn(spec.txn_id)
            producer.begin_transaction()
            offsets: dict[TopicPartition, int] = {}
            for r in records:
                value = (r.value or b"").decode(errors="replace")
                wl.record_read(name, r.topic, r.partition, value, offset=r.offset, hw=None,
                               isolation=READ_COMMITTED)  # fmt: skip
                out = f"{spec.name}:{value}"
                partition = r.partition % out_partitions
                self.send(producer, spec, topic=spec.output, partition=partition, value=out,
                          txn=txn, process=name)  # fmt: skip
                offsets[r.topic_partition] = r.offset + 1
            for tp, offset in sorted(offsets.items()):
                wl.history.add(Op(OpType.INVOKE, SEND_OFFSETS, name, wl.now(), tp.topic,
                                  tp.partition, "", offset=offset, txn=txn,
                                  group=spec.group_id))  # fmt: skip
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            for tp, offset in sorted(offsets.items()):
                wl.history.add(Op(OpType.OK, SEND_OFFSETS, name, wl.now(), tp.topic,
                                  tp.partition, "", offset=offset, txn=txn,
                                  group=spec.group_id))  # fmt: skip
            number = int(txn.rpartition(":")[2])
            abort = spec.abort_every > 0 and (number + 1) % spec.abort_every == 0
            outcome = await self.finish(producer, name, txn, abort=abort)
            if outcome == REPLACE:
                return  # the next instance resumes from the committed offsets
            if outcome == ABORTED:
                await self._seek_to_committed(spec, name, consumer, sorted(offsets))

    async def _resume_from_committed(
        self,
        spec: TransformerSpec,
        name: str,
        consumer: Consumer,
        resumed: set[TopicPartition],
    ) -> set[TopicPartition]:
        """Newly assigned partitions start from the group's committed offsets, recorded; the
        partitions it moved."""
        fresh = sorted(consumer.assignment() - resumed)
        if not fresh:
            return set()
        committed = await consumer.committed(fresh)
        resumed.update(fresh)
        moved: set[TopicPartition] = set()
        for tp in fresh:
            offset = committed.get(tp)
            if offset is None:
                continue  # none committed: it reads from the start, as it began to
            self._fetched(spec, name, tp, offset)
            consumer.seek(tp, offset)
            moved.add(tp)
        return moved

    async def _seek_to_committed(
        self, spec: TransformerSpec, name: str, consumer: Consumer, tps: list[TopicPartition]
    ) -> None:
        """After an abort: back to the group's committed offsets, read stable (Kafka's
        ``resetToLastCommittedPositions``)."""
        committed = await consumer.committed(tps)
        for tp in tps:
            offset = committed.get(tp)
            if offset is None:
                consumer.seek_to_beginning([tp])
                continue
            self._fetched(spec, name, tp, offset)
            consumer.seek(tp, offset)

    def _fetched(self, spec: TransformerSpec, name: str, tp: TopicPartition, offset: int) -> None:
        wl = self.workload
        wl.history.add(Op(OpType.OK, FETCH_OFFSETS, name, wl.now(), tp.topic, tp.partition, "",
                          offset=offset, group=spec.group_id))  # fmt: skip

    async def group_offsets(self) -> None:
        """The transformers' groups' committed offsets, read back at the end."""
        wl = self.workload
        for spec in wl.scenario.workload.transformers:
            name = f"final-{spec.name}"
            async with Consumer(
                # Named: an unnamed consumer's id counts consumers made in the process so far,
                # which would carry one run's state into the next run of a sweep.
                {
                    "bootstrap.servers": ",".join(wl.bootstrap),
                    "group.id": spec.group_id,
                    "client.id": name,
                },
                transport=wl.transport_for(name),
                clock=wl.clock,
            ) as consumer:
                tps = [TopicPartition(spec.input, p) for p in range(wl.partitions_of(spec.input))]
                for tp, offset in (await consumer.committed(tps)).items():
                    if offset is not None:
                        wl.history.final_group_offsets[(spec.group_id, tp.topic, tp.partition)] = (
                            offset
                        )


@dataclass
class _Progress:
    """What a producer's instances share: its value numbers (values stay unique) and whether
    its stall already happened."""

    n: int = 0
    stalled: bool = False

    def take(self) -> int:
        n = self.n
        self.n += 1
        return n
