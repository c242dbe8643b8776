"""The ACL admin requests on Kafka's protocol: CreateAcls (30), DescribeAcls (29) and
DeleteAcls (31), v1-3, answered by the broker's ACL authorizer (``node.acl_authorizer``), as
ZooKeeper-mode Kafka's ``KafkaApis`` does: any broker serves them, writing ZooKeeper itself.

Kafka's answers:

* no authorizer configured: SECURITY_DISABLED ("No Authorizer is configured on the broker")
  for the request (DescribeAcls) or for every creation or filter;
* a creation that is not a concrete binding (a resource type, pattern type, operation or
  permission that is ANY or unknown, an empty name, a CLUSTER not named ``kafka-cluster``, a
  principal that is not ``Type:name``) or a filter with unknown codes: INVALID_REQUEST naming
  what is wrong, and nothing of it is written;
* a write that fails in ZooKeeper: UNKNOWN_SERVER_ERROR with the reason.

Who may call them: DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER
(CLUSTER_AUTHORIZATION_FAILED otherwise, for the request or every item), as Kafka. Pure
translations (``*_params``, ``*_response``) are module functions, unit-tested without a broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkasim.common.coordination import CoordinationError
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.node.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkasim.node.acl_authorizer import AclStorageError, DeletedAcl
from kafkasim.node.apis import BrokerServices
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz import request_auth
from kafkasim.node.authz_admin import cluster_refusal
from kafkasim.node.kafka_codec import KafkaRequest, build, error_message, response_schema

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31

SecurityDisabledError = error_for_name("SECURITY_DISABLED")
InvalidRequestError = error_for_name("INVALID_REQUEST")
UnknownServerError = error_for_name("UNKNOWN_SERVER_ERROR")
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _kafka_error(error: Exception) -> KafkaError:
    """A failure of the authorizer as Kafka's error."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, InvalidAclError | ValueError):
        return InvalidRequestError(str(error))
    if isinstance(error, AclStorageError | CoordinationError):
        return UnknownServerError(f"{error}")
    return UnknownServerError(repr(error))


def _pattern_type(code: int) -> PatternType:
    return PatternType.from_code(int(code))


def acl_filter(body: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter → a binding filter (not yet validated)."""
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType.from_code(int(body.resource_type_filter)),
            body.resource_name_filter,
            _pattern_type(body.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            body.principal_filter,
            body.host_filter,
            AclOperation.from_code(int(body.operation)),
            AclPermissionType.from_code(int(body.permission_type)),
        ),
    )


def creation_binding(creation: Any) -> AclBinding:
    """One CreateAcls creation → a binding (not yet validated)."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(int(creation.resource_type)),
            str(creation.resource_name),
            _pattern_type(creation.resource_pattern_type),
        ),
        AccessControlEntry(
            str(creation.principal),
            str(creation.host),
            AclOperation.from_code(int(creation.operation)),
            AclPermissionType.from_code(int(creation.permission_type)),
        ),
    )


def _binding_fields(binding: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(binding.pattern.resource_type),
        "resource_name": binding.pattern.name,
        "pattern_type": int(binding.pattern.pattern_type),
        "principal": binding.entry.principal,
        "host": binding.entry.host,
        "operation": int(binding.entry.operation),
        "permission_type": int(binding.entry.permission_type),
    }


def describe_acls_response(
    request: KafkaRequest, bindings: Sequence[AclBinding], error: KafkaError | None = None
) -> Any:
    """The bindings grouped by resource pattern, in the order given."""
    by_pattern: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(
            {
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": int(b.entry.operation),
                "permission_type": int(b.entry.permission_type),
            }
        )
    return build(
        response_schema(request),
        throttle_time=0,
        error_code=error_code(error),
        error_message=error_message(error),
        resources=[
            {
                "resource_type": int(p.resource_type),
                "resource_name": p.name,
                "pattern_type": int(p.pattern_type),
                "acls": acls,
            }
            for p, acls in by_pattern.items()
        ],
    )


def create_acls_response(request: KafkaRequest, errors: Sequence[KafkaError | None]) -> Any:
    return build(
        response_schema(request),
        throttle_time=0,
        results=[{"error_code": error_code(e), "error_message": error_message(e)} for e in errors],
    )


def delete_acls_response(
    request: KafkaRequest, results: Sequence[KafkaError | Sequence[DeletedAcl]]
) -> Any:
    """Per filter: its error, or the bindings it matched with each one's error."""
    filter_results: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result, KafkaError):
            filter_results.append(
                {
                    "error_code": error_code(result),
                    "error_message": error_message(result),
                    "matching_acls": [],
                }
            )
            continue
        matching = []
        for deleted in result:
            error = None if deleted.error is None else _kafka_error(deleted.error)
            matching.append(
                {
                    "error_code": error_code(error),
                    "error_message": error_message(error),
                    **_binding_fields(deleted.binding),
                }
            )
        filter_results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
    return build(response_schema(request), throttle_time=0, filter_results=filter_results)


class KafkaAclApis:
    """The ACL admin requests of one broker (``broker.authorizer``: None when off)."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker

    def table(self) -> dict[int, tuple[int, int, Any]]:
        return {
            DESCRIBE_ACLS: (1, 3, self.describe_acls),
            CREATE_ACLS: (1, 3, self.create_acls),
            DELETE_ACLS: (1, 3, self.delete_acls),
        }

    async def describe_acls(self, request: KafkaRequest) -> Any:
        authorizer = self.broker.authorizer
        if authorizer is None:
            return describe_acls_response(request, [], SecurityDisabledError(NO_AUTHORIZER))
        refusal = cluster_refusal(request_auth(self.broker, "DescribeAcls"), AclOperation.DESCRIBE)
        if refusal is not None:
            return describe_acls_response(request, [], refusal)
        binding_filter = acl_filter(request.body)
        try:
            binding_filter.validate()
        except InvalidAclError as e:
            return describe_acls_response(request, [], InvalidRequestError(str(e)))
        return describe_acls_response(request, authorizer.acls(binding_filter))

    async def create_acls(self, request: KafkaRequest) -> Any:
        creations = request.body.creations
        authorizer = self.broker.authorizer
        if authorizer is None:
            return create_acls_response(
                request, [SecurityDisabledError(NO_AUTHORIZER) for _ in creations]
            )
        refusal = cluster_refusal(request_auth(self.broker, "CreateAcls"), AclOperation.ALTER)
        if refusal is not None:
            return create_acls_response(request, [refusal for _ in creations])
        errors: list[KafkaError | None] = [None] * len(creations)
        valid: list[tuple[int, AclBinding]] = []
        for i, creation in enumerate(creations):
            binding = creation_binding(creation)
            try:
                binding.validate()
            except InvalidAclError as e:
                errors[i] = InvalidRequestError(str(e))
                continue
            valid.append((i, binding))
        stored = await authorizer.create_acls([b for _, b in valid])
        for (i, _), failure in zip(valid, stored, strict=True):
            errors[i] = None if failure is None else _kafka_error(failure)
        return create_acls_response(request, errors)

    async def delete_acls(self, request: KafkaRequest) -> Any:
        filters = request.body.filters
        authorizer = self.broker.authorizer
        if authorizer is None:
            return delete_acls_response(
                request, [SecurityDisabledError(NO_AUTHORIZER) for _ in filters]
            )
        refusal = cluster_refusal(request_auth(self.broker, "DeleteAcls"), AclOperation.ALTER)
        if refusal is not None:
            return delete_acls_response(request, [refusal for _ in filters])
        results: list[KafkaError | Sequence[DeletedAcl]] = [[] for _ in filters]
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, body in enumerate(filters):
            binding_filter = acl_filter(body)
            try:
                binding_filter.validate()
            except InvalidAclError as e:
                results[i] = InvalidRequestError(str(e))
                continue
            valid.append((i, binding_filter))
        deleted = await authorizer.delete_acls([f for _, f in valid])
        for (i, _), matched in zip(valid, deleted, strict=True):
            results[i] = matched
        return delete_acls_response(request, results)
