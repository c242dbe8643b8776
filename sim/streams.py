"""Streams on the simulated network: two ordered pipes per bidirectional stream.

See ``sim.network``'s module doc (point 4) for the semantics: frames on one pipe arrive in the
order sent; a loss or a cut link dooms the whole stream, whose ends break
``break_detection_ms`` later. :class:`SimTransport` (``sim.network``) opens them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from google.protobuf.message import Message

from kafkasim.common.rpc import RpcError, RpcStatus, StreamHandler
from kafkasim.common.security import CALLER, Caller
from kafkasim.proto import MethodSpec

_log = logging.getLogger(__name__)


# What a stream needs of the network, its server and its transport (``sim.network``'s
# SimNetwork, SimServer, SimTransport), as private protocols named apart from those classes:
# sim.network imports this module, and no two modules import each other
# (tests/unit/test_layering.py), not even for types.
class _Server(Protocol):
    node: str
    serving: bool
    streams: dict[str, StreamHandler]
    open_streams: dict[_SimStream, None]


class _Transport(Protocol):
    node: str
    principal: str

    def _forget_stream(self, stream: _SimStream) -> None: ...


class _Network(Protocol):
    loop: asyncio.AbstractEventLoop
    _break_detection_s: float
    _streams: dict[_SimStream, None]

    def node_of(self, address: str) -> str: ...
    def reachable(self, src: str, dst: str) -> bool: ...
    def _departure_s(self, src: str, dst: str) -> float | None: ...
    def _arrives(self, src: str, dst: str) -> bool: ...
    def _server_at(self, address: str) -> _Server | None: ...


@dataclass(frozen=True, slots=True)
class _Open:
    """First frame client to server: the call itself."""


@dataclass(frozen=True, slots=True)
class _End:
    """Last frame: client to server it cancels the handler; server to client it ends the stream."""

    error: RpcError


# A message's frame is its serialized bytes as they are (no wrapper object per message).
_Frame: TypeAlias = _Open | bytes | _End


class _Inbox:
    """Delivered messages of one stream end, then possibly a terminal error."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[Message] = deque()
        self._error: RpcError | None = None
        self._waiter: asyncio.Future[bool] | None = None

    @property
    def error(self) -> RpcError | None:
        return self._error

    def push(self, message: Message) -> None:
        if self._error is None:
            self._items.append(message)
            waiter = self._waiter  # _wake inline (once per message)
            if waiter is not None and not waiter.done():
                waiter.set_result(True)

    def fail(self, error: RpcError, *, drop_queued: bool = False) -> None:
        if self._error is None:
            self._error = error
            if drop_queued:
                self._items.clear()
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)

    async def get(self, timeout_s: float | None) -> Message:
        """The next message; queued messages come before the terminal error."""
        if self._items:  # no wait, hence no timeout to arm (nor a timer left on the loop)
            return self._items.popleft()
        loop = self._loop
        # One timer for the whole wait, resolving the waiter with False (no task cancellation
        # to undo, unlike asyncio.timeout); a message or the error resolves it with True.
        timer = None
        if timeout_s is not None:
            timer = loop.call_at(loop.time() + timeout_s, self._expire)
        try:
            while not self._items:
                if self._error is not None:
                    raise RpcError(self._error.status, self._error.message)
                waiter = self._waiter = loop.create_future()
                try:
                    woken = await waiter
                finally:
                    self._waiter = None
                if not woken and not self._items:
                    raise RpcError(RpcStatus.DEADLINE_EXCEEDED, f"no message within {timeout_s} s")
        finally:
            if timer is not None:
                timer.cancel()
        return self._items.popleft()

    def _expire(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(False)


class _Requests:
    """The server handler's view of the requests: an endless async iterator."""

    def __init__(self, inbox: _Inbox) -> None:
        self._inbox = inbox

    def __aiter__(self) -> _Requests:
        return self

    def __anext__(self) -> Coroutine[Any, Any, Message]:
        return self._inbox.get(None)  # the wait itself: no coroutine around it per request


class _Pipe:
    """One direction of a stream: frames arrive in the order sent, or the stream is doomed."""

    def __init__(
        self, stream: _SimStream, to_server: bool, on_frame: Callable[[_Frame], None]
    ) -> None:
        self._stream = stream
        self._network = stream.network
        # The direction: the ends are read from the stream at each frame (the server's node is
        # known only once the stream is open there).
        self._to_server = to_server
        self._on_frame = on_frame
        self._queue: deque[tuple[float, _Frame]] = deque()
        self._last_arrival = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def put(self, frame: _Frame) -> None:
        if self._closed:
            return
        stream = self._stream
        if self._to_server:
            src, dst = stream.client_node, stream.server_node
        else:
            src, dst = stream.server_node, stream.client_node
        network = self._network
        delay_s = network._departure_s(src, dst)
        if delay_s is None:
            stream.doom()
            return
        loop = network.loop
        # Never before the previous frame: equal times on the loop's heap have no fixed order.
        arrival = loop.time() + delay_s
        last = self._last_arrival
        arrival = last if last > arrival else arrival  # max(arrival, last) without its call
        self._last_arrival = arrival
        self._queue.append((arrival, frame))
        if self._timer is None:
            self._timer = loop.call_at(arrival, self._flush)

    def _flush(self) -> None:
        self._timer = None
        network = self._network
        stream = self._stream
        queue = self._queue
        now = network.loop.time()
        while queue and queue[0][0] <= now and not self._closed:
            _, frame = queue.popleft()
            if self._to_server:
                src, dst = stream.client_node, stream.server_node
            else:
                src, dst = stream.server_node, stream.client_node
            if not network._arrives(src, dst):
                stream.doom()
                return
            self._on_frame(frame)
        if queue and not self._closed:
            self._timer = network.loop.call_at(queue[0][0], self._flush)

    def close(self) -> None:
        """Deliver nothing more (the frames in flight are lost)."""
        self._closed = True
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _SimStream:
    """Both ends of one bidirectional stream and the two pipes between them."""

    def __init__(
        self, network: _Network, transport: _Transport, target: str, spec: MethodSpec
    ) -> None:
        self.network = network
        self.transport = transport
        self.target = target
        self.spec = spec
        self.client_node = transport.node
        self.caller = Caller(transport.principal, transport.node)
        self.server_node = network.node_of(target)
        loop = network.loop
        self.client_inbox = _Inbox(loop)
        self.server_inbox = _Inbox(loop)
        self.to_server = _Pipe(self, True, self._at_server)
        self.to_client = _Pipe(self, False, self._at_client)
        self.server: _Server | None = None
        self.handler_task: asyncio.Task[None] | None = None
        self.client_done = False
        self.server_done = False
        self._doomed = False

    def path_open(self) -> bool:
        return self.network.reachable(
            self.client_node, self.server_node
        ) and self.network.reachable(self.server_node, self.client_node)

    # -- server end

    def _at_server(self, frame: _Frame) -> None:
        if self.server_done:
            return
        if isinstance(frame, bytes):
            self.server_inbox.push(self.spec.request_cls.FromString(frame))
        elif isinstance(frame, _Open):
            self._open_at_server()
        else:
            self.end_server()

    def _open_at_server(self) -> None:
        server = self.network._server_at(self.target)
        if server is None or not server.serving:
            self.server_done = True
            self.to_client.put(
                _End(RpcError(RpcStatus.UNAVAILABLE, f"connection refused by {self.target}"))
            )
            return
        handler = server.streams.get(self.spec.name)
        if handler is None:
            self.server_done = True
            self.to_client.put(
                _End(
                    RpcError(
                        RpcStatus.UNIMPLEMENTED, f"{self.target} does not serve {self.spec.name}"
                    )
                )
            )
            return
        self.server = server
        self.server_node = server.node
        self.handler_task = self.network.loop.create_task(
            self._serve(handler),
            name=f"sim-stream {server.node} {self.spec.short_name} <- {self.client_node}",
        )
        server.open_streams[self] = None

    async def _serve(self, handler: StreamHandler) -> None:
        CALLER.set(self.caller)  # this task serves the stream's caller only
        responses = handler(_Requests(self.server_inbox))
        end: RpcError
        try:
            async for response in responses:
                self.spec.check_response(response)
                self.to_client.put(response.SerializeToString())
        except Exception as exc:
            _log.exception("stream handler for %s raised; the caller gets INTERNAL", self.spec.name)
            end = RpcError(RpcStatus.INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            end = RpcError(RpcStatus.CANCELLED, "stream ended by the server")
        finally:
            aclose = getattr(responses, "aclose", None)
            if aclose is not None:
                await aclose()
            if self.server is not None:
                self.server.open_streams.pop(self, None)
        self.server_done = True
        self.to_client.put(_End(end))
        self._forget_if_done()

    def end_server(self) -> None:
        """The server end goes: its handler is cancelled (no frame is sent for it)."""
        self.server_done = True
        if self.handler_task is not None:
            self.handler_task.cancel()
        if self.server is not None:
            self.server.open_streams.pop(self, None)
        self._forget_if_done()

    # -- client end

    def _at_client(self, frame: _Frame) -> None:
        if self.client_done:
            return
        if isinstance(frame, bytes):
            self.client_inbox.push(self.spec.response_cls.FromString(frame))
        elif isinstance(frame, _End):
            self.end_client(frame.error)

    def end_client(self, error: RpcError, *, drop_queued: bool = False) -> None:
        self.client_done = True
        self.client_inbox.fail(error, drop_queued=drop_queued)
        self.transport._forget_stream(self)
        self._forget_if_done()

    # -- both

    def doom(self, after_s: float | None = None) -> None:
        """A frame was lost or the path is cut: deliver nothing more; break both ends
        ``after_s`` later (default: the network's break detection delay)."""
        if self._doomed:
            return
        self._doomed = True
        self.to_server.close()
        self.to_client.close()
        delay_s = self.network._break_detection_s if after_s is None else after_s
        self.network.loop.call_later(delay_s, self._break)

    def _break(self) -> None:
        if not self.client_done:
            self.end_client(RpcError(RpcStatus.UNAVAILABLE, f"connection to {self.target} lost"))
        if not self.server_done:
            self.end_server()

    def _forget_if_done(self) -> None:
        if self.client_done and self.server_done:
            self.network._streams.pop(self, None)


class SimBidiStream:
    """The client end of a simulated stream; implements ``common.rpc.BidiStream``."""

    def __init__(self, stream: _SimStream) -> None:
        self._stream = stream
        self._closed = False

    async def send(self, message: Message) -> None:
        """Queue a message to the server; RpcError once the stream has ended or broken.

        A message sent on a doomed stream (whose break is not detected yet) is silently lost.
        The buffer is unbounded, so a send never waits and does not yield to the loop (a
        yield would be one loop step per message for nothing: the sender goes on to await an
        answer or its next work anyway, and every verdict and finding stayed the same).
        """
        self._stream.spec.check_request(message)
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "stream closed")
        error = self._stream.client_inbox.error
        if error is not None:
            raise RpcError(error.status, error.message)
        self._stream.to_server.put(message.SerializeToString())

    async def recv(self, timeout_s: float | None = None) -> Message:
        """The next message; DEADLINE_EXCEEDED after ``timeout_s`` leaves the stream usable."""
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "stream closed")
        return await self._stream.client_inbox.get(timeout_s)

    async def close(self) -> None:
        """Cancel the stream (idempotent); the server's handler is cancelled one hop later."""
        if self._closed:
            return
        self._closed = True
        stream = self._stream
        if not stream.client_done:
            stream.end_client(RpcError(RpcStatus.CANCELLED, "stream closed"), drop_queued=True)
            stream.to_server.put(_End(RpcError(RpcStatus.CANCELLED, "stream closed")))
