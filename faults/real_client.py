"""A scenario's producers and consumers driven by a real Kafka client, so that a failure run
shows what *that* client does when the leader dies: librdkafka, through confluent-kafka, on the
brokers' Kafka listeners (``workload.client = "confluent-kafka"``, ``kafkasim chaos run
--client confluent-kafka``). The history is the one ``faults.workload`` records for kafkasim's
own client, judged by the same checker:

* **Producers**: one ``confluent_kafka.Producer`` per producer of the scenario, with its acks
  and ``enable.idempotence`` and its extra settings, sending ``<producer>-<n>`` round robin over
  explicit partitions at the scenario's rate. ``invoke`` when handed to ``produce()``; the
  delivery report gives ``ok`` (its offset) or, for an error, what ``faults.workload`` decides
  from the error's code (Kafka's codes: a refusal before any append is ``fail``; a timeout, a
  lost connection or a purge at the end is ``info``). A ``produce()`` that raises (a full
  queue, a fatal producer) never queued the record: ``fail``.
* **Consumers**: one ``confluent_kafka.Consumer`` per consumer of the scenario, assigned every
  partition from the beginning (no group membership, no commits), each message an ``ok`` read.
  librdkafka does not hand out the high watermark of the fetch that carried a message (the
  cached watermark may be a later fetch's, from another leader), so these reads carry none and
  the checker's read-beyond-HW rule has nothing to judge for them; every other rule applies.

Every call into the client is non-blocking on the run's event loop (``produce``, ``poll(0)``,
``consume(timeout=0)``), so delivery reports and log lines are served on the loop's thread and
the fault schedule never waits on the client; closing runs in a worker thread. librdkafka's own
log lines (a refused connection to a killed broker, ...) are what a run provokes: they go to
this module's logger at INFO at most, fatal client errors at ERROR. confluent-kafka is imported
only when a run asks for it (``require``): kafkasim runs without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from kafkasim.common.errors import KafkasimError
from kafkasim.faults.history import OpType
from kafkasim.faults.scenario import CLIENT_CONFLUENT, CLIENT_KAFKASIM, ProducerSpec, Scenario

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["ClientUnavailableError", "ConfluentWorkload", "Recorder", "require"]

logger = logging.getLogger(__name__)

_POLL_IDLE_S = 0.05  # how long a consumer with nothing to hand out waits before asking again
_CONSUME_BATCH = 500


class ClientUnavailableError(KafkasimError):
    """The workload's client cannot run here (its package is not installed, it has no Kafka
    listener to reach, or it refuses the scenario's settings)."""


def require(client: str) -> None:
    """ClientUnavailableError unless ``client``'s package can be imported (before a run)."""
    if client == CLIENT_KAFKASIM:
        return
    if client != CLIENT_CONFLUENT:
        raise ClientUnavailableError(f"unknown client {client!r}")
    try:
        _kafka()
    except ImportError as e:
        raise ClientUnavailableError(
            f"the {client} client is not installed ({e}): pip install confluent-kafka"
        ) from None


def _kafka() -> ModuleType:
    """confluent_kafka, imported on first use: kafkasim runs without it."""
    import confluent_kafka  # noqa: PLC0415 - optional: only a run that uses it imports it

    return confluent_kafka


class Recorder(Protocol):
    """Where the client's events go (``faults.workload.Workload``)."""

    def record_send(
        self,
        spec: ProducerSpec,
        type_: OpType,
        partition: int,
        value: str,
        *,
        offset: int | None = None,
        error: str | None = None,
    ) -> None: ...

    def send_failed(
        self, spec: ProducerSpec, partition: int, value: str, code: int | None, error: str
    ) -> None:
        """A send's error: ``fail`` if ``code`` (Kafka's) says nothing was appended, else
        ``info``."""

    def record_read(
        self, name: str, topic: str, partition: int, value: str, *, offset: int, hw: int | None
    ) -> None: ...


class _ClientLog:
    """librdkafka's log lines (``logger`` setting) on this module's logger, at INFO at most:
    refused connections and timeouts are what a failure run provokes."""

    def __init__(self, client_name: str) -> None:
        self.client_name = client_name

    def log(self, level: int, msg: str, *args: object) -> None:
        logger.log(min(level, logging.INFO), "%s: " + msg, self.client_name, *args)


def _on_error(client_name: str, error: confluent_kafka.KafkaError) -> None:
    """librdkafka's ``error_cb``: transient errors at INFO, a fatal one (the client gave up:
    every later send fails) at ERROR."""
    level = logging.ERROR if error.fatal() else logging.INFO
    logger.log(level, "%s: %s", client_name, error)


class ConfluentWorkload:
    """The producers and consumers of ``scenario`` on librdkafka (see the module doc)."""

    def __init__(self, scenario: Scenario, bootstrap: list[str], recorder: Recorder) -> None:
        if not bootstrap:
            raise ClientUnavailableError(
                f"{CLIENT_CONFLUENT} needs the brokers' Kafka listeners: this cluster has none"
            )
        require(CLIENT_CONFLUENT)
        self.scenario = scenario
        self.bootstrap = ",".join(bootstrap)
        self.recorder = recorder
        self._producers: list[tuple[ProducerSpec, confluent_kafka.Producer]] = []
        self._consumers: list[tuple[str, confluent_kafka.Consumer]] = []
        self._stopping = asyncio.Event()

    def _common(self, name: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": name,
            "logger": _ClientLog(name),
            "error_cb": functools.partial(_on_error, name),
        }

    def _make(self, kind: str, name: str, config: dict[str, Any]) -> Any:
        kafka = _kafka()
        factory = kafka.Producer if kind == "producer" else kafka.Consumer
        try:
            return factory(config)
        except (kafka.KafkaException, ValueError, TypeError) as e:
            raise ClientUnavailableError(
                f"{CLIENT_CONFLUENT} refuses the settings of {kind} {name}: {e}"
            ) from None

    def start(self) -> list[asyncio.Task[None]]:
        """Create every client (a setting librdkafka refuses fails here, before any send),
        then one task per producer and per consumer."""
        kafka = _kafka()
        for spec in self.scenario.workload.producers:
            config = {
                **self._common(spec.name),
                "acks": spec.acks,
                "enable.idempotence": spec.idempotent,
                "linger.ms": 5,
                "delivery.timeout.ms": 30_000,
                "request.timeout.ms": 5_000,
                **spec.config,
            }
            self._producers.append((spec, self._make("producer", spec.name, config)))
        for consumer in self.scenario.workload.consumers:
            config = {
                **self._common(consumer.name),
                "group.id": f"kafkasim-chaos-{consumer.name}",  # librdkafka needs one; unused
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
            client = self._make("consumer", consumer.name, config)
            partitions = self.scenario.topic(consumer.topic).partitions
            client.assign(
                [
                    kafka.TopicPartition(consumer.topic, p, kafka.OFFSET_BEGINNING)
                    for p in range(partitions)
                ]
            )
            self._consumers.append((consumer.name, client))
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(self._produce(spec, producer), name=f"wl-{spec.name}")
            for spec, producer in self._producers
        ]
        tasks.extend(
            loop.create_task(self._consume(name, consumer), name=f"wl-{name}")
            for name, consumer in self._consumers
        )
        return tasks

    # -- producers --------------------------------------------------------------------------

    async def _produce(self, spec: ProducerSpec, producer: confluent_kafka.Producer) -> None:
        kafka_error = _kafka().KafkaException
        partitions = self.scenario.topic(spec.topic).partitions
        interval_s = 1.0 / spec.rate
        n = 0
        while not self._stopping.is_set():
            value = f"{spec.name}-{n}"
            partition = n % partitions
            n += 1
            self.recorder.record_send(spec, OpType.INVOKE, partition, value)
            try:
                producer.produce(
                    spec.topic,
                    value.encode(),
                    partition=partition,
                    on_delivery=functools.partial(self._delivered, spec, partition, value),
                )
            except (BufferError, kafka_error) as e:  # a full queue, a fatal producer error
                self.recorder.record_send(spec, OpType.FAIL, partition, value, error=str(e))
            producer.poll(0)  # delivery reports and log lines, on this thread
            await asyncio.sleep(interval_s)

    def _delivered(
        self,
        spec: ProducerSpec,
        partition: int,
        value: str,
        error: confluent_kafka.KafkaError | None,
        message: confluent_kafka.Message,
    ) -> None:
        if error is None:
            offset = message.offset()
            self.recorder.record_send(spec, OpType.OK, partition, value, offset=offset)
        else:
            self.recorder.send_failed(spec, partition, value, error.code(), error.str())

    async def stop_producers(self, timeout_s: float) -> None:
        """Stop sending; serve delivery reports until none is outstanding or ``timeout_s``
        passed; purge the rest (their reports say purged: unknown outcome)."""
        self._stopping.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(len(p) for _, p in self._producers) and loop.time() < deadline:
            for _, producer in self._producers:
                producer.poll(0)
            await asyncio.sleep(_POLL_IDLE_S)
        for _, producer in self._producers:
            if len(producer):
                producer.purge()
            producer.poll(0)  # the purged records' reports

    # -- consumers --------------------------------------------------------------------------

    async def _consume(self, name: str, consumer: confluent_kafka.Consumer) -> None:
        while True:
            messages = consumer.consume(num_messages=_CONSUME_BATCH, timeout=0)
            for message in messages:
                error = message.error()
                if error is not None:
                    logger.debug("%s: %s", name, error)
                    continue
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    continue
                value = (message.value() or b"").decode(errors="replace")
                self.recorder.record_read(name, topic, partition, value, offset=offset, hw=None)
            await asyncio.sleep(0 if messages else _POLL_IDLE_S)

    async def close(self) -> None:
        """Close every client (in a worker thread: closing may wait on its brokers)."""
        kafka_error = _kafka().KafkaException
        producers, consumers = self._producers, self._consumers
        self._producers, self._consumers = [], []
        for _, producer in producers:
            producer.purge()
            producer.poll(0)  # the purged records' reports, on this thread
            with contextlib.suppress(kafka_error, RuntimeError):
                await asyncio.to_thread(producer.close)
        for _, consumer in consumers:
            with contextlib.suppress(kafka_error, RuntimeError):
                await asyncio.to_thread(consumer.close)
