"""``kafkasim delete-records``: kafka-delete-records.sh.

Reads Kafka's offset JSON file (``{"partitions":[{"topic":"t","partition":0,"offset":5}],
"version":1}``; offset -1 means the high watermark), deletes the records below each offset
(each partition's leader moves its log start offset and answers once every live replica has
followed) and prints Kafka's lines::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 5
    partition: t-1	error: <message>

As Kafka's tool, a failed partition is reported on its line and the exit status stays 0; a
missing or malformed file, or a duplicate partition, is one line on stderr and exit 1 before
anything is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.client.admin import AdminClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import KafkaError, KafkasimError
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition

SUPPORTED_VERSIONS = (1,)


class OffsetJsonError(KafkasimError):
    """The offset JSON file is missing, not JSON, or not in Kafka's format."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "delete-records",
        help="delete records below given offsets (kafka-delete-records)",
    )
    add_bootstrap_args(p)
    p.add_argument(
        "--offset-json-file",
        required=True,
        type=Path,
        metavar="FILE",
        help='offsets per partition: {"partitions":[{"topic":"t","partition":0,"offset":5}],'
        '"version":1} (offset -1: the high watermark)',
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    offsets = parse_offset_json(read_offset_json(args.offset_json_file))
    bootstrap = bootstrap_servers(args)
    print("Executing records delete operation", flush=True)
    results = asyncio.run(_delete(bootstrap, offsets, security_properties(args)))
    print("Records delete operation completed:")
    for tp in offsets:
        result = results[tp]
        if isinstance(result, KafkaError):
            print(f"partition: {tp}\terror: {result.message or result.error_name}")
        else:
            print(f"partition: {tp}\tlow_watermark: {result}")
    return 0


def read_offset_json(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise OffsetJsonError(f"cannot read the offset JSON file {path}: {e.strerror}") from None


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """Kafka's offset JSON (version 1; a missing version means 1), in file order; an
    OffsetJsonError naming what is wrong otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise OffsetJsonError(f"the offset JSON file is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise OffsetJsonError("the offset JSON file must hold a JSON object")
    version = data.get("version", 1)
    if version not in SUPPORTED_VERSIONS:
        raise OffsetJsonError(f"Not supported version field value {version}")
    partitions = data.get("partitions")
    if not isinstance(partitions, list):
        raise OffsetJsonError('the offset JSON file has no "partitions" list')
    offsets: dict[TopicPartition, int] = {}
    duplicates: list[str] = []
    for i, entry in enumerate(partitions):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        offset = entry.get("offset") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not _is_int(partition) or not _is_int(offset):
            raise OffsetJsonError(
                f'partitions[{i}] must be {{"topic": string, "partition": integer, '
                f'"offset": integer}}, got {json.dumps(entry)}'
            )
        tp = TopicPartition(topic, partition)
        if tp in offsets:
            duplicates.append(str(tp))
        offsets[tp] = offset
    if duplicates:
        raise OffsetJsonError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    if not offsets:
        raise OffsetJsonError("the offset JSON file lists no partitions")
    return offsets


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


async def _delete(
    bootstrap: list[str],
    offsets: dict[TopicPartition, int],
    security: Mapping[str, object] | None = None,
) -> dict[TopicPartition, int | KafkaError]:
    transport = client_transport(security or {})
    try:
        admin = AdminClient(bootstrap, transport=transport, clock=SystemClock())
        return await admin.delete_records_results(offsets)
    finally:
        await transport.close()
