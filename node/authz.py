"""Request authorization as Kafka's ``AuthHelper`` does it, for both front doors: one
:class:`RequestAuth` per request asks the broker's authorizer about the caller of the request
(``common.security.current_caller``). Wire-free: the request layers (Kafka protocol, gRPC)
and the shared per-API decisions (``node.authz_replica``, ``node.authz_groups``,
``node.authz_admin``) build on it.

Rules (Kafka's):

1. No authorizer (``authorizer.class.name`` empty): everything is allowed, nothing logged.
2. Every question is about a literal resource; the ``Cluster`` resource is named
   ``kafka-cluster``.
3. The authorizer logs each decision on ``kafka.authorizer.logger`` (``node.acl_authorizer``):
   a denial at INFO when the resource was asked for explicitly, an allowance at DEBUG; a
   question only asked to filter (an all-topics Metadata, a wildcard listing) or to compute
   authorized operations logs its denials below DEBUG, as Kafka logs them at TRACE.
4. Authorized operations (the ``*_authorized_operations`` fields) are the 32-bit field of the
   operation codes the caller may use among those the resource type supports; every one of
   them without an authorizer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from kafkasim.common.errors import error_for_name
from kafkasim.common.security import Caller, current_caller
from kafkasim.node.acl import (
    CLUSTER_NAME,
    VALID_OPERATIONS,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkasim.node.acl_authorizer import AclAuthorizer

TopicAuthorizationFailed = error_for_name("TOPIC_AUTHORIZATION_FAILED")
GroupAuthorizationFailed = error_for_name("GROUP_AUTHORIZATION_FAILED")
ClusterAuthorizationFailed = error_for_name("CLUSTER_AUTHORIZATION_FAILED")
TransactionalIdAuthorizationFailed = error_for_name("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")

# What AclEntry.supportedOperations lists per resource type (ALL is not an operation asked).
SUPPORTED_OPERATIONS = {
    rtype: tuple(sorted(op for op in ops if op is not AclOperation.ALL))
    for rtype, ops in VALID_OPERATIONS.items()
}


class HasAuthorizer(Protocol):
    @property
    def authorizer(self) -> AclAuthorizer | None: ...


def literal(rtype: ResourceType, name: str) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.LITERAL)


class RequestAuth:
    """The authorization of one request ``api`` (Kafka's API name, for the audit log) by the
    caller of the running task (or ``caller``)."""

    def __init__(
        self, authorizer: AclAuthorizer | None, api: str, caller: Caller | None = None
    ) -> None:
        self.authorizer = authorizer
        self.api = api
        self.caller = caller if caller is not None else current_caller()

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(
        self,
        operation: AclOperation,
        rtype: ResourceType = ResourceType.CLUSTER,
        name: str = CLUSTER_NAME,
        *,
        log_if_allowed: bool = True,
        log_if_denied: bool = True,
        ref_count: int = 1,
    ) -> bool:
        """Kafka's ``authorize``: may the caller do ``operation`` on ``rtype`` ``name``?"""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(
            self.caller.principal,
            self.caller.host,
            operation,
            literal(rtype, name),
            api=self.api,
            log_if_allowed=log_if_allowed,
            log_if_denied=log_if_denied,
            ref_count=ref_count,
        )

    def cluster(self, operation: AclOperation, *, log_if_denied: bool = True) -> bool:
        return self.allowed(operation, log_if_denied=log_if_denied)

    def allowed_names(
        self,
        operation: AclOperation,
        rtype: ResourceType,
        names: Iterable[str],
        *,
        log_if_denied: bool = True,
    ) -> set[str]:
        """Kafka's ``filterByAuthorized``: the names allowed, each asked once (its count as
        the resource reference count)."""
        counts = Counter(names)
        if self.authorizer is None:
            return set(counts)
        return {
            name
            for name, count in counts.items()
            if self.allowed(operation, rtype, name, log_if_denied=log_if_denied, ref_count=count)
        }

    def operations(self, rtype: ResourceType, name: str) -> int:
        """Rule 4: the authorized operations of ``rtype`` ``name`` as Kafka's bit field."""
        supported = SUPPORTED_OPERATIONS[rtype]
        allowed = (
            supported
            if self.authorizer is None
            else [
                op
                for op in supported
                if self.allowed(op, rtype, name, log_if_allowed=False, log_if_denied=False)
            ]
        )
        field = 0
        for op in allowed:
            field |= 1 << int(op)
        return field

    def any_allowed(self, operation: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: may the caller do ``operation`` on at least
        one resource of ``rtype``?"""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(
            self.caller.principal, self.caller.host, operation, rtype
        )


def request_auth(broker: HasAuthorizer, api: str) -> RequestAuth:
    """The authorization of the request ``api`` this task serves for ``broker``."""
    return RequestAuth(broker.authorizer, api)
