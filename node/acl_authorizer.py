"""Kafka's ACL authorizer (``AclAuthorizer``, ZooKeeper mode): the ACLs of ``node.acl_zk``'s
znodes held in an :class:`~node.acl.AclCache`, written with version checks, and kept fresh on
every broker by the change notifications.

Rules (through the Coordination port, so the simulation runs the same code):

1. Start: the ACL roots, the resource-type znodes under them and both change paths are made
   (as ``createAclPaths``); the change paths are listed (watch set) and the newest sequence
   number of each remembered; then every ACL znode is read into the cache. A change written
   after the listing has a higher sequence number, so nothing is missed; one written before
   it is already in what was read.
2. A write (create or delete ACLs) is a read-modify-write of one resource znode: read it with
   its version (always from ZooKeeper; Kafka starts from its cache), compute the new set,
   and in one multi write it conditionally (create when absent, set at the version, delete at
   the version when no ACL is left) together with a sequential change notification. A
   concurrent writer fails the condition: the znode is re-read and the change re-applied, at
   most :data:`UPDATE_ATTEMPTS_MAX` times. Kafka writes the notification separately; here both
   are one atomic write, so a notification never announces a write that did not happen.
3. After a write, the newest :data:`ACL_CHANGES_RETAINED` notifications of the path are kept
   and older ones deleted (Kafka purges by age, 15 minutes; the Stat here has no ctime).
4. A notification re-reads the resource it names and replaces its cache entry. Watches are
   one-shot and a lost connection drops them: a watch event, a reconnection or a new session
   makes one pass over both paths; passes never overlap, events during a pass cause one more.
   When the last notification handled is gone (purged), or a notification disappears between
   listing and reading, or the session is new, every ACL is reloaded.
5. A znode whose data does not parse is logged: at load it is skipped, on a refresh the cached
   entry stays, and a write to it is refused (:class:`AclStorageError`): stored data is never
   overwritten with a guess.

Not thread-safe: runs on the broker's event loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kafkasim.common.coordination import (
    BadVersionError,
    Coordination,
    CoordinationError,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)
from kafkasim.common.errors import KafkasimError
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.node import acl_zk
from kafkasim.node.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    AclOperation,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)
from kafkasim.node.config import BrokerConfig
from kafkasim.node.notification_passes import SerialPasses

logger = logging.getLogger(__name__)
audit = logging.getLogger("kafka.authorizer.logger")  # Kafka's authorizer logger name
TRACE = 5  # log4j's TRACE, below logging.DEBUG

UPDATE_ATTEMPTS_MAX = 10  # Kafka's maxUpdateRetries
ACL_CHANGES_RETAINED = 100
ZK_ATTEMPTS_MAX = 10
ZK_BACKOFF_MAX_S = 2.0


def acl_authorizer_for(config: BrokerConfig, coordination: Coordination) -> AclAuthorizer | None:
    """The broker's authorizer as ``authorizer.class.name`` asks (empty: None); the config
    checked the class name and ``super.users`` at load."""
    if not config["authorizer.class.name"]:
        return None
    return AclAuthorizer(
        coordination,
        parse_super_users(config["super.users"]),
        allow_if_no_acls=config["allow.everyone.if.no.acl.found"],
        name=f"broker-{config.broker_id}",
    )


class AclStorageError(KafkasimError):
    """The ACLs of a resource could not be written: their znode does not parse, or writers
    kept racing past :data:`UPDATE_ATTEMPTS_MAX` (Kafka answers UNKNOWN_SERVER_ERROR)."""


@dataclass(frozen=True, slots=True)
class DeletedAcl:
    """One binding a DeleteAcls filter matched; ``error`` None when it was deleted."""

    binding: AclBinding
    error: Exception | None = None


class AclAuthorizer:
    """The ACLs of one cluster as one broker (or the ``acls`` tool) sees them."""

    def __init__(
        self,
        coordination: Coordination,
        super_users: frozenset[str] = frozenset(),
        *,
        allow_if_no_acls: bool = False,
        name: str = "authorizer",
    ) -> None:
        self.cache = AclCache(super_users, allow_if_no_acls=allow_if_no_acls)
        self.name = name
        self._zk = RetryingCoordination(coordination, ZK_ATTEMPTS_MAX, ZK_BACKOFF_MAX_S)
        self.last_executed: dict[str, int] = dict.fromkeys(acl_zk.CHANGE_PATHS, -1)
        self.notifications_processed = 0
        self._reload_all = False
        self._passes = SerialPasses(f"{name}-acl-changes", self._process, (CoordinationError,))

    # -- the decision -------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource: ResourcePattern,
        *,
        api: str = "",
        log_if_allowed: bool = True,
        log_if_denied: bool = True,
        ref_count: int = 1,
    ) -> bool:
        """The decision of ``node.acl``, logged as Kafka's ``AclAuthorizer`` logs it on
        ``kafka.authorizer.logger``: a denial at INFO and an allowance at DEBUG, or at TRACE
        (level 5) when the request only filters (``log_if_denied`` False) or computes
        authorized operations (``log_if_allowed`` False)."""
        allowed = self.cache.authorize(principal, host, operation, resource)
        level = (
            (logging.DEBUG if log_if_allowed else TRACE)
            if allowed
            else (logging.INFO if log_if_denied else TRACE)
        )
        if audit.isEnabledFor(level):
            audit.log(
                level,
                "Principal = %s is %s Operation = %s from host = %s on resource = %s:%s:%s "
                "for request = %s with resourceRefCount = %d",
                principal,
                "Allowed" if allowed else "Denied",
                operation.pascal,
                host,
                resource.resource_type.pascal,
                resource.pattern_type.name,
                resource.name,
                api,
                ref_count,
            )
        return allowed

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return self.cache.authorize_by_resource_type(principal, host, operation, resource_type)

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        return list(self.cache.bindings(binding_filter))

    # -- lifecycle (rule 1) -------------------------------------------------------------------

    async def start(self) -> None:
        self._passes.running = True
        self._passes.listen(self._zk.zk, lambda: self._zk.zk)
        for store in acl_zk.STORES:
            for rtype in acl_zk.STORED_RESOURCE_TYPES:
                with contextlib.suppress(NodeExistsError):
                    await self._zk.create(store.type_path(rtype), makepath=True)
        for path in acl_zk.CHANGE_PATHS:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(path, makepath=True)
            children = await self._zk.get_children(path, self._passes.on_watch)
            self.last_executed[path] = max(map(acl_zk.change_sequence, children), default=-1)
        await self.load_all()

    def replace_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session: watch through it and reload everything (rule 4)."""
        self._zk = RetryingCoordination(coordination, ZK_ATTEMPTS_MAX, ZK_BACKOFF_MAX_S)
        self._passes.listen(coordination, lambda: self._zk.zk)
        self._schedule(reload_all=True)

    async def stop(self) -> None:
        await self._passes.stop()

    async def wait_idle(self) -> None:
        """Until no notification pass is running or pending (for tests)."""
        await self._passes.wait_idle()

    async def load_all(self) -> None:
        loaded: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for store in acl_zk.STORES:
            for type_child in await self._zk.get_children(store.acl_root):
                try:
                    rtype = store.resource_type_of(type_child)
                except ValueError as e:
                    logger.error("%s: skipping %s/%s: %s", self.name, store.acl_root, type_child, e)
                    continue
                for name in await self._zk.get_children(store.type_path(rtype)):
                    pattern = ResourcePattern(rtype, name, store.pattern_type)
                    entries = await self._read_logged(pattern)
                    if entries is not None:
                        loaded[pattern] = entries
        self.cache.clear()
        for pattern, entries in loaded.items():
            self.cache.put(pattern, entries)
        logger.info("%s: loaded the ACLs of %d resource patterns", self.name, len(self.cache))

    # -- writes (rules 2 and 3) ---------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """One result per binding, in order (None: stored). Bindings are validated by the
        caller (the request layer answers INVALID_REQUEST before anything is written)."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            by_pattern.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in by_pattern.items():
            added = {bindings[i].entry for i in indexes}
            try:
                await self._update(pattern, added=frozenset(added))
            except (AclStorageError, CoordinationError, ValueError) as e:
                for i in indexes:
                    results[i] = e
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[DeletedAcl]]:
        """Per filter, the bindings it matched (in the cache) and whether each went."""
        matched = [self.acls(f) for f in filters]
        doomed: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for bindings in matched:
            for b in bindings:
                doomed.setdefault(b.pattern, set()).add(b.entry)
        errors: dict[ResourcePattern, Exception] = {}
        for pattern, entries in doomed.items():
            try:
                await self._update(pattern, removed=frozenset(entries))
            except (AclStorageError, CoordinationError, ValueError) as e:
                errors[pattern] = e
        return [[DeletedAcl(b, errors.get(b.pattern)) for b in bindings] for bindings in matched]

    async def _update(
        self,
        pattern: ResourcePattern,
        *,
        added: frozenset[AccessControlEntry] = frozenset(),
        removed: frozenset[AccessControlEntry] = frozenset(),
    ) -> None:
        path = acl_zk.resource_path(pattern)
        store = acl_zk.store_of(pattern.pattern_type)
        for _ in range(UPDATE_ATTEMPTS_MAX):
            try:
                data, stat = await self._zk.get(path)
                version: int | None = stat.version
            except NoNodeError:
                data, version = b"", None
            try:
                current = acl_zk.decode_acls(data)
            except ValueError as e:
                raise AclStorageError(f"the ACLs of {pattern} in {path} do not parse: {e}") from e
            updated = (current | added) - removed
            if updated == current:
                self.cache.put(pattern, current)
                return
            write: Op
            if version is None:
                write = CreateOp(path, acl_zk.encode_acls(updated))
            elif updated:
                write = SetOp(path, acl_zk.encode_acls(updated), version)
            else:
                write = DeleteOp(path, version)
            notification = CreateOp(
                f"{store.change_path}/{acl_zk.CHANGE_PREFIX}",
                acl_zk.encode_change(pattern),
                sequence=True,
            )
            try:
                await self._zk.multi([write, notification])
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # written meanwhile: apply the change to what is there now
            self.cache.put(pattern, updated)
            logger.info("%s: ACLs of %s: %d -> %d", self.name, pattern, len(current), len(updated))
            with contextlib.suppress(CoordinationError):  # the next write purges them
                await self._purge(store.change_path)
            return
        raise AclStorageError(
            f"Failed to update ACLs for {pattern} after trying {UPDATE_ATTEMPTS_MAX} times"
        )

    async def _purge(self, change_path: str) -> None:
        children = await self._zk.get_children(change_path)
        changes = sorted((s, c) for c in children if (s := acl_zk.change_sequence(c)) >= 0)
        for _, child in changes[:-ACL_CHANGES_RETAINED]:
            with contextlib.suppress(NoNodeError):
                await self._zk.delete(f"{change_path}/{child}")

    # -- notifications (rule 4) ---------------------------------------------------------------

    def _schedule(self, *, reload_all: bool = False) -> None:
        self._reload_all = self._reload_all or reload_all
        self._passes.request()

    async def _process(self) -> None:
        pending: list[tuple[str, int, str]] = []
        for path in acl_zk.CHANGE_PATHS:
            children = await self._zk.get_children(path, self._passes.on_watch)
            sequences = {acl_zk.change_sequence(c) for c in children}
            last = self.last_executed[path]
            if last >= 0 and last not in sequences:
                self._reload_all = True  # purged past what we handled
            pending.extend(
                (path, seq, c) for c in children if (seq := acl_zk.change_sequence(c)) > last
            )
        if self._reload_all:
            self._reload_all = False
            await self.load_all()
        for path, seq, child in sorted(pending):
            try:
                data, _ = await self._zk.get(f"{path}/{child}")
            except NoNodeError:
                await self.load_all()  # purged before we read it: which resource is unknown
                self.last_executed[path] = seq
                continue
            try:
                pattern = acl_zk.decode_change(path, data)
            except ValueError as e:
                logger.error("%s: ignoring ACL change %s/%s: %s", self.name, path, child, e)
            else:
                await self.refresh(pattern)
            self.last_executed[path] = seq
            self.notifications_processed += 1

    async def refresh(self, pattern: ResourcePattern) -> None:
        """Re-read one pattern's ACLs into the cache (kept when they do not parse)."""
        entries = await self._read_logged(pattern)
        if entries is not None:
            self.cache.put(pattern, entries)

    async def _read_logged(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry] | None:
        """The pattern's stored entries (empty if no znode); None, logged, if they do not
        parse or the pattern cannot be stored."""
        try:
            data, _ = await self._zk.get(acl_zk.resource_path(pattern))
        except NoNodeError:
            return frozenset()
        except ValueError as e:
            logger.error("%s: %s", self.name, e)
            return None
        try:
            return acl_zk.decode_acls(data)
        except ValueError as e:
            logger.error("%s: the ACLs of %s do not parse: %s", self.name, pattern, e)
            return None
