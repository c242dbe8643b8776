"""``kafkasim acls``: kafka-acls.sh (AclCommand) over Kafka's ZooKeeper path.

The tool runs Kafka's ACL authorizer itself against ZooKeeper, as ``kafka-acls.sh
--authorizer-properties zookeeper.connect=…`` does: it writes the ``/kafka-acl`` znodes with
version checks and the change notifications that every broker's authorizer follows, so the
brokers apply the change without a restart. ``--dir`` of a ``kafkasim cluster up`` directory
finds its ZooKeeper. Kafka's flags and output::

    kafkasim acls --dir cluster --add --allow-principal User:alice --operation Read --topic t
    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

``--remove`` without ``--force`` asks for confirmation on stdin, as Kafka; ``--list`` without a
resource lists every ACL. Bad flags die with Kafka's message.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafkasim.cli.connect import cluster_zookeeper
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.zk_acl import ZkSecurity
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.node.acl import (
    VALID_OPERATIONS,
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
    parse_principal,
)
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.zk_security import zk_security_from_props

ZK_SESSION_TIMEOUT_MS = 30_000
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "acls", help="add, remove and list ACLs (kafka-acls)"
    )
    p.add_argument(
        "--authorizer-properties",
        action="append",
        default=[],
        metavar="zookeeper.connect=HOST:PORT",
        help="the authorizer's properties: zookeeper.connect names the cluster's ZooKeeper; "
        "zookeeper.set.acl and zookeeper.jaas.config.file give its credentials",
    )
    p.add_argument("--dir", type=Path, help="a 'kafkasim cluster up' directory instead")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; * all)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[], help="a transactional id")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        choices=PATTERN_TYPES,
        help="literal or prefixed (add/remove); match or any too for list and remove",
    )
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="IP")
    p.add_argument("--deny-host", action="append", default=[], metavar="IP")
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite or All (default All; repeatable)",
    )
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        connect, security = _zookeeper_connect(args)
        filters = _resource_filters(args)
        entries = _entries(args, filters)
    except (ValueError, InvalidAclError, InvalidConfigError) as e:
        print(str(e), file=sys.stderr)
        return 1
    return asyncio.run(_run(args, connect, security, filters, entries))


def _zookeeper_connect(args: argparse.Namespace) -> tuple[str, ZkSecurity]:
    """ZooKeeper's connect string and, as Kafka's AclAuthorizer takes them from its
    properties, the ZooKeeper security keys (zookeeper.set.acl, zookeeper.jaas.config.file)."""
    if args.add + args.remove + args.list != 1:
        raise ValueError("Command must include exactly one action: --list, --add, --remove. ")
    props: dict[str, str] = {}
    for item in args.authorizer_properties:
        key, _, value = str(item).partition("=")
        props[key.strip()] = value.strip()
    if props and args.dir:
        raise ValueError("give --authorizer-properties or --dir, not both")
    if args.dir is not None:
        return cluster_zookeeper(args.dir)
    connect = props.get("zookeeper.connect", "")
    if not connect:
        raise ValueError(
            "missing required argument: --authorizer-properties zookeeper.connect=HOST:PORT "
            "(or --dir)"
        )
    return connect, zk_security_from_props(props)


def _resource_filters(args: argparse.Namespace) -> list[ResourcePatternFilter]:
    pattern = PatternType.parse(args.resource_pattern_type)
    if args.add and pattern in (PatternType.ANY, PatternType.MATCH):
        raise ValueError(
            "A '--resource-pattern-type' value of 'any' or 'match' is not valid when adding acls."
        )
    filters = [ResourcePatternFilter(ResourceType.TOPIC, t, pattern) for t in args.topic]
    filters += [ResourcePatternFilter(ResourceType.GROUP, g, pattern) for g in args.group]
    filters += [
        ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pattern)
        for t in args.transactional_id
    ]
    if args.cluster:
        filters.append(ResourcePatternFilter(ResourceType.CLUSTER, "kafka-cluster", pattern))
    if not filters and (args.add or args.remove):
        raise ValueError(
            "You must specify one of: --topic, --cluster, --group, --transactional-id when "
            f"using {'--add' if args.add else '--remove'}"
        )
    return filters


def _entries(
    args: argparse.Namespace, filters: list[ResourcePatternFilter]
) -> list[AccessControlEntry]:
    """The entries the flags name: every principal with every host and
    operation, allow and deny."""
    if args.add and not (args.allow_principal or args.deny_principal):
        raise ValueError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    operations = [AclOperation.parse(o) for o in args.operation] or [AclOperation.ALL]
    for f in filters:
        valid = VALID_OPERATIONS[f.resource_type]
        if any(op not in valid for op in operations):
            names = ",".join(op.pascal for op in sorted(valid))
            raise ValueError(
                f"ResourceType {f.resource_type.name} only supports operations {names}"
            )
    entries: list[AccessControlEntry] = []
    sides = (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    )
    for permission, principals, hosts in sides:
        for principal in principals:
            parse_principal(principal)
            for host in hosts or ["*"]:
                entries.extend(
                    AccessControlEntry(principal, host, op, permission) for op in operations
                )
    return entries


def _lines(header: str, entries: Iterable[AccessControlEntry]) -> str:
    """Kafka's layout, spaces included: ``<header>: \\n \\t<entry>\\n\\t<entry> \\n``."""
    body = "\n".join(f"\t{e}" for e in sorted(entries))
    return f"{header}: \n {body} \n"


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


async def _run(
    args: argparse.Namespace,
    connect: str,
    security: ZkSecurity,
    filters: list[ResourcePatternFilter],
    entries: list[AccessControlEntry],
) -> int:
    zk = KazooCoordination(connect, ZK_SESSION_TIMEOUT_MS, security=security)
    await zk.start()
    authorizer = AclAuthorizer(zk, name="kafka-acls")
    try:
        await authorizer.start()
        if args.add:
            for f in filters:
                pattern = ResourcePattern(f.resource_type, str(f.name), f.pattern_type)
                print(_lines(f"Adding ACLs for resource `{pattern}`", entries))
                bindings = [AclBinding(pattern, e) for e in entries]
                for b in bindings:
                    b.validate()
                for error in await authorizer.create_acls(bindings):
                    if error is not None:
                        print(f"Error while executing ACL command: {error}", file=sys.stderr)
                        return 1
        elif args.remove:
            code = await _remove(args, authorizer, filters, entries)
            if code:
                return code
        _list(authorizer, filters)
    except InvalidAclError as e:
        print(f"Error while executing ACL command: {e}", file=sys.stderr)
        return 1
    finally:
        await authorizer.stop()
        await zk.close()
    return 0


async def _remove(
    args: argparse.Namespace,
    authorizer: AclAuthorizer,
    filters: list[ResourcePatternFilter],
    entries: list[AccessControlEntry],
) -> int:
    for f in filters:
        if entries:
            question = (
                f"{_lines('Are you sure you want to remove ACLs', entries)[:-1]} from resource "
                f"filter `{f}`? (y/n)"
            )
            entry_filters = [
                AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission_type)
                for e in entries
            ]
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"
            entry_filters = [
                AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)
            ]
        if not _confirm(args, question):
            continue
        results = await authorizer.delete_acls([AclBindingFilter(f, ef) for ef in entry_filters])
        for deleted in (d for result in results for d in result):
            if deleted.error is not None:
                print(f"Error while executing ACL command: {deleted.error}", file=sys.stderr)
                return 1
    return 0


def _list(authorizer: AclAuthorizer, filters: list[ResourcePatternFilter]) -> None:
    any_entry = AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)
    any_resource = ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for f in filters or [any_resource]:
        for binding in authorizer.acls(AclBindingFilter(f, any_entry)):
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
    for pattern in sorted(by_pattern):
        print(_lines(f"Current ACLs for resource `{pattern}`", by_pattern[pattern]))
