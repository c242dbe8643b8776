"""Pure planning of reads: offset ranges, their split over Spark tasks, and admission control.

Values in, values out: no IO, no clock. The driver resolves offsets with the cluster
(:mod:`spark.cluster_io`) and then calls these.

* :func:`split_ranges` is ``minPartitions``: with fewer ranges than asked for, the pieces are
  dealt out in proportion to each range's share of all offsets (at least one each, floors
  first, then the largest remainders), so that there are exactly ``minPartitions`` of them
  unless ranges are too small to cut; each range is cut into near-equal contiguous pieces.
* :func:`rate_limit` is ``maxOffsetsPerTrigger``: the allowance is divided among partitions in
  proportion to their backlog (floors first, then one more to the largest remainders), so
  the micro-batch reads exactly ``min(limit, backlog)`` offsets and always makes progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkasim.common.types import TopicPartition


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition; never empty."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if not 0 <= self.from_offset < self.until_offset:
            raise ValueError(f"an offset range must be non-empty and non-negative: {self}")

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


class OffsetRangeError(ValueError):
    """A start offset lies past its end offset."""


def offset_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """One range per partition of ``end`` with something to read. Both maps hold resolved,
    absolute offsets; a partition missing from ``start`` is an error (the caller resolves
    new partitions first)."""
    out: list[OffsetRange] = []
    for tp in sorted(end):
        first, last = start[tp], end[tp]
        if first > last:
            raise OffsetRangeError(
                f"starting offset {first} of {tp} is past its ending offset {last}"
            )
        if first < last:
            out.append(OffsetRange(tp.topic, tp.partition, first, last))
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges where there are that many offsets (see module doc)."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    shares = [r.size * min_partitions / total for r in ranges]
    counts = [min(max(int(share), 1), r.size) for share, r in zip(shares, ranges, strict=True)]
    # The pieces still missing go to the largest remainders (ties: the earlier range).
    order = sorted(range(len(ranges)), key=lambda i: (counts[i] - shares[i], i))
    for i in order[: max(min_partitions - sum(counts), 0)]:
        counts[i] = min(counts[i] + 1, ranges[i].size)
    out: list[OffsetRange] = []
    for r, pieces in zip(ranges, counts, strict=True):
        step, extra = divmod(r.size, pieces)
        first = r.from_offset
        for i in range(pieces):
            until = first + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, first, until))
            first = until
        assert first == r.until_offset, (r, pieces)
    return out


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """End offsets reading at most ``max_offsets`` offsets in all past ``start``."""
    if max_offsets <= 0:
        raise ValueError(f"max_offsets must be positive, got {max_offsets}")
    backlog = {tp: max(latest[tp] - start[tp], 0) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: size * max_offsets / total for tp, size in backlog.items()}
    granted = {tp: int(share) for tp, share in shares.items()}
    left = max_offsets - sum(granted.values())
    # Largest remainders first; ties by partition so that the plan is deterministic.
    for tp in sorted(shares, key=lambda t: (granted[t] - shares[t], t))[:left]:
        granted[tp] += 1
    return {tp: start[tp] + granted[tp] for tp in latest}
