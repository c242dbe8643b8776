"""A hostile client against a real 3-broker cluster: raw gRPC Produce requests carrying batches
damaged by hand, each with its CRC recomputed so that only record-level validation can catch
it (issue 20, item 1), plus the small bad inputs of item 8.

Every damaged request must be answered with Kafka's named error, leave the log end offset where
it was, and leave the partition readable by the project's consumer. One cluster for the module.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.rpc_grpc import GrpcTransport
from kafkasim.proto import kafkasim_pb2 as pb
from tests.cli_run import cluster_up
from tests.cli_run import kafkasim as run_kafkasim
from tests.unit.storage.records.crafted import CORRUPTIONS, good_batch

kafkasim = functools.partial(run_kafkasim, timeout=60)

TOPIC = "hostile"
COMPACTED = "hostile-compacted"
TP = TopicPartition(TOPIC, 0)
GOOD = [b"good-0", b"good-1", b"good-2"]

T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Path]]:
    """Brokers' addresses and the cluster's directory: topics ``hostile`` (3 good records) and
    ``hostile-compacted``, 1 partition, RF 3, min.insync.replicas 2."""
    root = tmp_path_factory.mktemp("hostile") / "c"
    with cluster_up(root, "--brokers", "3", timeout=120):
        state = json.loads((root / "cluster.json").read_text())
        servers = [b["address"] for b in state["brokers"]]

        async def setup(client: MinimalClient) -> None:
            for topic, configs in ((TOPIC, {}), (COMPACTED, {"cleanup.policy": "compact"})):
                await client.create_topic(topic, 1, 3, {"min.insync.replicas": "2", **configs})
                await client.wait_for_leaders(topic, 1)
            result = await client.produce(TP, GOOD, keys=GOOD)
            assert result.ok, result

        with_client(servers, setup)
        yield servers, root


def with_client(servers: list[str], body: Callable[[MinimalClient], Awaitable[T]]) -> T:
    async def run() -> T:
        transport = GrpcTransport()
        try:
            return await body(MinimalClient(transport, servers, SystemClock()))
        finally:
            await transport.close()

    return asyncio.run(run())


async def raw_produce(
    client: MinimalClient, tp: TopicPartition, records: bytes
) -> pb.ProducePartitionResponse:
    request = pb.ProduceRequest(acks=-1, timeout_ms=10_000)
    request.partitions.add(topic=tp.topic, partition=tp.partition, records=records)
    address = await client.leader_address(tp)
    response = await client.transport.call(address, proto.METHOD_PRODUCE, request, timeout_s=30)
    assert isinstance(response, pb.ProduceResponse)
    return response.partitions[0]


async def end_offset(client: MinimalClient, tp: TopicPartition) -> int:
    return (await client.list_offsets({tp: -1}))[tp][0]


def refused_and_nothing_moved(
    servers: list[str], tp: TopicPartition, records: bytes
) -> pb.ProducePartitionResponse:
    """Send ``records``; check the log end offset did not move and the partition reads back."""

    async def body(client: MinimalClient) -> pb.ProducePartitionResponse:
        before = await end_offset(client, tp)
        answer = await raw_produce(client, tp, records)
        assert await end_offset(client, tp) == before
        readable = await client.read_all(tp)
        assert len(readable) == before
        return answer

    return with_client(servers, body)


@pytest.mark.parametrize(
    ("batch", "error", "match"), [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS]
)
def test_a_damaged_batch_is_refused_by_name_and_stores_nothing(
    cluster: tuple[list[str], Path], batch: bytes, error: str, match: str
) -> None:
    answer = refused_and_nothing_moved(cluster[0], TP, batch)
    assert answer.error_code == error_for_name(error).code, answer
    assert match in answer.error_message
    assert (
        answer.error_message.startswith(f"{TP}: ") and "batch at position 0" in answer.error_message
    )


def test_an_empty_records_field_is_invalid_record(cluster: tuple[list[str], Path]) -> None:
    answer = refused_and_nothing_moved(cluster[0], TP, b"")
    assert answer.error_code == error_for_name("INVALID_RECORD").code
    assert "at least one record batch per partition" in answer.error_message


def test_two_batches_for_one_partition_are_invalid_record(cluster: tuple[list[str], Path]) -> None:
    answer = refused_and_nothing_moved(cluster[0], TP, good_batch(1) + good_batch(1))
    assert answer.error_code == error_for_name("INVALID_RECORD").code
    assert "exactly one record batch per partition" in answer.error_message


def test_a_compacted_topic_refuses_a_record_without_key(cluster: tuple[list[str], Path]) -> None:
    tp = TopicPartition(COMPACTED, 0)
    answer = refused_and_nothing_moved(cluster[0], tp, good_batch(3, keys=[b"a", b"b", None]))
    assert answer.error_code == error_for_name("INVALID_RECORD").code
    assert "record 2: compacted topic cannot accept message without key" in answer.error_message


def test_special_list_offsets_timestamps(cluster: tuple[list[str], Path]) -> None:
    """-4 (EARLIEST_LOCAL, KIP-405) is the log start offset without tiered storage, -3
    (MAX_TIMESTAMP) the record with the largest timestamp, an unknown one a named error."""

    async def body(client: MinimalClient) -> dict[int, pb.ListOffsetsPartitionResponse]:
        await client.refresh_metadata([TOPIC])
        request = pb.ListOffsetsRequest(replica_id=-1)
        for timestamp in (-4, -3, -6):
            request.partitions.add(
                topic=TOPIC, partition=0, current_leader_epoch=-1, timestamp=timestamp
            )
        address = await client.leader_address(TP)
        response = await client.transport.call(
            address, proto.METHOD_LIST_OFFSETS, request, timeout_s=30
        )
        assert isinstance(response, pb.ListOffsetsResponse)
        return dict(zip((-4, -3, -6), response.partitions, strict=True))

    answers = with_client(cluster[0], body)
    assert (answers[-4].error_code, answers[-4].offset) == (0, 0)
    assert answers[-3].error_code == 0 and answers[-3].offset == 0
    assert answers[-3].timestamp > 0
    assert answers[-6].error_code == error_for_name("INVALID_REQUEST").code


def test_the_console_consumer_reads_the_partition_and_no_broker_logged_a_traceback(
    cluster: tuple[list[str], Path],
) -> None:
    """Runs after the hostile requests (pytest keeps the file's order)."""
    servers, root = cluster
    out = kafkasim(
        "console-consumer",
        "--bootstrap-server",
        ",".join(servers),
        "--topic",
        TOPIC,
        "--from-beginning",
        "--max-messages",
        str(len(GOOD)),
        "--timeout-ms",
        "10000",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [v.decode() for v in GOOD]
    for log in root.rglob("broker.log"):
        assert "Traceback" not in log.read_text(errors="replace"), log
