"""Where the transaction coordinator sends a marker (``MetadataCache.marker_leader``): a
partition the cache does not know is a deleted one (its markers are skipped, as Kafka's
TransactionMarkerChannelManager skips partitions without a leader endpoint) only once the
controller has told this broker about the cluster. Before that, a restarted broker's cache
knows no partition at all, and a coordinator that took over then must wait for the leaders,
not drop the markers of committed transactions (tests/sim/test_swept_seeds.py,
txn-leader-crash seed 8)."""

from __future__ import annotations

import asyncio

from kafkasim.common.types import TopicPartition
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.proto import kafkasim_pb2 as pb

TP = TopicPartition("shipped", 0)


def _update(cache: MetadataCache, *partitions: pb.PartitionState) -> None:
    cache.update(
        pb.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            live_brokers=[pb.BrokerEndpoint(node_id=b, host="h", port=b) for b in (1, 2, 3)],
            partition_states=list(partitions),
        )
    )


def test_an_unknown_partition_has_no_leader_yet_until_the_cache_is_ready_then_it_is_gone() -> None:
    async def main() -> list[int | None]:
        cache = MetadataCache(2)
        seen = [cache.marker_leader(TP)]  # nothing heard from the controller yet
        _update(cache, pb.PartitionState(topic=TP.topic, partition=0, leader=3))
        seen.append(cache.marker_leader(TP))
        seen.append(cache.marker_leader(TopicPartition("deleted", 0)))
        return seen

    assert asyncio.run(main()) == [-1, 3, None]
