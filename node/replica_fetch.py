"""Fetch on a partition leader (Kafka's ``ReplicaManager.fetchMessages`` and its DelayedFetch):
one read of every partition asked, and the long-poll that parks a fetch until it can answer.

A read answers each partition from its leader's log: a follower (replica id ≥ 0) anything up to
the log end, a consumer up to the HW, a read_committed consumer up to the last stable offset
with the aborted transactions of what it read. A follower's fetch is recorded (its log end,
the time; the ISR may grow from it). The whole answer is bounded by ``fetch.max.bytes``, the
first partition with data still returning one whole batch (KIP-74).

A parked fetch is woken only by what can answer it (``Partition.watch_data``): a follower's by
the log end moving, a consumer's by the HW, a read_committed one's by either; a new leader
epoch, a new log start or losing leadership wake every fetch. It then reads again, until
``min_bytes`` are there, an error, nothing left to wait on, or ``max_wait_ms`` passes.

The replica manager (``node.replica_manager``) owns the partitions and calls in here; every
partition answers its own Kafka error, nothing raises into the transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from kafkasim.common.errors import KafkaError, NotLeaderOrFollowerError
from kafkasim.common.types import TopicPartition
from kafkasim.node.partition import (
    WAKE_ON_ANY,
    WAKE_ON_HIGH_WATERMARK,
    WAKE_ON_LOG_END,
    Partition,
)
from kafkasim.node.replica_types import (
    READ_COMMITTED,
    AbortedTransaction,
    FetchParams,
    FetchPartitionData,
)
from kafkasim.node.rules import ReplicationRules, consumer_read
from kafkasim.storage.log import FetchIsolation
from kafkasim.storage.txn_index import AbortedTxn

# One read's answers, their bytes, and what wakes the fetch if it parks (None: nothing to wait
# on: every partition answered data or an error).
ReadOnce = tuple[list[FetchPartitionData], int, asyncio.Future[None] | None]


def fetch_isolation(replica_id: int, isolation_level: int) -> FetchIsolation:
    """How far a fetch or ListOffsets may read (Kafka's ``FetchIsolation.of``): a replica
    (id ≥ 0) to the log end, a consumer to the HW, or to the LSO with read_committed."""
    if replica_id >= 0:
        return FetchIsolation.LOG_END
    if isolation_level == READ_COMMITTED:
        return FetchIsolation.TXN_COMMITTED
    return FetchIsolation.HIGH_WATERMARK


def _wake_on(isolation: FetchIsolation) -> int:
    """What a parked fetch waits for, by how far it reads (Kafka's DelayedFetch): a replica the
    log end, a consumer the HW, a read_committed consumer the LSO (which moves with either).
    Tested by identity: an Enum's hash (a dict's key) is a Python call, and every read asks."""
    if isolation is FetchIsolation.LOG_END:
        return WAKE_ON_LOG_END
    if isolation is FetchIsolation.HIGH_WATERMARK:
        return WAKE_ON_HIGH_WATERMARK
    return WAKE_ON_ANY


def _expire(woken: asyncio.Future[None]) -> None:
    """A parked fetch's max wait is over: it reads once more and answers."""
    if not woken.done():
        woken.set_result(None)


def _aborted(found: Sequence[AbortedTxn] | None) -> tuple[AbortedTransaction, ...] | None:
    """A read's aborted transactions as a fetch answers them (None: not a read_committed
    read)."""
    if found is None:
        return None
    return tuple(AbortedTransaction(t.producer_id, t.first_offset) for t in found)


async def long_poll(
    params: FetchParams,
    max_bytes: int,
    monotonic_ms: Callable[[], int],
    read_once: Callable[[FetchParams, int], ReadOnce],
) -> list[FetchPartitionData]:
    """Read with ``read_once`` until ``min_bytes`` (at most ``max_bytes``) are there, a
    partition answers an error, nothing is left to wait on, or ``max_wait_ms`` has passed;
    between reads, park until a partition that had nothing may have something."""
    deadline = monotonic_ms() + max(params.max_wait_ms, 0)
    min_bytes = max(min(params.min_bytes, max_bytes), 1)
    while True:
        results, total, woken = read_once(params, max_bytes)
        remaining = deadline - monotonic_ms()
        if (
            woken is None
            or total >= min_bytes
            or remaining <= 0
            or any(r.error is not None for r in results)
        ):
            if woken is not None:
                woken.cancel()  # left in the partitions' watch lists: dropped there
            return results
        timer = woken.get_loop().call_later(remaining / 1000, _expire, woken)
        try:
            await woken
        finally:
            timer.cancel()


def read_partitions(
    params: FetchParams,
    max_bytes: int,
    *,
    now_ms: int,
    leader_partition: Callable[[TopicPartition, int], Partition],
    hosted: Mapping[TopicPartition, Partition],
    rules: ReplicationRules,
    expand_isr: Callable[[Partition], None],
    kafka_error: Callable[[BaseException], KafkaError],
) -> ReadOnce:
    """One read of every partition of ``params`` (see the module doc); ``leader_partition``
    raises the partition's error where this broker does not lead it at the epoch asked.

    A follower's fetch is recorded at every read, also the one after a wake-up, at the later
    time (Kafka's DelayedFetch records it only on arrival). Kept so: recording it once moved
    the recorded sweeps' findings (``tests/sim/test_sweeps_find_bugs.py``'s lagging-follower
    switch left its seed bound)."""
    is_follower = params.is_from_follower
    isolation = fetch_isolation(params.replica_id, params.isolation_level)
    wake_on = _wake_on(isolation)
    results: list[FetchPartitionData] = []
    total = 0
    woken: asyncio.Future[None] | None = None
    budget = max_bytes
    for part in params.partitions:
        tp = part.tp
        try:
            partition = leader_partition(tp, part.current_leader_epoch)
            log = partition.log
            if is_follower:
                if params.replica_id not in partition.assigned_replicas:
                    raise NotLeaderOrFollowerError(
                        f"broker {params.replica_id} is not a replica of {tp}"
                    )
                partition.record_follower_fetch(
                    params.replica_id, part.fetch_offset, now_ms, part.log_start_offset
                )
                expand_isr(partition)
            limit = min(part.partition_max_bytes or budget, budget)
            info, last_stable = consumer_read(
                log,
                part.fetch_offset,
                max(limit, 0),
                min_one_message=total == 0,
                isolation=isolation,
                rules=rules,
            )
            size = len(info.records)
            total += size
            budget -= size
            results.append(
                FetchPartitionData(
                    tp,
                    high_watermark=partition.high_watermark,
                    last_stable_offset=last_stable,
                    log_start_offset=log.log_start_offset,
                    records=info.records,
                    aborted_transactions=_aborted(info.aborted_transactions),
                )
            )
            if not info.records:
                if woken is None:
                    woken = asyncio.get_running_loop().create_future()
                partition.watch_data(woken, wake_on)
        except Exception as e:
            known = hosted.get(tp)
            results.append(
                FetchPartitionData(
                    tp,
                    kafka_error(e),
                    high_watermark=-1 if known is None else known.high_watermark,
                    log_start_offset=-1 if known is None else known.log.log_start_offset,
                )
            )
    return results, total, woken
