"""The Coordination port: the ZooKeeper operations the controller and brokers use.

Two implementations, behaving the same on every operation here (a conformance test runs the
same cases against both):

* ``controller/zk_kazoo.py`` — a real ZooKeeper through kazoo (the only module that imports
  kazoo; kazoo's threads hand every watch and session event to the asyncio loop with
  ``call_soon_threadsafe``, and no kazoo object leaks out);
* ``sim/zookeeper.py`` — SimZooKeeper, in memory on the virtual-time loop: versions, ephemeral
  nodes bound to sessions, sequential nodes, one-shot watches, sessions and their expiry.

Semantics are ZooKeeper's: paths are absolute, ``version=-1`` means "any version", watches
fire once, an ephemeral node goes when its session expires or closes, a sequential node gets a
10-digit zero-padded counter of its parent appended, ``multi`` is all-or-nothing. A session
may authenticate and create znodes with ACLs (``common/zk_acl.py``, a ZkSecurity given to
the adapter's constructor); an operation its ACLs refuse raises NoAuthError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum, IntFlag
from typing import Protocol

from kafkasim.common.errors import KafkasimError


class CoordinationError(KafkasimError):
    """Base of the coordination errors (ZooKeeper's KeeperException codes)."""


class NoNodeError(CoordinationError):
    pass


class NodeExistsError(CoordinationError):
    pass


class BadVersionError(CoordinationError):
    pass


class NotEmptyError(CoordinationError):
    pass


class NoAuthError(CoordinationError):
    """The znode's ACL does not grant this session the permission the operation needs."""


class InvalidACLError(CoordinationError):
    """The ACL list given to a create cannot be used (e.g. ``auth:`` without credentials)."""


class SessionExpiredError(CoordinationError):
    """The session is gone: its ephemeral nodes are deleted; make a new session."""


class ConnectionLossError(CoordinationError):
    """The server did not answer; the operation may or may not have happened."""


class EventType(Enum):
    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"


class SessionState(Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost; the session may still be alive
    EXPIRED = "EXPIRED"  # the session is gone (ephemerals deleted)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    path: str


@dataclass(frozen=True, slots=True)
class Stat:
    """The parts of ZooKeeper's Stat that kafkasim uses."""

    version: int  # data version; conditional writes compare it
    czxid: int  # creation transaction id (Kafka's broker epoch is the czxid of its znode)
    mzxid: int
    ephemeral_owner: int  # session id, 0 for persistent nodes
    num_children: int
    cversion: int = 0


Watcher = Callable[[WatchEvent], None]


# ZooKeeper ACLs (the rules and credentials are in common/zk_acl.py)
class Perm(IntFlag):
    """ZooKeeper's permission bits (ZooDefs.Perms)."""

    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


WORLD = "world"
ANYONE = "anyone"
DIGEST = "digest"
AUTH = "auth"


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL entry: ``perms`` granted to ``scheme:id``."""

    perms: Perm
    scheme: str
    id: str

    def __str__(self) -> str:
        return f"{self.scheme}:{self.id}:{int(self.perms)}"


# ZooDefs.Ids
OPEN_ACL_UNSAFE: tuple[Acl, ...] = (Acl(Perm.ALL, WORLD, ANYONE),)
CREATOR_ALL_ACL: tuple[Acl, ...] = (Acl(Perm.ALL, AUTH, ""),)
READ_ACL_UNSAFE: tuple[Acl, ...] = (Acl(Perm.READ, WORLD, ANYONE),)


# multi() operations
@dataclass(frozen=True, slots=True)
class CheckOp:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


Op = CheckOp | CreateOp | SetOp | DeleteOp


class Coordination(Protocol):
    """One ZooKeeper session. Watch callbacks run on the asyncio loop."""

    @property
    def session_id(self) -> int: ...

    async def start(self) -> None:
        """Connect and open a session (raises ConnectionLossError if it cannot)."""
        ...

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once)."""
        ...

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None: ...

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a node; returns its path (with the sequence suffix). NodeExistsError,
        NoNodeError (parent missing and not makepath)."""
        ...

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        """Data and stat; NoNodeError. ``watch`` fires on CHANGED or DELETED."""
        ...

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        """Stat or None. ``watch`` fires on CREATED, CHANGED or DELETED."""
        ...

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        """Child names, sorted; NoNodeError. ``watch`` fires on CHILD or DELETED."""
        ...

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Write data if the version matches; BadVersionError, NoNodeError."""
        ...

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Delete; NoNodeError, BadVersionError, NotEmptyError (unless recursive)."""
        ...

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """All or nothing; raises the error of the first failing op (nothing applied)."""
        ...

    async def get_acls(self, path: str) -> list[Acl]:
        """The znode's ACL list (``auth:`` already replaced by identities); NoNodeError."""
        ...


CoordinationFactory = Callable[[], Awaitable[Coordination]]
