"""``kafkasim configs``: kafka-configs.sh for topics (``--entity-type topics``).

``--alter`` sends one IncrementalAlterConfigs (``--add-config`` keys are SET, ``--delete-config``
keys DELETEd) to a broker (the controller; any broker would do), which writes
``/config/topics/<t>`` and a change notification; every broker applies it to its logs without
a restart. ``--describe`` lists the topic's own overrides (Kafka's "dynamic" configs). Output
lines are Kafka's::

    Completed updating config for topic orders.
    Dynamic configs for topic orders are:
      retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}

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
from pathlib import Path
from typing import Any

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers
from kafkasim.client.admin import AdminClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.config import read_properties
from kafkasim.common.errors import InvalidConfigError, KafkaError, KafkasimError
from kafkasim.common.rpc_grpc_client import GrpcTransport

ENTITY_TYPES = ("topics",)
DYNAMIC_TOPIC_CONFIG = 1  # Kafka's DescribeConfigs ConfigSource number
# A comma outside square brackets separates two pairs (Kafka's --add-config grammar).
_PAIR_SEPARATOR = re.compile(r",(?=[^\]]*(?:\[|$))")


class ConfigCommandError(KafkasimError):
    """A config command that cannot be done as asked (Kafka's InvalidConfigurationException
    and IllegalArgumentException: the message alone is printed)."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "configs", help="describe and alter topic configs (kafka-configs)"
    )
    add_bootstrap_args(p)
    p.add_argument("--alter", action="store_true", help="alter the entity's configs")
    p.add_argument("--describe", action="store_true", help="list the entity's overrides")
    p.add_argument("--entity-type", help="the entity type: topics")
    p.add_argument("--entity-name", help="the entity: a topic name (all topics if omitted)")
    p.add_argument("--topic", help="the topic (instead of --entity-type/--entity-name)")
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
    topic = _check_args(args)
    bootstrap = bootstrap_servers(args)
    try:
        if args.alter:
            to_set = parse_add_config(args.add_config or "")
            if args.add_config_file is not None:
                to_set.update(read_properties(args.add_config_file))
            to_delete = [k.strip() for item in args.delete_config for k in item.split(",")]
            to_delete = [k for k in to_delete if k]
            asyncio.run(_alter(bootstrap, str(topic), to_set, to_delete))
            print(f"Completed updating config for topic {topic}.")
        else:
            for line in asyncio.run(_describe(bootstrap, topic)):
                print(line)
    except (ConfigCommandError, InvalidConfigError) as e:
        print(e.message if isinstance(e, KafkaError) else str(e), file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"Error while executing config command : {e.message or e}", file=sys.stderr)
        return 1
    return 0


def _check_args(args: argparse.Namespace) -> str | None:
    """The topic named (None: every topic, --describe only); ValueError naming what is
    wrong with the flags."""
    if args.alter == args.describe:
        raise ValueError("Command must include exactly one action: --describe, --alter")
    if args.topic is not None and (args.entity_type or args.entity_name):
        raise ValueError("give --topic or --entity-type with --entity-name, not both")
    if args.topic is None:
        if args.entity_type is None:
            raise ValueError("At least one entity type must be specified")
        if args.entity_type not in ENTITY_TYPES:
            raise ValueError(
                f"Invalid entity type {args.entity_type}, the entity type must be one of "
                f"{', '.join(ENTITY_TYPES)} (kafkasim has topic configs only)"
            )
    topic: str | None = args.topic if args.topic is not None else args.entity_name
    changes = args.add_config or args.add_config_file or args.delete_config
    if args.describe and changes:
        raise ValueError("--add-config and --delete-config are only valid with --alter")
    if args.alter:
        if not topic:
            raise ValueError("an entity name must be specified with --alter of topics")
        if not changes:
            raise ValueError(
                "At least one of --add-config, --add-config-file, or --delete-config must be "
                "specified with --alter"
            )
    return topic


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


async def _alter(
    bootstrap: list[str], topic: str, to_set: dict[str, str], to_delete: list[str]
) -> None:
    transport = GrpcTransport()
    try:
        admin = _admin(bootstrap, transport)
        overridden = {c.name for c in await admin.describe_configs(topic) if not c.is_default}
        missing = [k for k in to_delete if k not in overridden]
        if missing:
            raise ConfigCommandError(f"Invalid config(s): {','.join(missing)}")
        await admin.alter_topic_configs(topic, set=to_set, delete=to_delete)
    finally:
        await transport.close()


async def _describe(bootstrap: list[str], topic: str | None) -> list[str]:
    transport = GrpcTransport()
    try:
        admin = _admin(bootstrap, transport)
        topics = [topic] if topic else await admin.list_topics()
        lines: list[str] = []
        for name in topics:
            lines.append(f"Dynamic configs for topic {name} are:")
            for c in await admin.describe_configs(name):
                if c.source != DYNAMIC_TOPIC_CONFIG:
                    continue
                lines.append(
                    f"  {c.name}={c.value} sensitive=false "
                    f"synonyms={{DYNAMIC_TOPIC_CONFIG:{c.name}={c.value}}}"
                )
        return lines
    finally:
        await transport.close()
