"""Where and how ACLs live in ZooKeeper, exactly as ZooKeeper-mode Kafka keeps them (ZkData's
``ZkAclStore``, ``ResourceZNode``, ``ZkAclChangeStore``). Pure: values in, paths and bytes out.

::

    /kafka-acl/<ResourceType>/<name>                       literal patterns' ACLs
    /kafka-acl-extended/prefixed/<ResourceType>/<name>     prefixed patterns' ACLs
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                   a literal pattern changed:
        TOPIC:<name>                                       (UTF-8 "<resource type>:<name>")
    /kafka-acl-extended-changes/acl_changes_<seq>          another pattern changed:
        {"version":1,"resourceType":"TOPIC","name":"<name>","patternType":"PREFIXED"}

``<ResourceType>`` is Kafka's path spelling (``Topic``, ``Group``, ``Cluster``,
``TransactionalId``, ``DelegationToken``); a pattern with no ACL left has no znode. Decoding
accepts any letter case for the enum names, as Kafka's ``fromString`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kafkasim.node.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
PREFIXED_ACL_ROOT = f"{EXTENDED_ACL_ROOT}/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACLS_VERSION = 1
EXTENDED_CHANGE_VERSION = 1

STORED_RESOURCE_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
)


@dataclass(frozen=True, slots=True)
class AclStore:
    """One pattern type's ACL root and the change path that announces its writes."""

    pattern_type: PatternType
    acl_root: str
    change_path: str

    def type_path(self, resource_type: ResourceType) -> str:
        return f"{self.acl_root}/{resource_type.pascal}"

    def resource_type_of(self, child: str) -> ResourceType:
        """The resource type a child of the root names; ValueError otherwise."""
        rtype = ResourceType.parse(child)
        if rtype not in STORED_RESOURCE_TYPES:
            raise ValueError(f"no ACLs are stored for resource type {child!r}")
        return rtype


LITERAL_STORE = AclStore(PatternType.LITERAL, ACL_ROOT, LITERAL_CHANGES)
PREFIXED_STORE = AclStore(PatternType.PREFIXED, PREFIXED_ACL_ROOT, EXTENDED_CHANGES)
STORES = (LITERAL_STORE, PREFIXED_STORE)
CHANGE_PATHS = (LITERAL_CHANGES, EXTENDED_CHANGES)


def store_of(pattern_type: PatternType) -> AclStore:
    for store in STORES:
        if store.pattern_type is pattern_type:
            return store
    raise ValueError(f"no ACL store for pattern type {pattern_type.name}")


def resource_path(pattern: ResourcePattern) -> str:
    if "/" in pattern.name:
        # A slash would make a nested znode that no reader finds again.
        raise ValueError(f"resource name {pattern.name!r} contains '/': it cannot be stored")
    return f"{store_of(pattern.pattern_type).type_path(pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: frozenset[AccessControlEntry]) -> bytes:
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission_type.pascal,
            "operation": e.operation.pascal,
            "host": e.host,
        }
        for e in sorted(entries)
    ]
    return json.dumps({"version": ACLS_VERSION, "acls": acls}, separators=(",", ":")).encode()


def _loads(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} is not JSON: {e}") from None


def decode_acls(data: bytes) -> frozenset[AccessControlEntry]:
    """The entries of a resource znode (empty data: none); ValueError naming what is wrong."""
    if not data:
        return frozenset()
    obj = _loads(data, "ACL znode")
    if not isinstance(obj, dict) or obj.get("version") != ACLS_VERSION:
        raise ValueError(f"unsupported ACL znode version: {obj!r:.80}")
    entries: set[AccessControlEntry] = set()
    for acl in obj.get("acls", []):
        try:
            entry = AccessControlEntry(
                str(acl["principal"]),
                str(acl["host"]),
                AclOperation.parse(str(acl["operation"])),
                AclPermissionType.parse(str(acl["permissionType"])),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed ACL {acl!r}: missing {e}") from None
        entries.add(entry)
    return frozenset(entries)


def encode_change(pattern: ResourcePattern) -> bytes:
    """The payload of the change notification announcing a write of ``pattern``'s ACLs."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {
        "version": EXTENDED_CHANGE_VERSION,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def decode_change(change_path: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under ``change_path`` names; ValueError if it names none."""
    if change_path == LITERAL_CHANGES:
        rtype, sep, name = data.decode("utf-8", errors="replace").partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {data!r:.80}")
        return ResourcePattern(ResourceType.parse(rtype), name, PatternType.LITERAL)
    obj = _loads(data, "ACL change event")
    if not isinstance(obj, dict) or obj.get("version", 0) > EXTENDED_CHANGE_VERSION:
        raise ValueError(f"unsupported ACL change event: {obj!r:.80}")
    try:
        return ResourcePattern(
            ResourceType.parse(str(obj["resourceType"])),
            str(obj["name"]),
            PatternType.parse(str(obj["patternType"])),
        )
    except KeyError as e:
        raise ValueError(f"ACL change event without {e}") from None


def change_sequence(child: str) -> int:
    """The sequence number of an ``acl_changes_<seq>`` child (-1 if it is not one)."""
    digits = child.removeprefix(CHANGE_PREFIX)
    return int(digits) if child.startswith(CHANGE_PREFIX) and digits.isdigit() else -1
