"""The fetch answer cap (Kafka's handleFetchRequest and KIP-74): whatever max_bytes a request
asks, the broker's fetch.max.bytes bounds the answer; per-partition limits are kept; the first
partition with data still returns one whole batch, however big."""

from __future__ import annotations

from pathlib import Path

from kafkasim import proto
from kafkasim.client.requests import fetch_request
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from tests.sim.helpers import create, simulate

CAP = 20_000
HUGE = 2**31 - 1
P0, P1 = TopicPartition("big", 0), TopicPartition("big", 1)


def test_a_huge_max_bytes_gets_an_answer_bounded_by_fetch_max_bytes(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "big", partitions=2, rf=1)
        for tp in (P0, P1):
            for i in range(10):  # ~40 kB per partition, in ~4 kB batches
                assert (await client.produce(tp, [bytes([i]) * 4000])).ok
        assert (await client.produce(P1, [b"x" * (3 * CAP)])).ok  # offset 10: one big batch

        async def fetch(offsets: dict[TopicPartition, int], part_max: int) -> list[int]:
            request = fetch_request(
                offsets, max_wait_ms=0, max_bytes=HUGE, partition_max_bytes=part_max
            )
            response = await client.transport.call(
                broker_address(1), proto.METHOD_FETCH, request, timeout_s=5
            )
            assert isinstance(response, pb.FetchResponse)
            assert all(p.error_code == 0 for p in response.partitions)
            return [len(p.records) for p in response.partitions]

        sizes = await fetch({P0: 0, P1: 0}, HUGE)
        assert 0 < sum(sizes) <= CAP  # uncapped, it would be ~80 kB
        assert sizes[0] > 0
        # The per-partition limit still applies under the cap.
        sizes = await fetch({P0: 0, P1: 0}, 5_000)
        assert 0 < sizes[0] <= 5_000 and 0 < sizes[1] <= 5_000
        # KIP-74: a batch bigger than the cap still comes back whole, alone.
        (size,) = await fetch({P1: 10}, HUGE)
        assert size > 3 * CAP
        result = await client.fetch(P1, 10, max_bytes=HUGE)
        assert [len(r.value or b"") for r in result.records] == [3 * CAP]

    simulate(tmp_path, scenario, brokers=1, **{"fetch.max.bytes": CAP})
