"""The Coordination port on a real ZooKeeper, through kazoo (the only module that imports it).

Threads and ordering
--------------------
kazoo is thread-based: a connection thread reads the socket; a completion thread runs the
callbacks of finished requests; a callback thread runs watches. This adapter never blocks
the event loop on kazoo: every operation uses kazoo's ``*_async`` call, which only queues the
request, and everything that comes back — results, watch events, session-state changes — is
funnelled through kazoo's callback thread and then handed to the loop with
``loop.call_soon_threadsafe``. Only values of the port (``WatchEvent``, ``Stat``,
``SessionState``, the port's errors) leave this module.

kazoo's two threads do not keep ZooKeeper's order between a response and a later watch event:
the connection thread hands a response to the completion thread and a watch event straight to
the callback thread, so an event caused by a change made just after a read can reach the loop
before that read's response. A watcher is therefore held in the tables from the moment its
request is sent, not when the response arrives: such an event fires it (and never finds the
table empty, which lost the controller a broker registration made while it read
``/brokers/ids``). The price is ZooKeeper's own weak promise only: a watcher may fire before
its caller sees the response; every owner re-reads on a watch, so an early fire is harmless.

Watches
-------
The adapter keeps its own watch tables, as ZooKeeper's Java client does: kazoo gets one
registration per path and kind, and an event fires every port watcher registered for that
path and kind, each distinct watcher once (DELETED fires data and child watchers). kazoo
drops every watch on a connection loss (it does not restore them on reconnect); so do we:
after SUSPENDED no pending watch fires, and the owner re-reads and re-watches on CONNECTED.

Sessions, crash and expiry
--------------------------
One object is one session. States: CONNECTED ⇄ SUSPENDED (connection lost; the session
may live on the server for its timeout; calls fail fast with ConnectionLossError; requests
in flight fail the same way and may or may not have been applied) → EXPIRED (kazoo's LOST:
the server deleted the ephemerals). kazoo would silently open a *new* session after LOST;
this adapter does not let it: EXPIRED is final, kazoo is stopped, every later call raises
SessionExpiredError, and the owner builds a new KazooCoordination (what Kafka's
ZooKeeperClient does). If this process crashes, the server expires the session after the
timeout and its ephemerals vanish then.

Retries: none for operations (a write that failed with ConnectionLossError is reported, never
re-sent behind the caller's back). Connection attempts are retried by kazoo's connection
retry policy, and ``start`` is bounded by ``connect_timeout_ms``.

(One module, ~705 lines: the thread hand-off, the watch tables, the session states and the
ACL-aware writes all go through the same funnel to the event loop; split, each part would need
the others' private state. The ACL rules themselves are in ``common.zk_acl``.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import Callback, KazooState
from kazoo.security import ACL, Id

from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
    InvalidACLError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
)
from kafkasim.common.zk_acl import OPEN, Acl, Perm, ZkSecurity

T = TypeVar("T")

ROOT = "/"
ANY_VERSION = -1

# kazoo's reconnect policy; its own default backs off to an hour between attempts.
DEFAULT_CONNECTION_RETRY: Mapping[str, float] = {
    "max_tries": -1,
    "delay": 0.1,
    "backoff": 2,
    "max_jitter": 0.4,
    "max_delay": 2.0,
}
DEFAULT_CONNECT_TIMEOUT_MS = 15_000

_EVENT_TYPES = {t.value: t for t in EventType}  # kazoo's event types are the same strings


def to_stat(znode_stat: Any) -> Stat:
    """A kazoo ZnodeStat as the port's Stat."""
    return Stat(
        version=int(znode_stat.version),
        czxid=int(znode_stat.czxid),
        mzxid=int(znode_stat.mzxid),
        ephemeral_owner=int(znode_stat.ephemeralOwner),
        num_children=int(znode_stat.numChildren),
        cversion=int(znode_stat.cversion),
    )


def translate_error(error: BaseException, path: str) -> BaseException:
    """kazoo's exception as the port's (anything not kazoo's is returned as it is)."""
    match error:
        case kz.NoNodeError():
            return NoNodeError(path)
        case kz.NodeExistsError():
            return NodeExistsError(path)
        case kz.BadVersionError():
            return BadVersionError(path)
        case kz.NotEmptyError():
            return NotEmptyError(path)
        case kz.NoAuthError():
            return NoAuthError(f"{path}: not authorized (the znode's ACL refuses this session)")
        case kz.InvalidACLError():
            return InvalidACLError(f"{path}: invalid ACL for this session")
        case kz.SessionExpiredError():  # includes ConnectionClosedError (client stopped)
            return SessionExpiredError(f"{path}: the ZooKeeper session has ended")
        case (
            kz.ConnectionLoss()
            | kz.ConnectionDropped()
            | kz.OperationTimeoutError()
            | kz.SessionMovedError()
            | KazooTimeoutError()
        ):
            return ConnectionLossError(f"{path}: connection to ZooKeeper lost ({error!r})")
        case kz.NoChildrenForEphemeralsError():
            return CoordinationError(f"NoChildrenForEphemerals: {path}")
        case kz.BadArgumentsError():
            return ValueError(f"ZooKeeper rejected the arguments for {path}")
        case kz.KazooException():
            return CoordinationError(f"{path}: {type(error).__name__} {error}")
    return error


def to_kazoo_acls(acls: Sequence[Acl]) -> list[Any]:
    return [ACL(int(acl.perms), Id(acl.scheme, acl.id)) for acl in acls]


def from_kazoo_acl(acl: Any) -> Acl:
    return Acl(Perm(int(acl.perms)), str(acl.id.scheme), str(acl.id.id))


def check_path(path: str, *, sequential: bool = False) -> None:
    """Raise ValueError unless ``path`` is a valid ZooKeeper path. kazoo would quietly
    normalise ``"a"`` to ``"/a"`` and ``"/a/"`` to ``"/a"``; the port rejects them, as the
    Java client does (and as SimZooKeeper does)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"invalid znode path {path!r}: must start with '/'")
    if "\0" in path:
        raise ValueError(f"invalid znode path {path!r}: contains NUL")
    if path == ROOT:
        return
    body = path[1:-1] if sequential and path.endswith("/") else path[1:]
    for name in body.split("/"):
        if name in ("", ".", ".."):
            raise ValueError(f"invalid znode path {path!r}: empty, '.' or '..' component")


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == ROOT else f"{parent}/{name}"


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or ROOT


class _Phase(Enum):
    NEW = "NEW"
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    EXPIRED = "EXPIRED"
    CLOSED = "CLOSED"


class KazooCoordination:
    """One ZooKeeper session through kazoo, implementing the Coordination port.

    ``hosts`` is ZooKeeper's connect string (``"h1:2181,h2:2181"``); ``session_timeout_ms``
    is requested from the server (which clamps it to its min/max). ``connection_retry``
    holds kazoo's KazooRetry options for (re)connection attempts (default
    :data:`DEFAULT_CONNECTION_RETRY`). ``security`` gives the credentials the session
    authenticates with (kazoo sends them again on every reconnect) and the ACLs of every znode
    it creates, ancestors made by ``makepath`` included (each with its own path's ACLs, as
    Kafka's createRecursive). Not thread-safe: use it from its event loop only;
    callbacks run on that loop.
    """

    def __init__(
        self,
        hosts: str,
        session_timeout_ms: int,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        connection_retry: Mapping[str, float] | None = None,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        security: ZkSecurity = OPEN,
    ) -> None:
        if session_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("session_timeout_ms and connect_timeout_ms must be positive")
        self._hosts = hosts
        self._loop = loop
        self._connect_timeout_ms = connect_timeout_ms
        self._security = security
        auth = security.auth
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry=dict(connection_retry or DEFAULT_CONNECTION_RETRY),
            auth_data=None if auth is None else [(auth.scheme, auth.credential)],
        )
        self._phase = _Phase.NEW
        self._session_id = 0
        self._session_password = b""
        self._listeners: list[Callable[[SessionState], None]] = []
        self._data_watchers: dict[str, dict[Watcher, None]] = {}
        self._child_watchers: dict[str, dict[Watcher, None]] = {}
        self._pending: set[asyncio.Future[Any]] = set()
        self._connected: asyncio.Future[None] | None = None
        self._stopping: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        session = f"{self._session_id:#x}"
        return f"KazooCoordination({self._hosts!r}, session={session}, {self._phase.value})"

    @property
    def hosts(self) -> str:
        return self._hosts

    @property
    def session_id(self) -> int:
        """The session's id (0 before start); kept after the session ends."""
        return self._session_id

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and open the session; listeners hear CONNECTED before this returns.
        Raises ConnectionLossError naming the hosts if no server answers within
        ``connect_timeout_ms``."""
        if self._phase is not _Phase.NEW:
            raise CoordinationError(f"{self!r}: start() may be called only once")
        loop = self._loop = self._loop or asyncio.get_running_loop()
        self._phase = _Phase.CONNECTING
        self._connected = loop.create_future()
        self._client.add_listener(self._on_kazoo_state)
        try:
            await asyncio.to_thread(self._client.start_async)
            await asyncio.wait_for(self._connected, self._connect_timeout_ms / 1000)
        except TimeoutError:
            await self._abandon_start()
            raise ConnectionLossError(
                f"could not connect to ZooKeeper at {self._hosts} within "
                f"{self._connect_timeout_ms} ms: is it running and reachable?"
            ) from None
        except BaseException:
            await self._abandon_start()
            raise

    async def close(self) -> None:
        """Close the session (the server deletes its ephemerals at once) and stop kazoo's
        threads. Listeners hear nothing more. Idempotent."""
        phase, self._phase = self._phase, _Phase.CLOSED
        if phase in (_Phase.NEW, _Phase.CLOSED):
            return  # never started (kazoo holds no thread or socket yet), or closed already
        self._forget_watches()
        await self._stop_kazoo_once()
        self._fail_pending(SessionExpiredError(f"{self!r} is closed"))

    async def inject_session_expiry(self, timeout_ms: int = 10_000) -> None:
        """Fault injection: make the server expire this session now, the standard way — a
        second client attaches to the session with its id and password, then closes it.
        The server deletes the ephemerals; this object hears SUSPENDED then EXPIRED shortly
        after this returns."""
        if self._session_id == 0:
            raise CoordinationError(f"{self!r}: no session to expire")
        await asyncio.to_thread(
            _close_session_from_twin,
            self._hosts,
            (self._session_id, self._session_password),
            timeout_ms,
        )

    async def _abandon_start(self) -> None:
        self._phase = _Phase.CLOSED
        await self._stop_kazoo_once()

    def _stop_kazoo_once(self) -> asyncio.Task[None]:
        """Stop kazoo in a worker thread, once however often it is asked (kazoo's stop and
        close must not run twice at the same time)."""
        if self._stopping is None:
            assert self._loop is not None
            self._stopping = self._loop.create_task(asyncio.to_thread(self._stop_kazoo))
        return self._stopping

    def _stop_kazoo(self) -> None:
        """Blocking: stop kazoo (closing the session if it is open) and join its threads."""
        with contextlib.suppress(kz.KazooException):
            self._client.stop()
        self._client.close()

    # -- the port's operations ------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        check_path(path, sequential=sequence)
        acl = to_kazoo_acls(self._security.acls_for(path))

        async def once() -> str:
            return await self._request(
                path,
                lambda: self._client.create_async(
                    path, data, acl=acl, ephemeral=ephemeral, sequence=sequence
                ),
                str,
            )

        try:
            return await once()
        except NoNodeError:
            if not makepath:
                raise
        # makepath: create the missing ancestors (persistent, each with its own path's ACLs)
        # and retry once: the NoNode create cannot have created anything, no hidden retry.
        await self._ensure_path(_parent(path))
        return await once()

    async def _ensure_path(self, path: str) -> None:
        if path == ROOT or await self.exists(path) is not None:
            return
        try:
            await self.create(path)
        except NodeExistsError:
            return
        except NoNodeError:
            await self._ensure_path(_parent(path))
            with contextlib.suppress(NodeExistsError):
                await self.create(path)

    async def get_acls(self, path: str) -> list[Acl]:
        check_path(path)

        def done(result: Any) -> list[Acl]:
            acls, _stat = result
            return [from_kazoo_acl(acl) for acl in acls]

        return await self._request(path, lambda: self._client.get_acls_async(path), done)

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        check_path(path)

        def done(result: Any) -> tuple[bytes, Stat]:
            data, znode_stat = result
            return bytes(data or b""), to_stat(znode_stat)

        self._check_usable()
        self._hold(self._data_watchers, path, watch)  # before the send: see the module doc
        try:
            return await self._request(
                path, lambda: self._client.get_async(path, self._watch_arg(watch)), done
            )
        except NoNodeError:
            self._unhold(self._data_watchers, path, watch)  # ZooKeeper set no watch
            raise

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        check_path(path)

        def done(result: Any) -> Stat | None:
            return None if result is None else to_stat(result)

        # Held before the send (see the module doc); set even if the node is missing.
        self._check_usable()
        self._hold(self._data_watchers, path, watch)
        return await self._request(
            path, lambda: self._client.exists_async(path, self._watch_arg(watch)), done
        )

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        check_path(path)

        def done(result: Any) -> list[str]:
            return sorted(str(name) for name in result)

        self._check_usable()
        self._hold(self._child_watchers, path, watch)  # before the send: see the module doc
        try:
            return await self._request(
                path, lambda: self._client.get_children_async(path, self._watch_arg(watch)), done
            )
        except NoNodeError:
            self._unhold(self._child_watchers, path, watch)  # ZooKeeper set no watch
            raise

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        check_path(path)
        return await self._request(
            path, lambda: self._client.set_async(path, data, version), to_stat
        )

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        check_path(path)
        if path == ROOT:
            raise ValueError("the root znode cannot be deleted")
        if recursive:
            await self._delete_tree(path, version)
            return
        await self._request(path, lambda: self._client.delete_async(path, version), _nothing)

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        for op in ops:
            check_path(op.path, sequential=isinstance(op, CreateOp) and op.sequence)
        op_list = list(ops)

        def commit() -> Any:
            transaction = self._client.transaction()
            for op in op_list:
                match op:
                    case CheckOp(path, version):
                        transaction.check(path, version)
                    case CreateOp(path, data, ephemeral, sequence):
                        transaction.create(
                            path,
                            data,
                            acl=to_kazoo_acls(self._security.acls_for(path)),
                            ephemeral=ephemeral,
                            sequence=sequence,
                        )
                    case SetOp(path, data, version):
                        transaction.set_data(path, data, version)
                    case DeleteOp(path, version):
                        transaction.delete(path, version)
            return transaction.commit_async()

        def done(results: Any) -> list[str | Stat | None]:
            # A failed transaction answers with one exception per op: the culprit's own
            # error, RolledBackError before it and RuntimeInconsistency after it.
            for op, result in zip(op_list, results, strict=True):
                if isinstance(result, Exception) and not isinstance(
                    result, kz.RolledBackError | kz.RuntimeInconsistency
                ):
                    raise translate_error(result, op.path)
            converted: list[str | Stat | None] = []
            for op, result in zip(op_list, results, strict=True):
                if isinstance(op, CreateOp):
                    converted.append(str(result))
                elif isinstance(op, SetOp):
                    converted.append(to_stat(result))
                else:
                    converted.append(None)
            return converted

        return await self._request(op_list[0].path if op_list else ROOT, commit, done)

    async def _delete_tree(self, path: str, version: int) -> None:
        """Children first, then the node (several requests, not atomic, as kazoo's own)."""
        if version != ANY_VERSION:
            stat = await self.exists(path)
            if stat is None:
                raise NoNodeError(path)
            if stat.version != version:
                raise BadVersionError(f"{path}: expected version {version}, is {stat.version}")
        for child in await self.get_children(path):
            with contextlib.suppress(NoNodeError):  # someone else deleted it first
                await self._delete_tree(_join(path, child), ANY_VERSION)
        await self._request(path, lambda: self._client.delete_async(path, version), _nothing)

    # -- requests: kazoo async result -> callback thread -> loop --------------------------

    def _check_usable(self) -> None:
        match self._phase:
            case _Phase.CONNECTED:
                return
            case _Phase.NEW:
                raise CoordinationError(f"{self!r}: start() has not been called")
            case _Phase.CONNECTING | _Phase.SUSPENDED:
                raise ConnectionLossError(f"not connected to ZooKeeper at {self._hosts}")
            case _Phase.EXPIRED:
                raise SessionExpiredError(f"session {self._session_id:#x} has expired")
            case _Phase.CLOSED:
                raise SessionExpiredError(f"{self!r} is closed")

    async def _request(self, path: str, send: Callable[[], Any], done: Callable[[Any], T]) -> T:
        """Send one kazoo request; ``done`` turns its result into the port's value on the
        loop (watchers are held by the caller before the send: see the module doc)."""
        self._check_usable()
        assert self._loop is not None
        reply: asyncio.Future[T] = self._loop.create_future()
        self._pending.add(reply)
        try:
            try:
                async_result = send()
            except kz.KazooException as e:
                raise translate_error(e, path) from e
            async_result.rawlink(
                lambda result: self._via_callback_thread(self._complete, reply, result, path, done)
            )
            return await reply
        finally:
            self._pending.discard(reply)

    def _complete(
        self, reply: asyncio.Future[T], async_result: Any, path: str, done: Callable[[Any], T]
    ) -> None:
        """On the loop: the response to one request."""
        if reply.done():  # the caller gave up (cancelled) or the session ended
            return
        try:
            raw = async_result.get_nowait()
        except Exception as e:
            reply.set_exception(translate_error(e, path))
            return
        try:
            reply.set_result(done(raw))
        except Exception as e:
            reply.set_exception(e)

    def _via_callback_thread(self, fn: Callable[..., None], *args: Any) -> None:
        """From any kazoo thread: queue ``fn(*args)`` for the loop behind everything kazoo
        has already queued on its callback thread (the FIFO of the module doc)."""
        handler = self._client.handler
        if handler.running:
            handler.dispatch_callback(Callback("kafkasim", self._to_loop, (fn, *args)))
        else:  # kazoo is stopping: nothing can overtake us any more
            self._to_loop(fn, *args)

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        # The loop is closed: nobody is waiting for this any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(fn, *args)

    def _fail_pending(self, error: Exception) -> None:
        for reply in list(self._pending):
            if not reply.done():
                reply.set_exception(error)

    # -- watches ----------------------------------------------------------------------------

    def _watch_arg(self, watch: Watcher | None) -> Callable[[Any], None] | None:
        # One stable callable: kazoo keeps a set per path, so it holds one registration.
        return None if watch is None else self._on_kazoo_watch

    @staticmethod
    def _hold(table: dict[str, dict[Watcher, None]], path: str, watch: Watcher | None) -> None:
        if watch is not None:
            table.setdefault(path, {})[watch] = None

    @staticmethod
    def _unhold(table: dict[str, dict[Watcher, None]], path: str, watch: Watcher | None) -> None:
        held = table.get(path)
        if held is None or watch is None:
            return
        held.pop(watch, None)
        if not held:
            del table[path]

    def _on_kazoo_watch(self, event: Any) -> None:
        """kazoo's callback thread: a watch notification (or NONE when kazoo drops watches
        on a connection loss, which the session state already covers)."""
        event_type = _EVENT_TYPES.get(event.type)
        if event_type is not None:
            self._to_loop(self._fire_watchers, event_type, str(event.path))

    def _fire_watchers(self, event_type: EventType, path: str) -> None:
        if event_type in (EventType.CREATED, EventType.CHANGED):
            watchers = self._data_watchers.pop(path, {})
        elif event_type is EventType.DELETED:
            watchers = self._data_watchers.pop(path, {}) | self._child_watchers.pop(path, {})
        else:
            watchers = self._child_watchers.pop(path, {})
        event = WatchEvent(event_type, path)
        for watcher in watchers:
            self._run_callback(watcher, event)

    def _forget_watches(self) -> None:
        self._data_watchers.clear()
        self._child_watchers.clear()

    # -- session state ----------------------------------------------------------------------

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's connection thread, at the moment of the change."""
        client_id = self._client.client_id
        self._via_callback_thread(self._apply_state, state, client_id)

    def _apply_state(self, state: str, client_id: tuple[int, bytes] | None) -> None:
        """On the loop: a session-state change, in order with results and watch events."""
        if self._phase in (_Phase.CLOSED, _Phase.EXPIRED):
            return
        assert self._connected is not None
        if state == KazooState.CONNECTED:
            if self._phase is _Phase.CONNECTING and client_id is not None:
                self._session_id, self._session_password = client_id
                self._connected.set_result(None)
            elif self._phase is not _Phase.SUSPENDED:
                return
            self._phase = _Phase.CONNECTED
            self._tell_listeners(SessionState.CONNECTED)
        elif state == KazooState.SUSPENDED:
            if self._phase is not _Phase.CONNECTED:
                return
            self._phase = _Phase.SUSPENDED
            self._forget_watches()
            self._tell_listeners(SessionState.SUSPENDED)
            # kazoo would hold requests queued in the instant before this until it reconnects,
            # however long that takes; fail them now (their outcome is unknown either way).
            self._fail_pending(ConnectionLossError(f"connection to {self._hosts} lost"))
        elif state == KazooState.LOST:
            if self._phase is _Phase.CONNECTING:
                if not self._connected.done():
                    self._connected.set_exception(
                        ConnectionLossError(f"kazoo gave up connecting to {self._hosts}")
                    )
                return
            self._phase = _Phase.EXPIRED
            self._forget_watches()
            self._tell_listeners(SessionState.EXPIRED)
            self._fail_pending(SessionExpiredError(f"session {self._session_id:#x} has expired"))
            # Stop kazoo before it opens a new session behind our back.
            self._stop_kazoo_once()

    def _tell_listeners(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._run_callback(listener, state)

    def _run_callback(self, callback: Callable[[Any], None], argument: object) -> None:
        # A failing user callback must not break the others: report it as the loop would.
        try:
            callback(argument)
        except Exception as e:
            assert self._loop is not None
            self._loop.call_exception_handler(
                {"message": f"{self!r}: callback {callback!r} raised", "exception": e}
            )


def _nothing(_: Any) -> None:
    return None


def _close_session_from_twin(hosts: str, client_id: tuple[int, bytes], timeout_ms: int) -> None:
    """Blocking: attach a second client to a session with its id and password, then close it;
    the server then expires the session (ZooKeeper FAQ's way to test expiry)."""
    twin = KazooClient(hosts=hosts, client_id=client_id, timeout=timeout_ms / 1000)
    try:
        twin.start(timeout=timeout_ms / 1000)
    except KazooTimeoutError as e:
        raise ConnectionLossError(
            f"could not reach ZooKeeper at {hosts} to expire a session"
        ) from e
    finally:
        with contextlib.suppress(kz.KazooException):
            twin.stop()
        twin.close()


def secure_root(hosts: str, security: ZkSecurity, timeout_s: float = 15.0) -> None:
    """Blocking: give ZooKeeper's root znode ``security``'s ACLs for ``/`` (its credentials
    as creator), so that only that identity may create or delete top-level znodes.

    ZooKeeper's root is open to everyone (``world:anyone`` ALL); Kafka leaves it so and
    advises a chroot. kafkasim's own ZooKeeper (``cluster up``) with ``zookeeper.set.acl=true``
    closes it instead: otherwise anyone could delete ``/controller`` or ``/controller_epoch``
    or squat a top-level path."""
    auth = security.auth
    if auth is None:
        raise ValueError("securing the root needs credentials")
    client = KazooClient(hosts=hosts, timeout=timeout_s, auth_data=[(auth.scheme, auth.credential)])
    try:
        client.start(timeout=timeout_s)
        client.set_acls(ROOT, to_kazoo_acls(security.acls_for(ROOT)))
    except KazooTimeoutError as e:
        raise ConnectionLossError(f"could not reach ZooKeeper at {hosts}") from e
    except kz.KazooException as e:
        raise translate_error(e, ROOT) from e
    finally:
        with contextlib.suppress(kz.KazooException):
            client.stop()
        client.close()
