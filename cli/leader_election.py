"""``kafkasim leader-election``: kafka-leader-election.sh.

``--election-type preferred`` moves leadership back to each partition's first replica (when
it is alive and in the ISR); ``unclean`` lets an out-of-sync replica lead an offline
partition. Output is Kafka's: one line for the partitions that got a new leader, one for
those whose leader was already right, one per failure; any failure exits 1 with
``N replica(s) could not be elected``. The partitions are ``--all-topic-partitions``,
``--topic`` with ``--partition``, or Kafka's ``--path-to-json-file``::

    {"partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.client.admin import AdminClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import ElectionNotNeededError, KafkaError
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "leader-election", help="elect preferred (or unclean) leaders (kafka-leader-election)"
    )
    add_bootstrap_args(p)
    p.add_argument(
        "--election-type",
        required=True,
        type=str.lower,
        choices=("preferred", "unclean"),
        help="PREFERRED or UNCLEAN",
    )
    p.add_argument("--all-topic-partitions", action="store_true", help="elect for every partition")
    p.add_argument("--topic", help="the topic of the partition to elect for")
    p.add_argument("--partition", type=int, help="the partition to elect for (with --topic)")
    p.add_argument(
        "--path-to-json-file",
        type=Path,
        metavar="FILE",
        help='the partitions, as {"partitions": [{"topic": "t", "partition": 0}, ...]}',
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    single = args.topic is not None or args.partition is not None
    given = [args.all_topic_partitions, single, args.path_to_json_file is not None]
    if sum(given) != 1:
        raise ValueError(
            "exactly one of --all-topic-partitions, --topic with --partition or "
            "--path-to-json-file must be given"
        )
    if single and (args.topic is None or args.partition is None):
        raise ValueError("--topic and --partition must be given together")
    partitions: list[TopicPartition] | None = None
    if args.path_to_json_file is not None:
        partitions = read_partitions(args.path_to_json_file)
    elif single:
        partitions = [TopicPartition(args.topic, args.partition)]
    bootstrap = bootstrap_servers(args)
    results = asyncio.run(
        _elect(bootstrap, args.election_type == "preferred", partitions, security_properties(args))
    )
    kind = args.election_type.upper()
    elected = [tp for tp, error in results.items() if error is None]
    noop = [tp for tp, error in results.items() if isinstance(error, ElectionNotNeededError)]
    failed = {
        tp: error
        for tp, error in results.items()
        if error is not None and not isinstance(error, ElectionNotNeededError)
    }
    if elected:
        print(f"Successfully completed leader election ({kind}) for partitions {_tps(elected)}")
    if noop:
        print(f"Valid replica already elected for partitions {_tps(noop)}")
    for tp, error in sorted(failed.items()):
        print(f"Error completing leader election ({kind}) for partition: {tp}: {error}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


async def _elect(
    bootstrap: list[str],
    preferred: bool,
    partitions: list[TopicPartition] | None,
    security: Mapping[str, object] | None = None,
) -> dict[TopicPartition, KafkaError | None]:
    transport = client_transport(security or {})
    try:
        admin = AdminClient(bootstrap, transport=transport, clock=SystemClock())
        return await admin.elect_leaders(preferred, partitions)
    finally:
        await transport.close()


def read_partitions(path: Path) -> list[TopicPartition]:
    """The partitions of Kafka's election JSON file; ValueError naming what is wrong (not
    JSON, no ``partitions`` list, an entry without a string topic and an integer partition,
    a partition listed twice)."""
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ...}}]}}')
    partitions: list[TopicPartition] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        number = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(number, int) or isinstance(number, bool):
            raise ValueError(
                f"{path}: each partition needs a string topic and an integer "
                f"partition, got {json.dumps(entry)}"
            )
        partitions.append(TopicPartition(topic, number))
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise ValueError(f"Replica election data contains duplicate partitions: {_tps(duplicates)}")
    return partitions


def _tps(tps: list[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(tps))
