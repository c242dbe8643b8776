"""Blocking clients beside the asyncio ones, as kafka-python and confluent-kafka users expect:
:class:`SyncProducer`, :class:`SyncConsumer` and :class:`SyncAdminClient`.

Each runs its asyncio client (:class:`~client.producer.Producer`,
:class:`~client.consumer.Consumer`, :class:`~client.admin.AdminClient`) on an event loop of its
own, in a private daemon thread, so it works from plain scripts and from code that already
runs an event loop (a notebook). Every call hands a coroutine to that loop and waits for it;
an error raises again in the caller's thread (the same exception object, traceback included).
``close`` (or leaving the ``with`` block) closes the client, then stops the loop and joins
the thread. The configs, the defaults (a ``GrpcTransport`` of the client's own, the system
clock), the serializers and the errors are the asyncio clients'.

Differences from the asyncio API: ``SyncProducer.send`` returns a :class:`RecordFuture`
(``get(timeout)`` blocks for the :class:`RecordMetadata`, as kafka-python's), timeouts are in
seconds where kafka-python's are (``get``, ``flush``, ``close``) and ``poll`` takes
``timeout_ms`` as the asyncio consumer (and kafka-python) do; iterating a
:class:`SyncConsumer` yields records as they come, forever (break out of the loop).

A client may be shared by threads (calls are serialized on its loop) but must not be called
from its own callbacks (a send callback runs on the client's thread): that raises
RuntimeError instead of deadlocking.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from kafkasim.client.accumulator import Headers, RecordMetadata
from kafkasim.client.admin import AdminClient
from kafkasim.client.consumer import Consumer
from kafkasim.client.consumer_types import ConsumerRecord
from kafkasim.client.producer import Producer
from kafkasim.common.clock import Clock
from kafkasim.common.rpc import ClientTransport

__all__ = ["RecordFuture", "SyncAdminClient", "SyncConsumer", "SyncProducer"]

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C")

ITERATION_POLL_MS = 1000
"""How long each poll of a consumer's iteration waits (it polls again when nothing came)."""


class _LoopThread:
    """An event loop running forever in a daemon thread of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (its error raises here).
        ``timeout_s`` passed: the coroutine is cancelled and TimeoutError raises."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking kafkasim client was called from its own thread")
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s} s") from None

    def stop(self) -> None:
        """Cancel what is left on the loop, stop it, join the thread, close the loop."""
        if not self._thread.is_alive():
            return
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking kafkasim client was closed from its own thread")
        asyncio.run_coroutine_threadsafe(_cancel_others(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


async def _cancel_others() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return fn(*args, **kwargs)


class _Blocking:
    """What the three clients share: the loop thread, the wrapped client (an instance of
    ``_wraps``, made on the loop with the same arguments), close and ``with``."""

    _wraps: Callable[..., Any]
    _closed = False

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        transport: ClientTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._thread = _LoopThread(f"kafkasim-{type(self).__name__}")
        make = type(self)._wraps
        try:
            self._client: Any = self._thread.run(
                _call(make, config, transport=transport, clock=clock)
            )
        except BaseException:
            self._thread.stop()
            raise

    def _close(self, coro: Coroutine[Any, Any, None], timeout_s: float | None = None) -> None:
        if self._closed:
            coro.close()
            return
        self._closed = True
        try:
            self._thread.run(coro, timeout_s)
        finally:
            self._thread.stop()

    def close(self) -> None:
        self._close(self._client.close())

    def __enter__(self: C) -> C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _blocking(
    method: Callable[Concatenate[C, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[_Blocking, P], T]:
    """A coroutine method of the wrapped client as a blocking method of the facade."""

    def call(self: _Blocking, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._thread.run(method(self._client, *args, **kwargs))

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


def _on_loop(method: Callable[Concatenate[C, P], T]) -> Callable[Concatenate[_Blocking, P], T]:
    """A plain method of the wrapped client, called on its loop (it is not thread-safe)."""

    def call(self: _Blocking, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._thread.run(_call(method, self._client, *args, **kwargs))

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class RecordFuture:
    """The outcome of :meth:`SyncProducer.send` (kafka-python's ``FutureRecordMetadata``)."""

    def __init__(self, future: concurrent.futures.Future[RecordMetadata]) -> None:
        self._future = future

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged (seconds; None waits); its error raises."""
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)


def _copy_outcome(
    target: concurrent.futures.Future[RecordMetadata], done: asyncio.Future[RecordMetadata]
) -> None:
    if done.cancelled():
        target.cancel()
    elif (error := done.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(done.result())


class SyncProducer(_Blocking):
    """A blocking :class:`~client.producer.Producer`; the same config and keywords."""

    _wraps = Producer

    @property
    def producer(self) -> Producer:
        """The asyncio client underneath (use it on its loop only)."""
        client: Producer = self._client
        return client

    def send(  # noqa: PLR0917 -- Kafka's ProducerRecord fields, in its order
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """Queue one record (misuse raises here, as from ``Producer.send``)."""
        outcome: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()

        async def send() -> None:
            future = self.producer.send(topic, value, key, headers, partition, timestamp)
            future.add_done_callback(lambda done: _copy_outcome(outcome, done))

        self._thread.run(send())
        return RecordFuture(outcome)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is acknowledged or failed (TimeoutError after
        ``timeout`` seconds)."""
        self._thread.run(self.producer.flush(), timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered and stop (``Producer.close``); idempotent."""
        self._close(self.producer.close(timeout))

    init_transactions = _blocking(Producer.init_transactions)
    begin_transaction = _on_loop(Producer.begin_transaction)
    send_offsets_to_transaction = _blocking(Producer.send_offsets_to_transaction)
    commit_transaction = _blocking(Producer.commit_transaction)
    abort_transaction = _blocking(Producer.abort_transaction)


class SyncConsumer(_Blocking):
    """A blocking :class:`~client.consumer.Consumer`; the same config and keywords."""

    _wraps = Consumer

    @property
    def consumer(self) -> Consumer:
        """The asyncio client underneath (use it on its loop only)."""
        client: Consumer = self._client
        return client

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Every record, as it comes (polls again and again; break to stop)."""
        while True:
            yield from self.poll(ITERATION_POLL_MS)

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting up to ``timeout_ms`` for some."""
        return self._thread.run(self.consumer.poll(timeout_ms))

    assign = _on_loop(Consumer.assign)
    assignment = _on_loop(Consumer.assignment)
    subscribe = _on_loop(Consumer.subscribe)
    subscription = _on_loop(Consumer.subscription)
    unsubscribe = _on_loop(Consumer.unsubscribe)
    seek = _on_loop(Consumer.seek)
    seek_to_beginning = _on_loop(Consumer.seek_to_beginning)
    seek_to_end = _on_loop(Consumer.seek_to_end)
    position = _on_loop(Consumer.position)
    group_metadata = _on_loop(Consumer.group_metadata)
    commit = _blocking(Consumer.commit)
    committed = _blocking(Consumer.committed)
    partitions_for = _blocking(Consumer.partitions_for)
    beginning_offsets = _blocking(Consumer.beginning_offsets)
    end_offsets = _blocking(Consumer.end_offsets)
    offsets_for_times = _blocking(Consumer.offsets_for_times)


class SyncAdminClient(_Blocking):
    """A blocking :class:`~client.admin.AdminClient`; the same config and keywords."""

    _wraps = AdminClient

    @property
    def admin(self) -> AdminClient:
        """The asyncio client underneath (use it on its loop only)."""
        client: AdminClient = self._client
        return client

    create_topics = _blocking(AdminClient.create_topics)
    delete_topics = _blocking(AdminClient.delete_topics)
    create_partitions = _blocking(AdminClient.create_partitions)
    list_topics = _blocking(AdminClient.list_topics)
    describe_topics = _blocking(AdminClient.describe_topics)
    describe_cluster = _blocking(AdminClient.describe_cluster)
    describe_configs = _blocking(AdminClient.describe_configs)
    alter_topic_configs = _blocking(AdminClient.alter_topic_configs)
    describe_broker_configs = _blocking(AdminClient.describe_broker_configs)
    alter_broker_configs = _blocking(AdminClient.alter_broker_configs)
    elect_leaders = _blocking(AdminClient.elect_leaders)
    delete_records = _blocking(AdminClient.delete_records)
    list_groups = _blocking(AdminClient.list_groups)
    describe_groups = _blocking(AdminClient.describe_groups)
    list_group_offsets = _blocking(AdminClient.list_group_offsets)
    group_lag = _blocking(AdminClient.group_lag)
    alter_group_offsets = _blocking(AdminClient.alter_group_offsets)
    delete_groups = _blocking(AdminClient.delete_groups)
    delete_consumer_group_offsets = _blocking(AdminClient.delete_consumer_group_offsets)
    list_offsets = _blocking(AdminClient.list_offsets)
    list_transactions = _blocking(AdminClient.list_transactions)
    describe_transactions = _blocking(AdminClient.describe_transactions)
    describe_producers = _blocking(AdminClient.describe_producers)
