"""SimZooKeeper: ZooKeeper in memory, the simulation's twin of ``controller/zk_kazoo.py``.

(One module, ~980 lines: the server's tree, sessions and watches and the client's session
state machine exchange private call types; a server/client split would have to export them.)

Theory of operation
-------------------
One :class:`SimZooKeeperServer` holds the znode tree, the session table and the watch tables.
Each :class:`SimZooKeeperClient` is one session and implements the Coordination port against
it. Between a client and the server sit two :class:`_Channel` objects (requests out,
responses and notifications in) that deliver messages in the order they were posted, each after
an optional seeded latency. Nothing here reads a clock, starts a thread or draws an unseeded
random number: time is ``loop.time()`` and every delay is a ``call_soon``/``call_at`` on the
running loop, so on the virtual-time loop a run is a pure function of its seeds.

Rules (real ZooKeeper's; ``tests/unit/coordination`` runs the same cases against a real server):

1. Every write that reaches the tree takes the next zxid, even when it fails; a ``multi`` is
   one transaction with one zxid; opening and closing a session are transactions too; reads
   take none. A node's ``czxid``/``mzxid`` are the zxids that created/last wrote it.
2. A sequential node's suffix is the number of children ever created under its parent (the
   parent's persisted cversion), ten digits, zero-padded: deletions do not count, so the
   suffixes of one parent are increasing and dense unless another child came between. The
   ``cversion`` a Stat reports is ZooKeeper's derived one, ``2 * creations - num_children``
   (creations plus deletions when the parent started empty; -2 on ``/zookeeper``).
3. A watch is one-shot and belongs to a session: ``get`` and ``exists`` set a data watch
   (``exists`` even on a missing node, which then fires CREATED), ``get_children`` a child
   watch, and a read that fails with NoNodeError sets none. A change sends one notification
   per watching session; the client then fires every watcher it holds for that path and kind
   (DELETED: data and child watchers), each distinct watcher once.
4. Per session, the server's messages arrive in the order they were sent, and a change's
   notifications are sent before the response to the write that caused it and before the
   response to any later read: a client sees the watch event before it sees the new data.
5. A session ends when its client closes it (its ephemeral nodes go at once, in one
   transaction, firing other sessions' watches) or when it expires: the server expires a
   session whose client has been disconnected for the negotiated session timeout (measured on
   ``loop.time()``), or at once on :meth:`SimZooKeeperServer.expire_session`. Expiry deletes
   the ephemerals the same way. A connected client's connection is dropped by the server
   (listeners hear SUSPENDED), then it hears EXPIRED as it reconnects; a disconnected client
   hears EXPIRED when it reconnects (as with a real server, it cannot know sooner).
6. A connection loss (``client.disconnect()``) fails in-flight requests with
   ConnectionLossError (a request may or may not have been applied, depending on whether it
   reached the server), makes new calls fail the same way, and tells listeners SUSPENDED.
   It also drops every pending watch of the session without firing it: kazoo, which the real
   adapter uses, does not restore watches on reconnect, so neither do we. After CONNECTED the
   owner re-reads and re-watches.

7. ACLs (``common/zk_acl.py``): a session authenticates with its client's ``ZkSecurity``
   credentials when it opens (digest: the identity ``digest:user:hash``); a create stores the
   ACL list the client's policy gives for the path (``auth:`` fixed up to the session's
   identities, InvalidACLError when it has none). Checks in ZooKeeper's order: create — the
   ACL list, the parent's existence, CREATE on the parent, then the rest; delete — the
   parent, DELETE on it, then the node; set — the node, WRITE; get, get_children and a
   multi's check — the node, READ (no watch is set when refused); exists and get_acls — none.
   A refusal is NoAuthError (a refused write takes a zxid, like any failed write). Expiry
   deletes ephemerals whatever the ACLs.

What is not modelled: the ``ip``, ``sasl`` and ``super`` schemes, setACL, quotas, the 1 MiB
znode limit, multi-server ensembles (no stale reads, no ``sync``), TTL/container nodes, and the
~2/3-session-timeout delay before a real client notices a dead connection (``disconnect()`` is
noticed at once; the server's expiry clock starts at that same instant).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
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
from kafkasim.common.errors import KafkasimError
from kafkasim.common.zk_acl import OPEN, OPEN_ACL_UNSAFE, Acl, Perm, ZkSecurity, fix_up, permitted

ROOT = "/"
SEQUENCE_DIGITS = 10
ANY_VERSION = -1
# ZooKeeper's server-side session ids carry the server id in the top byte; standalone is 1.
_FIRST_SESSION_ID = (1 << 56) + 1
# Present on every real server (ZooKeeper's own namespace); get_children("/") shows it.
_SYSTEM_NODES = ("/zookeeper", "/zookeeper/config", "/zookeeper/quota")


class SimZooKeeperSanityError(KafkasimError):
    """The simulated tree broke one of its own invariants (a bug in this module)."""


# -- paths -------------------------------------------------------------------------------------


def check_path(path: str, *, sequential: bool = False) -> None:
    """Raise ValueError unless ``path`` is a valid ZooKeeper path (ZooKeeper's PathUtils rules:
    absolute, no empty, ``.`` or ``..`` component, no trailing ``/`` except for the root or
    a sequential create's prefix, no NUL)."""
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


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def _name_of(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == ROOT else f"{parent}/{name}"


# -- the tree ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Znode:
    data: bytes
    czxid: int
    mzxid: int
    pzxid: int
    ephemeral_owner: int = 0
    version: int = 0
    child_creations: int = 0  # ZooKeeper's persisted cversion; the sequence counter
    children: set[str] = field(default_factory=set)
    acl: tuple[Acl, ...] = OPEN_ACL_UNSAFE

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            czxid=self.czxid,
            mzxid=self.mzxid,
            ephemeral_owner=self.ephemeral_owner,
            num_children=len(self.children),
            # What ZooKeeper's DataNode.copyStat reports (rule 2).
            cversion=2 * self.child_creations - len(self.children),
        )


class _Change(Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"


@dataclass(slots=True)
class _Txn:
    """One transaction being applied: its zxid, how to undo each step, what to announce."""

    zxid: int
    session_id: int
    identities: tuple[tuple[str, str], ...] | None  # None: the server's own (no ACL checks)
    undo: list[Callable[[], None]] = field(default_factory=list)
    changes: list[tuple[_Change, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Session:
    session_id: int
    timeout_ms: int
    client: SimZooKeeperClient
    connected: bool = True
    ephemerals: dict[str, None] = field(default_factory=dict)  # an ordered set of paths
    identities: tuple[tuple[str, str], ...] = ()  # (scheme, id) it authenticated as
    expiry: asyncio.TimerHandle | None = None


# Read requests (the write requests are the port's own CreateOp/SetOp/DeleteOp/CheckOp).
@dataclass(frozen=True, slots=True)
class _Get:
    path: str
    watch: bool


@dataclass(frozen=True, slots=True)
class _Exists:
    path: str
    watch: bool


@dataclass(frozen=True, slots=True)
class _GetChildren:
    path: str
    watch: bool


@dataclass(frozen=True, slots=True)
class _Multi:
    ops: tuple[Op, ...]


@dataclass(frozen=True, slots=True)
class _CloseSession:
    pass


@dataclass(frozen=True, slots=True)
class _GetAcls:
    path: str


_Request = (
    _Get | _Exists | _GetChildren | _GetAcls | _Multi | _CloseSession | CreateOp | SetOp | DeleteOp
)


@dataclass(frozen=True, slots=True)
class _Call:
    """A request in flight: what was asked, the watcher to hold if it succeeds, where the
    answer goes, and the connection it travels on (a newer connection drops it)."""

    request: _Request
    watcher: Watcher | None
    reply: asyncio.Future[Any]
    connection: int


class SimZooKeeperServer:
    """A standalone ZooKeeper server in memory (see the module doc for the rules it keeps).

    Invariants (:meth:`sanity_check`): every node but the root has a parent that lists it;
    an ephemeral node has no children and its owner is a live session that lists it; every
    zxid in the tree is at most the last one handed out.

    Not thread-safe: it lives on one event loop, like everything in the simulation. Timers
    (session expiry) are taken from the running loop when they are armed.
    """

    def __init__(
        self,
        *,
        tick_time_ms: int = 2000,
        min_session_timeout_ms: int | None = None,
        max_session_timeout_ms: int | None = None,
    ) -> None:
        if tick_time_ms <= 0:
            raise ValueError(f"tick_time_ms must be positive, got {tick_time_ms}")
        self.tick_time_ms = tick_time_ms
        # ZooKeeper's defaults: the client's requested timeout is clamped to [2, 20] ticks.
        self.min_session_timeout_ms = min_session_timeout_ms or 2 * tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms or 20 * tick_time_ms
        self._zxid = 0
        self._next_session_id = _FIRST_SESSION_ID
        self._nodes: dict[str, _Znode] = {ROOT: _Znode(b"", 0, 0, 0)}
        for path in _SYSTEM_NODES:
            self._nodes[path] = _Znode(b"", 0, 0, 0)
            self._nodes[parent_of(path)].children.add(_name_of(path))
        self._sessions: dict[int, _Session] = {}
        # path -> ordered set of watching session ids (ZooKeeper's dataWatches/childWatches).
        self._data_watches: dict[str, dict[int, None]] = {}
        self._child_watches: dict[str, dict[int, None]] = {}

    # -- introspection (for tests and the history checker) --------------------------------

    @property
    def last_zxid(self) -> int:
        return self._zxid

    def session_ids(self) -> list[int]:
        """Live sessions, oldest first."""
        return list(self._sessions)

    def is_session_alive(self, session_id: int) -> bool:
        return session_id in self._sessions

    def snapshot(self) -> dict[str, tuple[bytes, Stat]]:
        """Every znode's data and stat, by path (sorted)."""
        return {
            path: (self._nodes[path].data, self._nodes[path].stat()) for path in sorted(self._nodes)
        }

    def sanity_check(self) -> None:
        """Check the class invariants; raise SimZooKeeperSanityError naming the broken one."""
        for path, node in self._nodes.items():
            if node.czxid > self._zxid or node.mzxid > self._zxid or node.pzxid > self._zxid:
                raise SimZooKeeperSanityError(f"{path}: zxid beyond last zxid {self._zxid}")
            for name in node.children:
                if _join(path, name) not in self._nodes:
                    raise SimZooKeeperSanityError(f"{path} lists missing child {name}")
            if path != ROOT:
                parent = self._nodes.get(parent_of(path))
                if parent is None or _name_of(path) not in parent.children:
                    raise SimZooKeeperSanityError(f"{path} is not listed by its parent")
            if node.ephemeral_owner:
                if node.children:
                    raise SimZooKeeperSanityError(f"ephemeral {path} has children")
                owner = self._sessions.get(node.ephemeral_owner)
                if owner is None or path not in owner.ephemerals:
                    raise SimZooKeeperSanityError(f"ephemeral {path} has no live owner")
        for session in self._sessions.values():
            for path in session.ephemerals:
                owned = self._nodes.get(path)
                if owned is None or owned.ephemeral_owner != session.session_id:
                    raise SimZooKeeperSanityError(
                        f"session {session.session_id:#x} lists {path} it does not own"
                    )

    # -- faults -----------------------------------------------------------------------------

    def expire_session(self, session_id: int) -> None:
        """Expire a session now, as the real server does when it stops hearing from a client:
        its ephemeral nodes are deleted (one transaction; other sessions' watches fire), and
        its client, if connected, hears SUSPENDED then EXPIRED (if disconnected, EXPIRED when
        it reconnects). Unknown or already dead sessions are ignored."""
        session = self._end_session(session_id)
        if session is not None and session.connected:
            session.client._on_session_expired()

    # -- the client protocol (called by SimZooKeeperClient only) --------------------------

    def _open_session(self, client: SimZooKeeperClient, requested_timeout_ms: int) -> _Session:
        self._zxid += 1  # createSession is a transaction
        timeout_ms = min(
            max(requested_timeout_ms, self.min_session_timeout_ms), self.max_session_timeout_ms
        )
        auth = client.security.auth
        identities = () if auth is None else (auth.identity(),)
        session = _Session(self._next_session_id, timeout_ms, client, identities=identities)
        self._next_session_id += 1
        self._sessions[session.session_id] = session
        return session

    def _connection_lost(self, session_id: int) -> None:
        """The session's connection dropped: its watches go (ZooKeeper keeps watches per
        connection) and its expiry clock starts."""
        session = self._sessions.get(session_id)
        if session is None or not session.connected:
            return
        session.connected = False
        self._drop_watches(session_id)
        loop = asyncio.get_running_loop()
        session.expiry = loop.call_later(
            session.timeout_ms / 1000, self._expire_disconnected, session_id
        )

    def _reconnect(self, session_id: int) -> bool:
        """A client came back; True if its session is still alive (else it has expired)."""
        session = self._sessions.get(session_id)
        if session is None:
            return False
        if session.expiry is not None:
            session.expiry.cancel()
            session.expiry = None
        session.connected = True
        return True

    def _expire_disconnected(self, session_id: int) -> None:
        self._end_session(session_id)

    def _handle(self, session_id: int, request: _Request) -> Any:
        """Execute one request for a session and return its result, or raise its error."""
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionExpiredError(f"session {session_id:#x} has expired")
        match request:
            case _Get(path, watch):
                node = self._lookup(path)
                self._check_acl(node, Perm.READ, session.identities, path)
                if watch:
                    self._data_watches.setdefault(path, {})[session_id] = None
                return node.data, node.stat()
            case _Exists(path, watch):
                if watch:
                    self._data_watches.setdefault(path, {})[session_id] = None
                found = self._nodes.get(path)
                return None if found is None else found.stat()
            case _GetChildren(path, watch):
                node = self._lookup(path)
                self._check_acl(node, Perm.READ, session.identities, path)
                if watch:
                    self._child_watches.setdefault(path, {})[session_id] = None
                return sorted(node.children)
            case _GetAcls(path):
                return list(self._lookup(path).acl)
            case _Multi(ops):
                return self._transact(session_id, ops)
            case _CloseSession():
                self._end_session(session_id)
                return None
            case CreateOp() | SetOp() | DeleteOp():
                return self._transact(session_id, (request,))[0]
        raise TypeError(f"unknown request {request!r}")  # pragma: no cover

    # -- transactions ---------------------------------------------------------------------

    def _transact(self, session_id: int, ops: Sequence[Op]) -> list[str | Stat | None]:
        """Apply ``ops`` all or nothing under one new zxid, then fire the watches they touch."""
        self._zxid += 1  # taken even if the transaction fails, as ZooKeeper's error txn does
        txn = _Txn(self._zxid, session_id, self._sessions[session_id].identities)
        results: list[str | Stat | None] = []
        try:
            for op in ops:
                results.append(self._apply(txn, op))
        except Exception:
            for undo in reversed(txn.undo):
                undo()
            raise
        self._announce(txn.changes)
        return results

    def _apply(self, txn: _Txn, op: Op) -> str | Stat | None:
        match op:
            case CreateOp():
                return self._create(txn, op)
            case SetOp():
                return self._set(txn, op)
            case DeleteOp():
                self._delete(txn, op)
                return None
            case CheckOp():
                node = self._lookup(op.path)
                if txn.identities is not None:
                    self._check_acl(node, Perm.READ, txn.identities, op.path)
                self._check_version(node, op.path, op.version)
                return None
        raise TypeError(f"unknown op {op!r}")  # pragma: no cover

    def _lookup(self, path: str) -> _Znode:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    @staticmethod
    def _check_acl(
        node: _Znode, perm: Perm, identities: tuple[tuple[str, str], ...] | None, path: str
    ) -> None:
        if identities is not None and not permitted(node.acl, perm, identities):
            raise NoAuthError(f"{path}: not authorized (the znode's ACL refuses this session)")

    @staticmethod
    def _check_version(node: _Znode, path: str, version: int) -> None:
        if version not in (ANY_VERSION, node.version):
            raise BadVersionError(f"{path}: expected version {version}, is {node.version}")

    def _create(self, txn: _Txn, op: CreateOp) -> str:
        # Checks in ZooKeeper's order: ACL list, parent, CREATE on the parent, sequence
        # suffix, existence, ephemeral parent.
        acl: tuple[Acl, ...] = OPEN_ACL_UNSAFE
        if txn.identities is not None:
            policy = self._sessions[txn.session_id].client.security
            acl = tuple(fix_up(policy.acls_for(op.path), txn.identities))
        parent_path = parent_of(op.path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise NoNodeError(parent_path)
        self._check_acl(parent, Perm.CREATE, txn.identities, op.path)
        suffix = f"{parent.child_creations:0{SEQUENCE_DIGITS}d}"
        path = op.path + suffix if op.sequence else op.path
        if path in self._nodes:
            raise NodeExistsError(path)
        if parent.ephemeral_owner:
            raise CoordinationError(f"NoChildrenForEphemerals: {path}")
        owner = txn.session_id if op.ephemeral else 0
        name = _name_of(path)
        saved = (parent.child_creations, parent.pzxid)
        self._nodes[path] = _Znode(op.data, txn.zxid, txn.zxid, txn.zxid, owner, acl=acl)
        parent.children.add(name)
        parent.child_creations += 1
        parent.pzxid = txn.zxid
        if owner:
            self._sessions[owner].ephemerals[path] = None

        def undo() -> None:
            del self._nodes[path]
            parent.children.discard(name)
            parent.child_creations, parent.pzxid = saved
            if owner:
                self._sessions[owner].ephemerals.pop(path, None)

        txn.undo.append(undo)
        txn.changes.append((_Change.CREATED, path))
        return path

    def _set(self, txn: _Txn, op: SetOp) -> Stat:
        node = self._lookup(op.path)
        self._check_acl(node, Perm.WRITE, txn.identities, op.path)
        self._check_version(node, op.path, op.version)
        saved = (node.data, node.version, node.mzxid)
        node.data, node.version, node.mzxid = op.data, node.version + 1, txn.zxid

        def undo() -> None:
            node.data, node.version, node.mzxid = saved

        txn.undo.append(undo)
        txn.changes.append((_Change.CHANGED, op.path))
        return node.stat()

    def _delete(self, txn: _Txn, op: DeleteOp) -> None:
        # Checks in ZooKeeper's order: parent, DELETE on it, existence, version, children.
        if op.path == ROOT:
            raise ValueError("the root znode cannot be deleted")
        parent = self._nodes.get(parent_of(op.path))
        if parent is None:
            raise NoNodeError(op.path)
        self._check_acl(parent, Perm.DELETE, txn.identities, op.path)
        node = self._lookup(op.path)
        self._check_version(node, op.path, op.version)
        if node.children:
            raise NotEmptyError(op.path)
        name = _name_of(op.path)
        saved_pzxid = parent.pzxid
        del self._nodes[op.path]
        parent.children.discard(name)
        parent.pzxid = txn.zxid
        owner = self._sessions.get(node.ephemeral_owner)
        if owner is not None:
            owner.ephemerals.pop(op.path, None)

        def undo() -> None:
            self._nodes[op.path] = node
            parent.children.add(name)
            parent.pzxid = saved_pzxid
            if owner is not None:
                owner.ephemerals[op.path] = None

        txn.undo.append(undo)
        txn.changes.append((_Change.DELETED, op.path))

    # -- sessions and watches -------------------------------------------------------------

    def _end_session(self, session_id: int) -> _Session | None:
        """Close or expire a session: one transaction deletes its ephemerals (sorted, for
        determinism; ZooKeeper uses hash order), then the session is forgotten."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expiry is not None:
            session.expiry.cancel()
            session.expiry = None
        self._drop_watches(session_id)
        self._zxid += 1  # closeSession is a transaction even without ephemerals
        txn = _Txn(self._zxid, session_id, None)
        for path in sorted(session.ephemerals):
            self._delete(txn, DeleteOp(path))
        del self._sessions[session_id]
        self._announce(txn.changes)
        return session

    def _drop_watches(self, session_id: int) -> None:
        for table in (self._data_watches, self._child_watches):
            for path in [p for p, sessions in table.items() if session_id in sessions]:
                del table[path][session_id]
                if not table[path]:
                    del table[path]

    def _announce(self, changes: list[tuple[_Change, str]]) -> None:
        """Fire the one-shot watches a committed transaction touched, in operation order."""
        for change, path in changes:
            if change is _Change.CHANGED:
                self._notify(self._data_watches.pop(path, {}), EventType.CHANGED, path)
                continue
            if change is _Change.CREATED:
                self._notify(self._data_watches.pop(path, {}), EventType.CREATED, path)
            else:
                watchers = self._data_watches.pop(path, {}) | self._child_watches.pop(path, {})
                self._notify(watchers, EventType.DELETED, path)
            parent = parent_of(path)
            self._notify(self._child_watches.pop(parent, {}), EventType.CHILD, parent)

    def _notify(self, session_ids: dict[int, None], event_type: EventType, path: str) -> None:
        for session_id in session_ids:
            session = self._sessions.get(session_id)
            if session is not None and session.connected:
                session.client._on_notification(event_type, path)


# -- the client --------------------------------------------------------------------------------


class _Channel:
    """One direction of a connection: messages arrive in the order posted (TCP's FIFO), each
    no earlier than its due time; one message per loop callback, like one socket read each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[float, Callable[[], None]]] = deque()
        self._last_due = float("-inf")
        self._handle: asyncio.Handle | None = None

    def post(self, delay_s: float, message: Callable[[], None]) -> None:
        due = max(self._loop.time() + delay_s, self._last_due)
        self._last_due = due
        self._queue.append((due, message))
        if self._handle is None:
            self._arm()

    def clear(self) -> None:
        """The connection is gone: what is still in flight is lost."""
        self._queue.clear()
        self._last_due = float("-inf")
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        due = self._queue[0][0]
        if due <= self._loop.time():
            self._handle = self._loop.call_soon(self._deliver_one)
        else:
            self._handle = self._loop.call_at(due, self._deliver_one)

    def _deliver_one(self) -> None:
        self._handle = None
        _, message = self._queue.popleft()
        try:
            message()
        finally:
            if self._queue and self._handle is None:
                self._arm()


class _Phase(Enum):
    NEW = "NEW"
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # disconnected; the session may still be alive on the server
    EXPIRED = "EXPIRED"
    CLOSED = "CLOSED"


class SimZooKeeperClient:
    """One ZooKeeper session against a :class:`SimZooKeeperServer`; the Coordination port.

    Watch callbacks and session listeners run on the event loop, in the order the server sent
    their messages. ``latency_ms=(low, high)`` delays each message in each direction by a
    uniform draw from a ``random.Random`` seeded with ``seed`` and ``name``; the order of
    messages is kept whatever the draws.

    ``security`` holds the credentials the session authenticates with and the ACL policy of
    the znodes it creates (rule 7).

    Fault controls: :meth:`disconnect` and :meth:`reconnect` (the network between this client
    and the server), and the server's :meth:`SimZooKeeperServer.expire_session`.

    Crash/expiry story: the session outlives its client's connection for the negotiated
    timeout; a client that is closed while disconnected leaves its session (and ephemerals)
    to expire on the server. After EXPIRED or ``close()`` every call raises
    SessionExpiredError; a new session needs a new client.
    """

    def __init__(
        self,
        server: SimZooKeeperServer,
        session_timeout_ms: int,
        name: str = "",
        *,
        latency_ms: tuple[float, float] | None = None,
        seed: int = 0,
        security: ZkSecurity = OPEN,
    ) -> None:
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be positive, got {session_timeout_ms}")
        if latency_ms is not None and not 0 <= latency_ms[0] <= latency_ms[1]:
            raise ValueError(f"latency_ms must be (low, high) with 0 <= low <= high: {latency_ms}")
        self.server = server
        self.name = name
        self.security = security
        self._requested_timeout_ms = session_timeout_ms
        self._latency_ms = latency_ms
        self._rng = random.Random(f"{seed}/{name}")
        self._phase = _Phase.NEW
        self._session_id = 0
        self._timeout_ms = 0
        self._listeners: list[Callable[[SessionState], None]] = []
        # path -> ordered set of watchers (the client side of rule 3)
        self._data_watchers: dict[str, dict[Watcher, None]] = {}
        self._child_watchers: dict[str, dict[Watcher, None]] = {}
        self._pending: set[asyncio.Future[Any]] = set()
        # Incremented when a connection ends; messages of an older connection are dropped.
        self._connection = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbound: _Channel | None = None
        self._inbound: _Channel | None = None

    def __repr__(self) -> str:
        return (
            f"SimZooKeeperClient({self.name!r}, session={self._session_id:#x}, {self._phase.value})"
        )

    @property
    def session_id(self) -> int:
        """The session's id (0 before start); kept after the session ends."""
        return self._session_id

    @property
    def session_timeout_ms(self) -> int:
        """The timeout the server granted (0 before start)."""
        return self._timeout_ms

    @property
    def state(self) -> SessionState | None:
        """CONNECTED, SUSPENDED or EXPIRED (also after close); None before start."""
        match self._phase:
            case _Phase.CONNECTED:
                return SessionState.CONNECTED
            case _Phase.SUSPENDED:
                return SessionState.SUSPENDED
            case _Phase.EXPIRED | _Phase.CLOSED:
                return SessionState.EXPIRED
        return None

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the session; listeners hear CONNECTED before this returns."""
        if self._phase is not _Phase.NEW:
            raise CoordinationError(f"{self!r}: start() may be called only once")
        self._loop = asyncio.get_running_loop()
        self._outbound = _Channel(self._loop)
        self._inbound = _Channel(self._loop)
        self._phase = _Phase.CONNECTING
        opened: asyncio.Future[None] = self._loop.create_future()
        self._pending.add(opened)
        try:
            self._outbound.post(self._delay_s(), partial(self._open_at_server, opened))
            await opened
        finally:
            self._pending.discard(opened)

    async def close(self) -> None:
        """End the session: when connected, the server deletes its ephemerals before this
        returns. Closing a disconnected client leaves the session to expire. Idempotent."""
        phase, self._phase = self._phase, _Phase.CLOSED
        if phase is _Phase.CONNECTED:
            # On failure the server expires the session instead, or already has.
            with contextlib.suppress(ConnectionLossError, SessionExpiredError):
                await self._send(_CloseSession())
        elif phase is _Phase.CONNECTING and self._session_id:
            # The server opened the session but its answer is still on the way: to the
            # server this is a dropped connection, and the session expires in due time.
            self.server._connection_lost(self._session_id)
        self._end_connection(SessionExpiredError(f"{self!r} is closed"))

    # -- faults -----------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Cut the network between this client and the server (no-op unless connected).

        In-flight requests fail with ConnectionLossError, new calls fail the same way,
        listeners hear SUSPENDED, pending watches are dropped, and the server starts the
        session's expiry clock."""
        if self._phase is not _Phase.CONNECTED:
            return
        self._phase = _Phase.SUSPENDED
        in_flight = list(self._pending)
        self._end_connection(None)
        self.server._connection_lost(self._session_id)
        self._post_in(0.0, partial(self._deliver_suspended, in_flight))

    def reconnect(self) -> None:
        """Restore the network (no-op unless disconnected). Listeners hear CONNECTED if the
        session survived, else EXPIRED."""
        if self._phase is not _Phase.SUSPENDED:
            return
        if self.server._reconnect(self._session_id):
            self._phase = _Phase.CONNECTED
            self._post_in(self._delay_s(), partial(self._tell_listeners, SessionState.CONNECTED))
        else:
            self._post_in(self._delay_s(), self._become_expired)

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
        op = CreateOp(path, data, ephemeral=ephemeral, sequence=sequence)
        try:
            return str(await self._send(op))
        except NoNodeError:
            if not makepath:
                raise
        # Like kazoo: make the missing ancestors (persistent), then try once more.
        await self._ensure_path(parent_of(path))
        return str(await self._send(op))

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        check_path(path)
        result: tuple[bytes, Stat] = await self._send(_Get(path, watch is not None), watch)
        return result

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        check_path(path)
        stat: Stat | None = await self._send(_Exists(path, watch is not None), watch)
        return stat

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        check_path(path)
        children: list[str] = await self._send(_GetChildren(path, watch is not None), watch)
        return children

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        check_path(path)
        stat: Stat = await self._send(SetOp(path, data, version))
        return stat

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        check_path(path)
        if path == ROOT:
            raise ValueError("the root znode cannot be deleted")
        if recursive:
            await self._delete_tree(path, version)
        else:
            await self._send(DeleteOp(path, version))

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        for op in ops:
            check_path(op.path, sequential=isinstance(op, CreateOp) and op.sequence)
        results: list[str | Stat | None] = await self._send(_Multi(tuple(ops)))
        return results

    async def get_acls(self, path: str) -> list[Acl]:
        check_path(path)
        acls: list[Acl] = await self._send(_GetAcls(path))
        return acls

    # -- helpers built from several requests (not atomic, as in kazoo) ---------------------

    async def _ensure_path(self, path: str) -> None:
        if path == ROOT or await self._send(_Exists(path, False)) is not None:
            return
        try:
            await self._send(CreateOp(path))
        except NodeExistsError:
            return
        except NoNodeError:
            await self._ensure_path(parent_of(path))
            try:
                await self._send(CreateOp(path))
            except NodeExistsError:
                return

    async def _delete_tree(self, path: str, version: int) -> None:
        if version != ANY_VERSION:
            stat = await self.exists(path)
            if stat is None:
                raise NoNodeError(path)
            if stat.version != version:
                raise BadVersionError(f"{path}: expected version {version}, is {stat.version}")
        for child in await self.get_children(path):
            with contextlib.suppress(NoNodeError):  # someone else deleted it first
                await self._delete_tree(_join(path, child), ANY_VERSION)
        await self._send(DeleteOp(path, version))

    # -- the request/response machinery -----------------------------------------------------

    def _check_usable(self) -> None:
        match self._phase:
            case _Phase.CONNECTED:
                return
            case _Phase.NEW:
                raise CoordinationError(f"{self!r}: start() has not been called")
            case _Phase.CONNECTING | _Phase.SUSPENDED:
                raise ConnectionLossError(f"{self!r}: not connected to ZooKeeper")
            case _Phase.EXPIRED:
                raise SessionExpiredError(f"session {self._session_id:#x} has expired")
            case _Phase.CLOSED:
                raise SessionExpiredError(f"{self!r} is closed")

    async def _send(self, request: _Request, watcher: Watcher | None = None) -> Any:
        if not isinstance(request, _CloseSession):
            self._check_usable()
        assert self._loop is not None and self._outbound is not None
        call = _Call(request, watcher, self._loop.create_future(), self._connection)
        self._pending.add(call.reply)
        try:
            self._outbound.post(self._delay_s(), partial(self._at_server, call))
            return await call.reply
        finally:
            self._pending.discard(call.reply)

    def _at_server(self, call: _Call) -> None:
        """The request reaches the server: execute it and send the response back."""
        if call.connection != self._connection:
            return
        result: Any = None
        error: Exception | None = None
        try:
            result = self.server._handle(self._session_id, call.request)
        except (CoordinationError, ValueError) as e:
            error = e
        self._post_in(self._delay_s(), partial(self._on_response, call, result, error))

    def _on_response(self, call: _Call, result: Any, error: Exception | None) -> None:
        if call.connection != self._connection or call.reply.done():
            return
        if error is not None:
            call.reply.set_exception(error)
            return
        # The server registered the watch when it executed the read; the client side holds
        # the callback from the moment the response arrives (rule 3).
        request, watcher = call.request, call.watcher
        if watcher is not None:
            if isinstance(request, _Get | _Exists):
                self._data_watchers.setdefault(request.path, {})[watcher] = None
            elif isinstance(request, _GetChildren):
                self._child_watchers.setdefault(request.path, {})[watcher] = None
        call.reply.set_result(result)

    def _open_at_server(self, opened: asyncio.Future[None]) -> None:
        session = self.server._open_session(self, self._requested_timeout_ms)
        self._session_id = session.session_id
        self._post_in(self._delay_s(), partial(self._on_opened, opened, session))

    def _on_opened(self, opened: asyncio.Future[None], session: _Session) -> None:
        if self._phase is not _Phase.CONNECTING:
            return
        self._phase = _Phase.CONNECTED
        self._timeout_ms = session.timeout_ms
        self._tell_listeners(SessionState.CONNECTED)
        if not opened.done():
            opened.set_result(None)

    # -- messages from the server ---------------------------------------------------------

    def _on_notification(self, event_type: EventType, path: str) -> None:
        self._post_in(self._delay_s(), partial(self._fire_watchers, event_type, path))

    def _on_session_expired(self) -> None:
        # The server drops the connection of a session it expires; the client sees the
        # connection go, reconnects, and only then hears that the session is gone.
        self._post_in(self._delay_s(), self._dropped_by_server)

    def _dropped_by_server(self) -> None:
        if self._phase is not _Phase.CONNECTED:
            return
        self._phase = _Phase.SUSPENDED
        in_flight = list(self._pending)
        self._end_connection(None)
        self._deliver_suspended(in_flight)
        self._post_in(self._delay_s(), self._become_expired)

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

    def _deliver_suspended(self, in_flight: list[asyncio.Future[Any]]) -> None:
        self._tell_listeners(SessionState.SUSPENDED)
        for reply in in_flight:
            if not reply.done():
                reply.set_exception(
                    ConnectionLossError(
                        "connection lost; the request may or may not have been applied"
                    )
                )

    def _become_expired(self) -> None:
        if self._phase in (_Phase.EXPIRED, _Phase.CLOSED):
            return
        self._phase = _Phase.EXPIRED
        self._end_connection(SessionExpiredError(f"session {self._session_id:#x} has expired"))
        self._tell_listeners(SessionState.EXPIRED)

    # -- plumbing ---------------------------------------------------------------------------

    def _end_connection(self, error: Exception | None) -> None:
        """Forget the current connection: in-flight messages, client-side watches and (when
        ``error`` is given) the requests still waiting, which fail with it."""
        self._connection += 1
        if self._outbound is not None and self._inbound is not None:
            self._outbound.clear()
            self._inbound.clear()
        self._data_watchers.clear()
        self._child_watchers.clear()
        if error is not None:
            for reply in list(self._pending):
                if not reply.done():
                    reply.set_exception(error)

    def _post_in(self, delay_s: float, message: Callable[[], None]) -> None:
        if self._inbound is not None:
            self._inbound.post(delay_s, message)

    def _delay_s(self) -> float:
        if self._latency_ms is None:
            return 0.0
        low, high = self._latency_ms
        return self._rng.uniform(low, high) / 1000

    def _tell_listeners(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._run_callback(listener, state)

    def _run_callback(self, callback: Callable[[Any], None], argument: object) -> None:
        # A failing user callback must not stop the channel: report it as the loop would.
        try:
            callback(argument)
        except Exception as e:
            assert self._loop is not None
            self._loop.call_exception_handler(
                {"message": f"{self!r}: callback {callback!r} raised", "exception": e}
            )
