"""SimNetwork: the Rpc port in memory, on the virtual-time loop, with seeded faults.

(Transports, servers, unary calls here; stream pipes in ``sim.streams``; TCP's retransmission
timer in ``sim.tcp_retransmission``: one network whose deliveries and faults are ordered by one
loop and decided by one seeded RNG. One module of ~680 lines: the fault state, each message's
delivery and the unary call path share the per-message hot path and its draw order, which a
split would spread over modules that must change together.)

Theory of operation
-------------------
Every node owns one or more transports (:class:`SimTransport`) named by the node. A server
started through a transport binds an address (``host:port`` is only a name here; port 0 gets a
unique fake port) and the address maps to that node, so faults apply to nodes in both directions.

1. **Messages are bytes on the wire.** A request, a response and every stream message is
   serialized when sent and parsed when delivered, so nodes never share a message object —
   exactly as over gRPC.
2. **Each message is one hop**: it leaves at once and arrives ``latency_ms ± jitter_ms`` later
   (seeded). It is dropped if the link is cut when it is sent or when it arrives, or by the loss
   roll (``set_loss``). A node always reaches itself, without loss.
3. **Unary calls are independent messages**, so concurrent calls may overtake one another. A
   lost request or response looks like a real partition to the caller: DEADLINE_EXCEEDED when
   ``timeout_s`` passes. The server gives up at the same deadline (gRPC propagates deadlines):
   the handler is cancelled.
4. **A stream is two ordered pipes** (client to server, server to client): messages on one pipe
   arrive in the order sent, independent streams may interleave. A stream message is never
   dropped on its own — that would break the ordering — so a loss, or a cut link on its path,
   dooms the stream instead: nothing more is delivered on it and, ``break_detection_ms`` later,
   the client sees UNAVAILABLE and the server's handler is cancelled. Cutting a link
   (``isolate``, ``partition``, ``one_way``) dooms every open stream crossing it, even if it is
   healed before the break is detected.
5. **Late delivery** (``late_delivery`` set, a scenario's ``cluster.late_delivery``): what
   TCP does with a cut instead of a loss. A unary request or response sent across a cut link,
   or reaching one, is held, not dropped; when the link heals it arrives at TCP's next
   retransmission of it (Linux: 200 ms after the send, then each wait doubled, at most 120 s
   apart; none after the 15th, 804.6 s after the send: ``tcp_retries2``), one hop of base
   latency later, after anything held before it on the same link (what is sent after the
   heal does not wait for it: unary calls are independent, 3). A request whose caller has
   given up by then (its deadline, or cancelled) is not run: the caller's RST_STREAM came right
   behind it. Held messages to or from a crashed node are dropped (its connections died with
   it). The loss roll still loses messages, and streams are still doomed by a cut (4): their
   peers' own timeouts end them on a real network too. Off (the default), a cut loses what
   crosses it, and recorded histories are as they were before this mode existed.
6. **All randomness comes from the ``rng`` given**, drawn in event order on a deterministic loop,
   so a seed replays the same deliveries, losses and delays. Node names are only compared,
   never iterated from a set.

What a fault looks like to the caller (every one an :class:`~common.rpc.RpcError`)::

    nothing listens on the target (never bound, stopped)  UNAVAILABLE after one round trip
    request or response lost, target cut off               DEADLINE_EXCEEDED at timeout_s
    server stopped or crashed during a call or stream      UNAVAILABLE one hop later
    stream doomed by a cut link or a loss                  UNAVAILABLE after break_detection_ms
    stream ended by the server's handler returning         CANCELLED (after its messages)
    handler raised (logged with traceback)                 INTERNAL (after its messages)
    our own stream or transport closed, our node crashed   CANCELLED at once
    no such method (on that server / in the contract)      UNIMPLEMENTED

Buffers are unbounded: a sender is never slowed down by a slow receiver (a stream's ``send``
does not even yield to the loop). Not thread-safe: everything runs on the one loop.

Loop steps per message (the simulation's cost): a unary call is one timer per hop, the
handler's task and the caller's wakeup; a stream frame is one timer (frames due together share
it) and the receiver's wakeup.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from kafkasim.common.rpc import RpcError, RpcStatus, StreamHandler, UnaryHandler
from kafkasim.common.security import ANONYMOUS, CALLER, Caller, PasswordVerifier
from kafkasim.proto import MethodSpec, check_servable, method_spec
from kafkasim.sim.streams import SimBidiStream, _End, _Open, _SimStream
from kafkasim.sim.tcp_retransmission import next_retransmission_s

if TYPE_CHECKING:
    from kafkasim.common.tls import TlsMaterial

_log = logging.getLogger(__name__)

_FIRST_FAKE_PORT = 30_000


@dataclass(slots=True)
class SimNetworkStats:
    """Messages (requests, responses, stream frames) put on the wire so far."""

    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    held: int = 0  # times a message was held on a cut link (late delivery)
    late: int = 0  # messages delivered after being held


@dataclass(slots=True, eq=False)
class _Held:
    """A unary message under late delivery: sent at ``sent_at``; ``stale`` says whether its
    caller gave up (a request), so that it is not run when it finally arrives."""

    sent_at: float
    src: str
    dst: str
    deliver: Callable[[], object]
    stale: Callable[[], bool] | None = None
    was_held: bool = False


def _spec(method: str, *, streaming: bool) -> MethodSpec:
    spec = method_spec(method, streaming=streaming)
    if spec is None:
        kind = "bidirectional-stream" if streaming else "unary"
        raise RpcError(RpcStatus.UNIMPLEMENTED, f"{method} is not a {kind} rpc of kafkasim.proto")
    return spec


class SimNetwork:
    """The simulated network between named nodes: delivery, latency, loss and cut links.

    Fault controls take effect at once and are deterministic; see the module doc for what each
    looks like to callers. ``partition`` groups are sides: nodes on different sides cannot talk;
    a node in no group keeps every link.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        *,
        latency_ms: float = 0.5,
        jitter_ms: float = 0.1,
        break_detection_ms: float = 1_000.0,
    ) -> None:
        self.loop = loop
        # Late delivery (the module doc, 5): off unless the run turns it on (a scenario's
        # cluster.late_delivery, set by sim.backend).
        self.late_delivery = False
        # Late delivery: messages held on cut links, in send order, and per directed link the
        # latest arrival scheduled for one released (TCP keeps a connection's bytes in order).
        self._held: list[_Held] = []
        self._link_free_at: dict[tuple[str, str], float] = {}
        self._rng = rng
        self._latency_ms = 0.0
        self._jitter_ms = 0.0
        self.set_latency(latency_ms, jitter_ms)
        if break_detection_ms < 0:
            raise ValueError(f"break_detection_ms must be >= 0, got {break_detection_ms}")
        self._break_detection_s = break_detection_ms / 1000
        self._loss = 0.0
        self.stats = SimNetworkStats()
        # Cut links.
        self._isolated: set[str] = set()
        self._sides: list[frozenset[str]] = []
        self._one_way: set[tuple[str, str]] = set()
        # Extra delay on directed links (src, dst): (base ms, jitter ms), on top of the latency.
        self._slow_links: dict[tuple[str, str], tuple[float, float]] = {}
        # Endpoints. Dicts, not sets: iteration order must not depend on hashing.
        self._servers: dict[str, SimServer] = {}
        self._address_node: dict[str, str] = {}
        self._next_port = _FIRST_FAKE_PORT
        self._transports: dict[SimTransport, None] = {}
        self._streams: dict[_SimStream, None] = {}

    # ------------------------------------------------------------ fault controls

    def isolate(self, node: str) -> None:
        """Cut every link of ``node`` (both directions) until ``heal(node)``/``heal_all()``."""
        self._isolated.add(node)
        self._doom_cut_streams()

    def heal(self, node: str) -> None:
        """Restore every link of ``node``: not isolated, in no partition side, no one-way cut."""
        self._isolated.discard(node)
        self._one_way = {pair for pair in self._one_way if node not in pair}
        self._sides = [side - {node} for side in self._sides if side - {node}]
        self._release_held()

    def partition(self, groups: list[set[str]]) -> None:
        """Split brain: nodes in different groups cannot talk (replaces any earlier partition)."""
        sides = [frozenset(group) for group in groups]
        seen: set[str] = set()
        for side in sides:
            if not side:
                raise ValueError("a partition group cannot be empty")
            if seen & side:
                raise ValueError(f"a node is in two partition groups: {sorted(seen & side)}")
            seen |= side
        self._sides = sides
        self._doom_cut_streams()
        self._release_held()  # links the old partition cut and the new one does not

    def one_way(self, src: str, dst: str) -> None:
        """Drop everything ``src`` sends to ``dst``; ``dst`` to ``src`` still flows."""
        if src == dst:
            raise ValueError(f"a node cannot be cut from itself: {src}")
        self._one_way.add((src, dst))
        self._doom_cut_streams()

    def heal_one_way(self, src: str, dst: str) -> None:
        """Undo ``one_way(src, dst)`` alone (other cuts stay)."""
        self._one_way.discard((src, dst))
        self._release_held()

    def slow_link(self, src: str, dst: str, base_ms: float, jitter_ms: float = 0.0) -> None:
        """Every message from ``src`` to ``dst`` takes ``base_ms`` plus a uniform draw in
        ``±jitter_ms`` (never below 0) more than the network's latency; ``dst`` to ``src`` is
        not slowed. A stream's frames still arrive in order. ``base_ms`` 0 and no jitter:
        the link is normal again."""
        if base_ms < 0 or jitter_ms < 0:
            raise ValueError(f"link delay must be >= 0, got base {base_ms} ms ± {jitter_ms} ms")
        if base_ms == 0 and jitter_ms == 0:
            self._slow_links.pop((src, dst), None)
        else:
            self._slow_links[(src, dst)] = (base_ms, jitter_ms)

    def heal_all(self) -> None:
        """Remove every isolation, partition and one-way cut (loss and latency stay)."""
        self._isolated.clear()
        self._sides = []
        self._one_way.clear()
        self._release_held()

    def set_loss(self, probability: float) -> None:
        """Each message is lost with this probability (0 to 1)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"loss probability must be in [0, 1], got {probability}")
        self._loss = probability

    def set_latency(self, base_ms: float, jitter_ms: float = 0.0) -> None:
        """One hop takes ``base_ms`` plus a uniform draw in ``±jitter_ms`` (never below 0)."""
        if base_ms < 0 or jitter_ms < 0:
            raise ValueError(f"latency must be >= 0, got base {base_ms} ms ± {jitter_ms} ms")
        self._latency_ms = base_ms
        self._jitter_ms = jitter_ms

    def crash(self, node: str) -> None:
        """``node``'s process dies (kill -9): nothing of it answers any more.

        Its servers stop at once (their callers and stream peers see UNAVAILABLE one hop later);
        its transports close: its own pending calls and streams fail with CANCELLED at once and
        the servers of its streams see them go one hop later. A restarted node makes a new
        :class:`SimTransport` (the old ones stay closed) and binds its servers again.
        """
        for server in list(self._servers.values()):
            if server.node == node:
                server.halt()
        for transport in list(self._transports):
            if transport.node == node:
                transport.crash()
        if self._held:
            kept = [m for m in self._held if node not in (m.src, m.dst)]
            self.stats.dropped += len(self._held) - len(kept)
            self._held = kept

    # ------------------------------------------------------------ topology

    def node_of(self, address: str) -> str:
        """The node that last bound ``address``; an unknown address is its own node."""
        return self._address_node.get(address, address)

    def reachable(self, src: str, dst: str) -> bool:
        """Whether a message from node ``src`` to node ``dst`` can get through now."""
        if src == dst:
            return True
        if src in self._isolated or dst in self._isolated:
            return False
        if (src, dst) in self._one_way:
            return False
        if not self._sides:
            return True
        side_src = self._side(src)
        side_dst = self._side(dst)
        return side_src is None or side_dst is None or side_src == side_dst

    def _side(self, node: str) -> int | None:
        for index, side in enumerate(self._sides):
            if node in side:
                return index
        return None

    def _doom_cut_streams(self) -> None:
        for stream in list(self._streams):
            if not stream.path_open():
                stream.doom()

    # ------------------------------------------------------------ delivery

    def _jittered_s(self, base_ms: float, jitter_ms: float) -> float:
        """``base_ms`` plus a uniform draw within ±``jitter_ms`` (no draw without jitter), at
        least 0, in seconds."""
        # random.uniform(-jitter_ms, jitter_ms) inline: the same draw and the same arithmetic
        jitter = -jitter_ms + (jitter_ms - -jitter_ms) * self._rng.random() if jitter_ms else 0.0
        return max(0.0, base_ms + jitter) / 1000

    def _delay_s(self) -> float:
        return self._jittered_s(self._latency_ms, self._jitter_ms)

    def _departure_s(self, src: str, dst: str, held: _Held | None = None) -> float | None:
        """Count a message sent now; None if it is dropped at once (cut link or loss roll),
        or held (``held``, under late delivery, on a cut link), else its delay: the latency
        with its jitter, plus a slowed link's extra delay.

        One call per message (the network's hot path): the rng is drawn in a fixed order,
        the loss roll (not for loopback), the jitter, then the slowed link's jitter (only
        on a slowed link)."""
        stats = self.stats
        stats.sent += 1
        # Loopback (a node to itself) neither loses nor is cut. ``reachable`` is asked only
        # while some link is cut (without a cut it is True: a call less per message).
        if src != dst:
            if self._loss > 0.0 and self._rng.random() < self._loss:
                stats.dropped += 1
                return None
            if (self._isolated or self._one_way or self._sides) and not self.reachable(src, dst):
                if held is None:
                    stats.dropped += 1
                else:
                    self._hold(held)
                return None
        # _jittered_s(self._latency_ms, self._jitter_ms) inline: the same draw, the same sums
        jitter_ms = self._jitter_ms
        jitter = -jitter_ms + (jitter_ms - -jitter_ms) * self._rng.random() if jitter_ms else 0.0
        delay_s = max(0.0, self._latency_ms + jitter) / 1000
        if self._slow_links:
            slow = self._slow_links.get((src, dst))
            if slow is not None:
                delay_s += self._jittered_s(*slow)
        return delay_s

    def _arrives(self, src: str, dst: str) -> bool:
        """Count a message delivered; False if the link was cut while it travelled."""
        if (self._isolated or self._one_way or self._sides) and not self.reachable(src, dst):
            self.stats.dropped += 1
            return False
        self.stats.delivered += 1
        return True

    def send(
        self,
        src: str,
        dst: str,
        deliver: Callable[[], object],
        stale: Callable[[], bool] | None = None,
    ) -> None:
        """One independent message from node ``src`` to node ``dst``: ``deliver`` on arrival.
        ``stale`` (a request's): whether its caller gave up, asked if it was held."""
        if self.late_delivery:
            message = _Held(self.loop.time(), src, dst, deliver, stale)
            delay_s = self._departure_s(src, dst, message)
            if delay_s is not None:
                self.loop.call_later(delay_s, self._arrive_or_hold, message)
            return
        delay_s = self._departure_s(src, dst)
        if delay_s is None:
            return
        self.loop.call_later(delay_s, self._arrive, src, dst, deliver)

    def _hold(self, message: _Held) -> None:
        message.was_held = True
        self._held.append(message)
        self.stats.held += 1

    def _arrive_or_hold(self, message: _Held) -> None:
        src, dst = message.src, message.dst
        if (self._isolated or self._one_way or self._sides) and not self.reachable(src, dst):
            self._hold(message)  # cut while it travelled: TCP retransmits it
            return
        if message.was_held and message.stale is not None and message.stale():
            self.stats.dropped += 1  # its caller's RST_STREAM came right behind it
            return
        self.stats.delivered += 1
        if message.was_held:
            self.stats.late += 1
        message.deliver()

    def _release_held(self) -> None:
        """Schedule the held messages whose link is whole again (see the module doc, 5)."""
        if not self._held:
            return
        now = self.loop.time()
        still: list[_Held] = []
        for message in self._held:
            if not self.reachable(message.src, message.dst):
                still.append(message)
                continue
            at = next_retransmission_s(message.sent_at, now)
            if at is None:
                self.stats.dropped += 1  # TCP gave the connection up
                continue
            link = (message.src, message.dst)
            at = max(at, self._link_free_at.get(link, at))
            self._link_free_at[link] = at
            self.loop.call_at(at + self._latency_ms / 1000, self._arrive_or_hold, message)
        self._held = still

    def _arrive(self, src: str, dst: str, deliver: Callable[[], object]) -> None:
        if self._arrives(src, dst):
            deliver()

    # ------------------------------------------------------------ registry

    def _bind(self, server: SimServer, address: str) -> str:
        host, _, port = address.rpartition(":")
        if not host or not port:
            raise ValueError(f"address must be host:port, got {address!r}")
        if port == "0":
            address = f"{host}:{self._next_port}"
            self._next_port += 1
        if address in self._servers:
            raise OSError(f"address already in use: {address}")
        self._servers[address] = server
        self._address_node[address] = server.node
        return address

    def _unbind(self, server: SimServer) -> None:
        if self._servers.get(server.address) is server:
            del self._servers[server.address]

    def _server_at(self, address: str) -> SimServer | None:
        return self._servers.get(address)


# ---------------------------------------------------------------- unary calls


@dataclass(eq=False, slots=True)
class _UnaryCall:
    """One unary call in flight. The future gets the response bytes or an RpcError."""

    src: str
    target: str
    spec: MethodSpec
    payload: bytes
    deadline: float
    future: asyncio.Future[bytes]
    dst: str = ""
    task: asyncio.Task[None] | None = None
    server_deadline: asyncio.TimerHandle | None = None  # cancels ``task`` at ``deadline``
    principal: str = ANONYMOUS  # the caller's authenticated identity (its transport's)

    def expire(self, method: str, timeout_s: float) -> None:
        self.resolve(
            RpcError(
                RpcStatus.DEADLINE_EXCEEDED,
                f"{method} to {self.target}: no answer in {timeout_s} s",
            )
        )

    def resolve(self, outcome: bytes | RpcError) -> None:
        if self.future.done():
            return
        if isinstance(outcome, RpcError):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


# ---------------------------------------------------------------- server and transport


class SimServer:
    """A server bound on the simulated network; implements ``common.rpc.RpcServer``.

    ``start()`` binds (port 0 picks a fresh fake port; an address bound by a running server is
    ``OSError``); ``stop(grace_s)`` unbinds at once, lets running handlers finish for up to
    ``grace_s`` virtual seconds, then cancels them: their callers and stream peers see
    UNAVAILABLE one hop later. A stopped server cannot be started again.
    """

    def __init__(
        self,
        network: SimNetwork,
        node: str,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
    ) -> None:
        check_servable(unary, streams)
        self.network = network
        self.node = node
        self._address = address
        self.unary = dict(unary)
        self.streams = dict(streams)
        self.serving = False
        self._used = False
        self.calls: dict[_UnaryCall, None] = {}
        self.open_streams: dict[_SimStream, None] = {}

    @property
    def address(self) -> str:
        return self._address

    async def start(self) -> None:
        if self._used:
            raise RuntimeError(f"server {self._address} was already started")
        self._used = True
        self._address = self.network._bind(self, self._address)
        self.serving = True

    async def stop(self, grace_s: float = 0.0) -> None:
        self._used = True
        if not self.serving:
            return
        self.serving = False
        self.network._unbind(self)
        running = [call.task for call in self.calls if call.task is not None]
        running += [s.handler_task for s in self.open_streams if s.handler_task is not None]
        if grace_s > 0 and running:
            await asyncio.wait(running, timeout=grace_s)
        self.halt()

    def halt(self) -> None:
        """Stop now: cancel every handler; callers and stream peers get UNAVAILABLE."""
        self.serving = False
        self.network._unbind(self)
        gone = RpcError(RpcStatus.UNAVAILABLE, f"server {self._address} stopped")
        for call in list(self.calls):
            if call.task is not None:
                call.task.cancel()
            self.network.send(self.node, call.src, functools.partial(call.resolve, gone))
        self.calls.clear()
        for stream in list(self.open_streams):
            stream.end_server()
            stream.to_client.put(_End(gone))
        self.open_streams.clear()

    def _receive(self, call: _UnaryCall) -> None:
        """A request arrived: run its handler until done or the call's deadline."""
        network = self.network
        handler = self.unary.get(call.spec.name)
        if handler is None:
            error = RpcError(
                RpcStatus.UNIMPLEMENTED, f"{self._address} does not serve {call.spec.name}"
            )
            network.send(self.node, call.src, lambda: call.resolve(error))
            return
        request = call.spec.request_cls.FromString(call.payload)
        loop = network.loop
        task = loop.create_task(
            self._handle(call, handler, request),
            name=f"sim-call {self.node} {call.spec.short_name} <- {call.src}",
        )
        call.task = task
        self.calls[call] = None
        # gRPC sends the deadline with the call: the server gives up at the same instant. The
        # handler's own ``finally`` disarms it (no done-callback: one loop step less per call).
        call.server_deadline = loop.call_at(call.deadline, task.cancel)

    async def _handle(self, call: _UnaryCall, handler: UnaryHandler, request: Message) -> None:
        CALLER.set(Caller(call.principal, call.src))  # this task serves this call only
        outcome: bytes | RpcError
        try:
            outcome = call.spec.check_response(await handler(request)).SerializeToString()
        except Exception as exc:
            _log.exception("handler for %s raised; the caller gets INTERNAL", call.spec.name)
            outcome = RpcError(RpcStatus.INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            self.calls.pop(call, None)
            if call.server_deadline is not None:
                call.server_deadline.cancel()
        self.network.send(self.node, call.src, lambda: call.resolve(outcome))


class SimTransport:
    """One node's access to a :class:`SimNetwork`; implements ``common.rpc.Transport``."""

    def __init__(self, network: SimNetwork, node: str, principal: str = ANONYMOUS) -> None:
        """``principal``: who this node's calls come from, as an authenticating transport
        (mTLS, SASL) would tell the server (``common.security.Caller``; host: the node's name)."""
        self._network = network
        self.node = node
        self.principal = principal
        self._closed = False
        self._calls: dict[_UnaryCall, None] = {}
        self._streams: dict[_SimStream, SimBidiStream] = {}
        network._transports[self] = None

    def server(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        sasl: PasswordVerifier | None = None,
    ) -> SimServer:
        """A server of this node (``ValueError`` for a method not in the contract); the
        simulated network has no TLS (``tls`` is ignored) and leaves callers anonymous."""
        del tls, listener, sasl
        return SimServer(self._network, self.node, address, unary, streams)

    def _check_open(self) -> None:
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, f"transport of {self.node} closed")

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self._check_open()
        spec = _spec(method, streaming=False)
        spec.check_request(request)
        network = self._network
        loop = network.loop
        call = _UnaryCall(
            src=self.node,
            target=target,
            spec=spec,
            payload=request.SerializeToString(),
            deadline=loop.time() + timeout_s,
            future=loop.create_future(),
            dst=network.node_of(target),
            principal=self.principal,
        )
        # No done-callback marks an error read: the awaiting task's wakeup reads it, even when
        # the task is cancelled after the answer came (one loop step less per call).
        self._calls[call] = None
        network.send(self.node, call.dst, lambda: self._deliver(call), call.future.done)
        # The deadline resolves the call's own future (cheaper than asyncio.timeout's
        # cancellation); an answer that comes later finds it resolved and is dropped.
        timer = loop.call_at(call.deadline, call.expire, method, timeout_s)
        try:
            payload = await call.future
        finally:
            timer.cancel()
            self._calls.pop(call, None)
            if call.task is not None and not call.task.done():
                # The caller went away: the server hears of it one hop later (an RST_STREAM).
                network.send(self.node, call.dst, call.task.cancel)
        return spec.response_cls.FromString(payload)

    def _deliver(self, call: _UnaryCall) -> None:
        network = self._network
        server = network._server_at(call.target)
        if server is None or not server.serving:
            refused = RpcError(RpcStatus.UNAVAILABLE, f"connection refused by {call.target}")
            network.send(call.dst, call.src, lambda: call.resolve(refused))
            return
        call.dst = server.node
        server._receive(call)

    def open_stream(self, target: str, method: str) -> SimBidiStream:
        self._check_open()
        spec = _spec(method, streaming=True)
        stream = _SimStream(self._network, self, target, spec)
        client_end = SimBidiStream(stream)
        self._streams[stream] = client_end
        self._network._streams[stream] = None
        stream.to_server.put(_Open())
        return client_end

    def _forget_stream(self, stream: _SimStream) -> None:
        self._streams.pop(stream, None)

    async def close(self) -> None:
        """Close every stream and fail every pending call with CANCELLED (idempotent)."""
        self._shut(RpcError(RpcStatus.CANCELLED, f"transport of {self.node} closed"))
        for client_end in list(self._streams.values()):
            await client_end.close()

    def crash(self) -> None:
        """The node died: like ``close`` but its streams' servers learn of it only by the
        connection going away (handlers cancelled one hop later)."""
        self._shut(RpcError(RpcStatus.CANCELLED, f"node {self.node} crashed"))
        for stream, client_end in list(self._streams.items()):
            client_end._closed = True
            stream.end_client(
                RpcError(RpcStatus.CANCELLED, f"node {self.node} crashed"), drop_queued=True
            )
            # The dead process's sockets are reset by its kernel: the server knows one hop later.
            stream.doom(after_s=self._network._delay_s())

    def _shut(self, error: RpcError) -> None:
        self._closed = True
        self._network._transports.pop(self, None)
        for call in list(self._calls):
            call.resolve(error)
