"""The client requests built in one place: Metadata, Fetch and ListOffsets as a client sends
them (``replica_id`` = -1: a consumer, never a follower, so never at or above the HW).

Every client (the network client, the consumer, Spark's reader, the producer's metadata
refresher) builds these requests here, so a field added to the contract is filled once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafkasim.common.sentinels import CONSUMER_REPLICA_ID, NO_LEADER_EPOCH
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["fetch_request", "list_offsets_request", "metadata_request"]

_NO_EPOCHS: Mapping[TopicPartition, int] = {}


def metadata_request(
    topics: Sequence[str] = (), *, allow_auto_topic_creation: bool = False
) -> pb.MetadataRequest:
    """Metadata for ``topics``, or for every topic when none is named (then nothing is
    created: auto-creation applies to named topics only, as in Kafka)."""
    return pb.MetadataRequest(
        topics=list(topics),
        all_topics=not topics,
        allow_auto_topic_creation=allow_auto_topic_creation and bool(topics),
    )


def fetch_request(
    offsets: Mapping[TopicPartition, int],
    *,
    max_wait_ms: int,
    max_bytes: int,
    partition_max_bytes: int,
    min_bytes: int = 1,
    isolation_level: int = 0,
    leader_epochs: Mapping[TopicPartition, int] = _NO_EPOCHS,
) -> pb.FetchRequest:
    """A consumer's Fetch of each partition from its offset; ``leader_epochs`` fences each
    partition by the leader epoch the client knows (KIP-320), -1 where it knows none."""
    request = pb.FetchRequest(
        replica_id=CONSUMER_REPLICA_ID,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
    )
    for tp, offset in offsets.items():
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=offset,
            current_leader_epoch=leader_epochs.get(tp, NO_LEADER_EPOCH),
            partition_max_bytes=partition_max_bytes,
        )
    return request


def list_offsets_request(
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = 0,
    leader_epochs: Mapping[TopicPartition, int] = _NO_EPOCHS,
) -> pb.ListOffsetsRequest:
    """A consumer's ListOffsets: per partition a timestamp, or LATEST_TIMESTAMP (-1) /
    EARLIEST_TIMESTAMP (-2) / MAX_TIMESTAMP (-3)."""
    request = pb.ListOffsetsRequest(replica_id=CONSUMER_REPLICA_ID, isolation_level=isolation_level)
    for tp, timestamp in timestamps.items():
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            current_leader_epoch=leader_epochs.get(tp, NO_LEADER_EPOCH),
            timestamp=timestamp,
        )
    return request
