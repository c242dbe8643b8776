"""``kafkasim configs``: kafka-configs.sh for topics (``--entity-type topics``), brokers
(``--entity-type brokers``: dynamic broker configs, ``node.broker_config_admin``) and users
(``--entity-type users``: SCRAM credentials in ZooKeeper, ``cli.configs_users``).

``--alter`` sends one IncrementalAlterConfigs (``--add-config`` keys are SET, ``--delete-config``
keys DELETEd) to a broker (the controller; any broker would do), which writes
``/config/topics/<t>`` and a change notification; every broker applies it to its logs without
a restart. ``--describe`` lists the topic's own overrides (Kafka's "dynamic" configs). Output
lines are Kafka's::

    Completed updating config for topic orders.
    Dynamic configs for topic orders are:
      retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}

Brokers: ``--entity-name ID`` (one broker's dynamic configs, ``/config/brokers/<id>``) or
``--entity-default`` (every broker's, ``/config/brokers/<default>``); the brokers apply the
ones Kafka's DynamicLogConfig allows (the ``log.*`` topic defaults, ``min.insync.replicas``,
``message.max.bytes``, ``compression.type`` …) at once, to every topic not overriding them.
``--describe`` prints ``Dynamic configs for broker 1 are:`` (``Default configs for brokers in
the cluster are:``); ``--all`` prints every config (``All configs for broker 1 are:``, or
for a topic its defaults too) with the source of each value.

``--add-config`` takes Kafka's ``k1=v1,k2=[v1,v2],k3=v3`` (square brackets group a list
value's commas). As in Kafka, deleting a key that is not overridden is refused before anything
is sent (``Invalid config(s): k``), and a refused config prints just its message; any other
failure prints ``Error while executing config command : <message>``. Both exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafkasim.cli.configs_users import UserConfigError, run_users
from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.client.admin import AdminClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.config import read_properties
from kafkasim.common.errors import InvalidConfigError, KafkaError, KafkasimError
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport

ENTITY_TYPES = ("topics", "brokers", "users")
# Kafka's DescribeConfigs ConfigSource numbers and names.
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
# A comma outside square brackets separates two pairs (Kafka's --add-config grammar).
_PAIR_SEPARATOR = re.compile(r",(?=[^\]]*(?:\[|$))")


class ConfigCommandError(KafkasimError):
    """A config command that cannot be done as asked (Kafka's InvalidConfigurationException
    and IllegalArgumentException: the message alone is printed)."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "configs", help="describe and alter topic and broker configs (kafka-configs)"
    )
    add_bootstrap_args(p)
    p.add_argument("--alter", action="store_true", help="alter the entity's configs")
    p.add_argument("--describe", action="store_true", help="list the entity's overrides")
    p.add_argument("--entity-type", help="the entity type: topics or brokers")
    p.add_argument(
        "--entity-name", help="a topic name or a broker id (--describe: all of them if omitted)"
    )
    p.add_argument(
        "--entity-default",
        action="store_true",
        help="brokers: the cluster-wide default (/config/brokers/<default>)",
    )
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT",
        help="users: the ZooKeeper that holds the SCRAM credentials (Kafka's flag); its "
        "credentials from --command-config's zookeeper.jaas.config.file",
    )
    p.add_argument("--topic", help="the topic (instead of --entity-type/--entity-name)")
    p.add_argument("--broker", help="the broker id (instead of --entity-type/--entity-name)")
    p.add_argument(
        "--all", action="store_true", help="--describe: every config, not only the overrides"
    )
    p.add_argument(
        "--add-config",
        metavar="K=V,K2=[A,B]",
        help="configs to set; square brackets group a list value",
    )
    p.add_argument("--add-config-file", type=Path, help="a properties file of configs to set")
    p.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K1,K2",
        help="configs to remove (the broker default applies again)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    entity_type, name = _check_args(args)
    try:
        to_set = parse_add_config(args.add_config or "")
        if args.add_config_file is not None:
            to_set.update(read_properties(args.add_config_file))
        to_delete = [k.strip() for item in args.delete_config for k in item.split(",")]
        to_delete = [k for k in to_delete if k]
        if entity_type == "users":
            for line in run_users(args, name, to_set, to_delete):
                print(line)
            return 0
        bootstrap = bootstrap_servers(args)
        if args.alter:
            asyncio.run(
                _alter(
                    bootstrap,
                    entity_type,
                    name,
                    to_set,
                    to_delete,
                    security=security_properties(args),
                )
            )
            print(
                "Completed updating default config for brokers in the cluster."
                if entity_type == "brokers" and name == ""
                else f"Completed updating config for {entity_type[:-1]} {name}."
            )
        else:
            for line in asyncio.run(
                _describe(bootstrap, entity_type, name, args.all, security_properties(args))
            ):
                print(line)
    except (ConfigCommandError, InvalidConfigError, UserConfigError) as e:
        print(e.message if isinstance(e, KafkaError) else str(e), file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"Error while executing config command : {e.message or e}", file=sys.stderr)
        return 1
    return 0


def _check_args(args: argparse.Namespace) -> tuple[str, str | None]:
    """The entity type and name ('' for the brokers' default, None: every one, --describe
    only); ValueError naming what is wrong with the flags."""
    if args.alter == args.describe:
        raise ValueError("Command must include exactly one action: --describe, --alter")
    shortcuts = [f for f in ("topic", "broker") if getattr(args, f) is not None]
    if len(shortcuts) > 1 or (shortcuts and (args.entity_type or args.entity_name)):
        raise ValueError("give --topic, --broker or --entity-type with --entity-name, not several")
    entity_type = {"topic": "topics", "broker": "brokers"}.get(
        shortcuts[0] if shortcuts else "", args.entity_type
    )
    name: str | None = getattr(args, shortcuts[0]) if shortcuts else args.entity_name
    if entity_type is None:
        raise ValueError("At least one entity type must be specified")
    if entity_type not in ENTITY_TYPES:
        raise ValueError(
            f"Invalid entity type {entity_type}, the entity type must be one of "
            f"{', '.join(ENTITY_TYPES)}"
        )
    if args.entity_default:
        if entity_type != "brokers":
            raise ValueError("--entity-default is only valid with --entity-type brokers")
        if name is not None:
            raise ValueError("give --entity-name or --entity-default, not both")
        name = ""
    if entity_type == "brokers" and name and not name.isdigit():
        raise ValueError(f"The entity name for brokers must be a valid integer broker id: {name}")
    changes = args.add_config or args.add_config_file or args.delete_config
    if args.describe and changes:
        raise ValueError("--add-config and --delete-config are only valid with --alter")
    if args.all and not args.describe:
        raise ValueError("--all is only valid with --describe")
    if args.alter:
        if name is None:
            raise ValueError(
                f"an entity name must be specified with --alter of {entity_type}"
                + (" (or --entity-default)" if entity_type == "brokers" else "")
            )
        if not changes:
            raise ValueError(
                "At least one of --add-config, --add-config-file, or --delete-config must be "
                "specified with --alter"
            )
    return entity_type, name


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``k1=v1,k2=[v1,v2]``: pairs split on commas outside brackets, a bracketed
    value loses its brackets."""
    configs: dict[str, str] = {}
    for pair in _PAIR_SEPARATOR.split(text):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigCommandError(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _admin(bootstrap: list[str], transport: GrpcTransport) -> AdminClient:
    return AdminClient(bootstrap, transport=transport, clock=SystemClock())


def _broker_id(name: str) -> int | None:
    return None if name == "" else int(name)


async def _alter(
    bootstrap: list[str],
    entity_type: str,
    name: str | None,
    to_set: dict[str, str],
    to_delete: list[str],
    *,
    security: Mapping[str, object] | None = None,
) -> None:
    assert name is not None  # _check_args
    transport = client_transport(security or {})
    try:
        admin = _admin(bootstrap, transport)
        if entity_type == "brokers":
            current = await admin.describe_broker_configs(_broker_id(name))
            own = DYNAMIC_DEFAULT_BROKER_CONFIG if name == "" else DYNAMIC_BROKER_CONFIG
            overridden = {c.name for c in current if c.source == own}
        else:
            overridden = {c.name for c in await admin.describe_configs(name) if not c.is_default}
        missing = [k for k in to_delete if k not in overridden]
        if missing:
            raise ConfigCommandError(f"Invalid config(s): {','.join(missing)}")
        if entity_type == "brokers":
            await admin.alter_broker_configs(_broker_id(name), set=to_set, delete=to_delete)
        else:
            await admin.alter_topic_configs(name, set=to_set, delete=to_delete)
    finally:
        await transport.close()


async def _describe(
    bootstrap: list[str],
    entity_type: str,
    name: str | None,
    describe_all: bool,
    security: Mapping[str, object] | None = None,
) -> list[str]:
    transport = client_transport(security or {})
    try:
        admin = _admin(bootstrap, transport)
        if name is not None:
            names = [name]
        elif entity_type == "topics":
            names = await admin.list_topics()
        else:  # every broker, then the cluster default (as Kafka)
            names = [str(b.node_id) for b in (await admin.describe_cluster()).brokers]
            names = [*sorted(names, key=int), ""]
        lines: list[str] = []
        for entity in names:
            if entity_type == "topics":
                configs = await admin.describe_configs(entity)
                own, title = DYNAMIC_TOPIC_CONFIG, f"topic {entity}"
            else:
                configs = await admin.describe_broker_configs(_broker_id(entity))
                own = DYNAMIC_DEFAULT_BROKER_CONFIG if entity == "" else DYNAMIC_BROKER_CONFIG
                title = f"broker {entity}"
            if describe_all:
                lines.append(f"All configs for {title} are:")
            elif entity == "" and entity_type == "brokers":
                lines.append("Default configs for brokers in the cluster are:")
            else:
                lines.append(f"Dynamic configs for {title} are:")
            for c in configs:
                if not describe_all and c.source != own:
                    continue
                source = SOURCES.get(c.source, "UNKNOWN")
                lines.append(
                    f"  {c.name}={c.value} sensitive=false synonyms={{{source}:{c.name}={c.value}}}"
                )
        return lines
    finally:
        await transport.close()
