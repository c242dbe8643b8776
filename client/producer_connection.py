"""One broker's produce connection: a pipelined ``ProduceStream`` (rule 2 of
:mod:`client.producer`).

The sender decides what goes into each :class:`InFlightRequest`; a :class:`BrokerConnection`
only writes requests in order, matches answers to them in order, and reports each outcome to
its :class:`ConnectionListener` (the sender): written without an answer to wait for (acks=0),
answered, or failed because the stream broke or went silent for ``request.timeout.ms``.

Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from kafkasim import proto
from kafkasim.client.accumulator import ProducerBatch
from kafkasim.client.producer_errors import log_task_error, logger
from kafkasim.common.clock import Clock
from kafkasim.common.rpc import BidiStream, ClientTransport, RpcError, RpcStatus
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["BrokerConnection", "ConnectionListener", "InFlightRequest"]


@dataclass(slots=True)
class InFlightRequest:
    correlation_id: int
    request: pb.ProduceRequest
    batches: list[ProducerBatch]
    deadline_ms: int = 0  # answer expected by then (set when put in flight)
    written: bool = False  # on the stream; with acks=0 its records are then done


class ConnectionListener(Protocol):
    """What a connection tells the sender about its requests."""

    def on_sent_without_ack(self, request: InFlightRequest) -> None:
        """An acks=0 request is on the stream: its records are done."""

    def on_response(self, request: InFlightRequest, response: pb.ProduceResponse) -> None:
        """The broker answered the request (acks 1 or all)."""

    def on_request_failed(self, request: InFlightRequest, broker_id: int, cause: RpcError) -> None:
        """The request's stream broke or timed out before the answer."""


class BrokerConnection:
    """One broker's pipelined ProduceStream: requests written in order, answers read in order.

    A writer task sends queued requests; a reader task matches answers to requests by
    correlation id. An acks=0 request's records are done once it is written, but its answer
    (the broker answers every request of a stream) is still read, so that :meth:`wait_idle`
    knows when the broker has taken everything. A transport error or ``request.timeout.ms``
    without an answer breaks the stream: every request written or queued on it fails at once
    (the caller retries) and the next request opens a new stream.
    """

    def __init__(
        self,
        listener: ConnectionListener,
        broker_id: int,
        address: str,
        *,
        transport: ClientTransport,
        clock: Clock,
        client_id: str,
        request_timeout_ms: int,
    ) -> None:
        self.listener = listener
        self.broker_id = broker_id
        self.address = address
        self._transport = transport
        self._clock = clock
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._stream: BidiStream | None = None
        self._outbox: deque[InFlightRequest] = deque()
        self.in_flight: deque[InFlightRequest] = deque()
        self._writer_wakeup = asyncio.Event()
        self._reader_wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._given_up = False  # take_requests() took them: the connection is being closed
        name = f"{client_id}-broker-{broker_id}"
        self._tasks = [
            asyncio.get_running_loop().create_task(self._write(), name=f"{name}-writer"),
            asyncio.get_running_loop().create_task(self._read(), name=f"{name}-reader"),
        ]
        for task in self._tasks:
            task.add_done_callback(log_task_error)

    @property
    def pending(self) -> int:
        """Requests queued or unanswered: what max.in.flight.requests.per.connection bounds."""
        return len(self._outbox) + len(self.in_flight)

    def submit(self, request: InFlightRequest) -> None:
        self._outbox.append(request)
        self._writer_wakeup.set()

    async def wait_idle(self) -> None:
        """Until no request is queued or unanswered."""
        while self.pending:
            self._idle.clear()
            await self._idle.wait()

    def _maybe_idle(self) -> None:
        if not self.pending:
            self._idle.set()

    def requests(self) -> list[InFlightRequest]:
        return [*self.in_flight, *self._outbox]

    def take_requests(self) -> list[InFlightRequest]:
        """Every request written or queued, oldest first; the connection forgets them (an
        answer that still arrives for one is skipped)."""
        taken = self.requests()
        self._given_up = True  # a write under way must not finish a taken request
        self.in_flight.clear()
        self._outbox.clear()
        return taken

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(RpcError):
                await stream.close()

    def _open(self) -> BidiStream:
        if self._stream is None:
            self._stream = self._transport.open_stream(self.address, proto.METHOD_PRODUCE_STREAM)
        return self._stream

    async def _write(self) -> None:
        while True:
            while not self._outbox:
                self._writer_wakeup.clear()
                await self._writer_wakeup.wait()
            request = self._outbox.popleft()
            stream = self._stream
            try:
                stream = self._open()
            except RpcError as e:
                await self._broken(stream, e, [request])
                continue
            # In flight from before the write: the broker's answer can be read before grpc.aio
            # reports the write done (a loaded machine: the demo's acks=1 part, where the
            # reader found no request for the answer, dropped it, and the request waited out
            # request.timeout.ms while the paused followers' ZooKeeper sessions expired).
            request.deadline_ms = self._clock.monotonic_ms() + self._request_timeout_ms
            self.in_flight.append(request)
            self._reader_wakeup.set()
            try:
                await stream.send(request.request)
            except RpcError as e:
                await self._broken(stream, e, [])  # fails it with the stream's other requests
                continue
            if request.written or stream is not self._stream or self._given_up:
                continue  # answered already, or the stream broke, or the sender took it
            request.written = True
            if request.request.acks == 0:
                self.listener.on_sent_without_ack(request)

    async def _read(self) -> None:
        """Answers of the open stream, matched to the requests in order. The reader stays in
        ``recv`` while the stream is open, idle or not (an idle wait ends after
        request.timeout.ms and starts again): a request written meanwhile has a later
        deadline, so no wake-up is needed to start waiting for its answer, and a stream
        that breaks while idle is dropped at once (the next request opens a new one)."""
        clock = self._clock
        while True:
            while self._stream is None:
                self._reader_wakeup.clear()
                await self._reader_wakeup.wait()
            stream = self._stream
            now_ms = clock.monotonic_ms()
            in_flight = self.in_flight
            remaining_ms = (
                in_flight[0].deadline_ms - now_ms if in_flight else self._request_timeout_ms
            )
            try:
                response = await stream.recv(timeout_s=max(remaining_ms, 0) / 1000)
            except RpcError as e:
                if e.status is RpcStatus.DEADLINE_EXCEEDED and not self._overdue(stream):
                    continue  # an idle wait ended, or the first request is not due yet
                if stream is self._stream and e.status is RpcStatus.DEADLINE_EXCEEDED:
                    e = RpcError(
                        RpcStatus.DEADLINE_EXCEEDED,
                        f"no answer from broker {self.broker_id} within "
                        f"request.timeout.ms={self._request_timeout_ms}",
                    )
                await self._broken(stream, e, [])
                continue
            assert isinstance(response, pb.ProduceResponse)
            if stream is not self._stream:
                continue  # a late answer on a replaced stream: its requests were failed
            if self.in_flight and response.correlation_id == self.in_flight[0].correlation_id:
                request = self.in_flight.popleft()
                if request.request.acks != 0:
                    self.listener.on_response(request, response)
                elif not request.written:  # answered before its write reported done
                    request.written = True
                    self.listener.on_sent_without_ack(request)
                self._maybe_idle()

    def _overdue(self, stream: BidiStream) -> bool:
        """Whether ``stream``'s oldest unanswered request is past its deadline (a replaced
        stream: its requests were failed already, so it is broken either way)."""
        if stream is not self._stream:
            return True
        return bool(self.in_flight) and self.in_flight[0].deadline_ms <= self._clock.monotonic_ms()

    async def _broken(
        self, stream: BidiStream | None, error: RpcError, unsent: list[InFlightRequest]
    ) -> None:
        """Fail every request of ``stream`` (oldest first) and forget the stream (None: it
        could not even be opened)."""
        if stream is not self._stream:
            failed = unsent  # the stream was already replaced; only this request is ours
        else:
            failed = [*self.in_flight, *unsent, *self._outbox]
            self.in_flight.clear()
            self._outbox.clear()
            self._stream = None
            logger.info(
                "%s: produce stream to broker %d (%s) broke: %s",
                self._client_id,
                self.broker_id,
                self.address,
                error,
            )
        for request in failed:
            if not (request.written and request.request.acks == 0):  # those are done
                self.listener.on_request_failed(request, self.broker_id, error)
        self._maybe_idle()
        if stream is not None:
            with contextlib.suppress(RpcError):
                await stream.close()
