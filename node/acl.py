"""The ACL authorizer's pure core: Kafka's resource patterns, access control entries, binding
filters and the authorization decision of ``AclAuthorizer`` (ZooKeeper mode, 2.x-3.x).

Wire-free and IO-free: ``node.acl_store`` loads the ACLs from ZooKeeper into an
:class:`AclCache` and keeps it fresh; the request layer asks :meth:`AclCache.authorize`.

Theory of operation (Kafka's rules, in the order they are applied):

1. A principal listed in ``super.users`` is allowed everything, ACLs unread.
2. The ACLs that *match the resource* are gathered: the literal ACLs of its exact name, the
   literal ACLs of the wildcard name ``*`` of its type, and the prefixed ACLs whose name is a
   prefix of its name. The resource asked about is always a literal name.
3. No matching ACL at all (for any principal, host or operation): the answer is
   ``allow.everyone.if.no.acl.found`` (default false).
4. Otherwise a DENY that matches principal, host and operation refuses — DENY wins over any
   ALLOW. A DENY matches only the operation itself or ``All``: denying Read does not deny
   Describe.
5. Otherwise an ALLOW that matches allows; an ALLOW of Read, Write, Delete or Alter implies
   Describe, and an ALLOW of AlterConfigs implies DescribeConfigs (Kafka's implied operations).
   An entry's principal matches the principal asking or is ``User:*``; its host matches the
   client's IP address or is ``*``; its operation matches the one asked or is ``All``.
6. Nothing allowed it: refused.

Invariants: an :class:`AclBinding` holds a concrete pattern (LITERAL or PREFIXED, never ANY,
MATCH or UNKNOWN) and a concrete entry (never ANY or UNKNOWN); :meth:`AclBinding.validate`
turns that into an :class:`InvalidAclError`. Not thread-safe: one event loop reads and
updates the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from kafkasim.common.errors import KafkasimError

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
USER_TYPE = "User"


class InvalidAclError(KafkasimError):
    """An ACL or filter that cannot be stored or used (Kafka answers INVALID_REQUEST)."""


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(IntEnum):
    """Kafka's ACL enums: the code is the wire value; ``pascal`` is the ZooKeeper JSON and
    path spelling (``TransactionalId``, ``DescribeConfigs``)."""

    @property
    def pascal(self) -> str:
        return _pascal(self.name)

    @classmethod
    def from_code(cls, code: int) -> Self:
        """UNKNOWN for a code Kafka does not define (as ``fromCode``)."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def parse(cls, text: str) -> Self:
        """``Read``, ``READ``, ``read``, ``describe_configs``, ``DescribeConfigs``: Kafka's
        ``fromString`` accepts any case; ValueError naming the text otherwise."""
        wanted = text.strip().replace("_", "").replace("-", "").upper()
        for member in cls:
            if member.name.replace("_", "") == wanted and member.value > 1:
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}")


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: the patterns that would match a literal name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# Rule 5: the ALLOWs that grant an operation besides its own.
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}

# kafka-acls.sh refuses an operation its resource type has no use for (AclCommand).
VALID_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.ALL,
        }
    ),
    ResourceType.GROUP: frozenset(
        {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALL}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
            AclOperation.ALL,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset(
        {AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.ALL}
    ),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE, AclOperation.ALL}),
}


def parse_principal(text: str) -> str:
    """``Type:name`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``); InvalidAclError
    otherwise. The text is kept as given: principals compare as strings."""
    principal_type, sep, name = text.partition(":")
    if not sep or not principal_type or not name:
        raise InvalidAclError(
            f"expected a string in format principalType:principalName but got {text!r}"
        )
    return text


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (blanks ignored)."""
    users = (u.strip() for u in (value or "").split(";"))
    return frozenset(parse_principal(u) for u in users if u)


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )

    def validate(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"resourceType must not be {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"patternType must not be {self.pattern_type.name}")
        if not self.name:
            raise InvalidAclError("Invalid empty resource name")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )

    def validate(self) -> None:
        parse_principal(self.principal)
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"operation must not be {self.operation.name}")
        if self.permission_type in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
            raise InvalidAclError(f"permissionType must not be {self.permission_type.name}")

    def matches(
        self, principal: str, host: str, operation: AclOperation, permission: AclPermissionType
    ) -> bool:
        """Rule 5's match of one entry (``operation`` exactly, or the entry's All)."""
        return (
            self.permission_type is permission
            and self.principal in (principal, WILDCARD_PRINCIPAL)
            and self.operation in (operation, AclOperation.ALL)
            and self.host in (host, WILDCARD_HOST)
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """``name`` None matches any name (Kafka's ``ResourcePatternFilter``)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
            f"patternType={self.pattern_type.name})"
        )

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            pattern.resource_type
        ):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type is not pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the stored patterns that would match the literal name.
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    @property
    def unknown(self) -> bool:
        return (
            self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """``principal``/``host`` None match any."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission_type in (AclPermissionType.ANY, entry.permission_type)
        )

    @property
    def unknown(self) -> bool:
        return (
            self.operation is AclOperation.UNKNOWN
            or self.permission_type is AclPermissionType.UNKNOWN
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def validate(self) -> None:
        """A filter holding UNKNOWN elements (a code Kafka does not define) is refused."""
        if self.pattern.unknown or self.entry.unknown:
            raise InvalidAclError(f"The filter contains UNKNOWN elements: {self}")


ANY_BINDING = AclBindingFilter(
    ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
    AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY),
)


class AclCache:
    """Every resource pattern's ACLs, with the decision of the module's rules.

    Invariant: no pattern maps to an empty set (a resource whose last ACL went is removed),
    so "the resource has ACLs" is "the pattern is a key".
    """

    def __init__(self, super_users: Iterable[str] = (), *, allow_if_no_acls: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_if_no_acls
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}

    def __len__(self) -> int:
        return len(self._acls)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def put(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace ``pattern``'s ACLs (none: the pattern goes)."""
        frozen = frozenset(entries)
        if frozen:
            self._acls[pattern] = frozen
        else:
            self._acls.pop(pattern, None)

    def clear(self) -> None:
        self._acls.clear()

    def bindings(self, binding_filter: AclBindingFilter = ANY_BINDING) -> Iterator[AclBinding]:
        """The stored bindings the filter matches, sorted by pattern then entry."""
        for pattern in sorted(self._acls):
            for entry in sorted(self._acls[pattern]):
                binding = AclBinding(pattern, entry)
                if binding_filter.matches(binding):
                    yield binding

    def matching_entries(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Rule 2: the entries of every pattern that matches the literal ``name``."""
        found: list[AccessControlEntry] = []
        for literal in (name, WILDCARD_RESOURCE):
            found.extend(self.get(ResourcePattern(resource_type, literal, PatternType.LITERAL)))
        # Every prefix of the name (one lookup each) rather than a scan of all prefixed ACLs.
        for end in range(1, len(name) + 1):
            found.extend(self.get(ResourcePattern(resource_type, name[:end], PatternType.PREFIXED)))
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource: ResourcePattern
    ) -> bool:
        """Is ``principal`` from ``host`` (an IP address) allowed ``operation`` on the literal
        ``resource``? (the module's rules 1-6)."""
        if resource.pattern_type is not PatternType.LITERAL:
            raise InvalidAclError(
                f"Only literal resources are supported. Got: {resource.pattern_type.name}"
            )
        if principal in self.super_users:
            return True
        entries = self.matching_entries(resource.resource_type, resource.name)
        if not entries:
            return self.allow_if_no_acls
        if any(e.matches(principal, host, operation, AclPermissionType.DENY) for e in entries):
            return False
        allowing = IMPLIED_BY.get(operation, frozenset({operation}))
        return any(
            e.matches(principal, host, op, AclPermissionType.ALLOW)
            for e in entries
            for op in allowing
        )

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``authorizeByResourceType`` (KIP-679): may ``principal`` do ``operation``
        on at least one resource of ``resource_type``? Only the entries of that principal (or
        ``User:*``), host (or ``*``) and operation (or ``All``: no implied operations) count.

        1. A super user: yes. 2. A DENY of the wildcard resource ``*``: no.
        3. ``allow.everyone.if.no.acl.found``: yes (whatever ACLs exist, as Kafka).
        4. Yes when a prefixed ALLOW is not covered by a prefixed DENY (one whose name is a
           prefix of it), or a literal ALLOW is the wildcard, or is neither denied by name
           nor covered by a prefixed DENY. 5. Otherwise no."""
        if principal in self.super_users:
            return True
        allowed: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        denied: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        for pattern, entries in self._acls.items():
            if pattern.resource_type is not resource_type:
                continue
            for e in entries:
                if e.matches(principal, host, operation, AclPermissionType.DENY):
                    denied[pattern.pattern_type].add(pattern.name)
                elif e.matches(principal, host, operation, AclPermissionType.ALLOW):
                    allowed[pattern.pattern_type].add(pattern.name)
        if WILDCARD_RESOURCE in denied[PatternType.LITERAL]:
            return False
        if self.allow_if_no_acls:
            return True

        def covered(name: str) -> bool:
            return any(name.startswith(prefix) for prefix in denied[PatternType.PREFIXED])

        return any(not covered(prefix) for prefix in allowed[PatternType.PREFIXED]) or any(
            name == WILDCARD_RESOURCE
            or (name not in denied[PatternType.LITERAL] and not covered(name))
            for name in allowed[PatternType.LITERAL]
        )
