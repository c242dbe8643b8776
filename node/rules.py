"""Replication rules a broker runs by, injected (``Broker`` → ``ReplicaManager`` → ``Partition``,
``ReplicaFetcherManager`` → ``ReplicaFetcher``) instead of read from module globals.

The default is Kafka's behaviour. Each switch, when on, breaks one rule on purpose — a known
Kafka bug, or the anomaly a transactional bug would cause — so that the failure-search tests can
show that a scenario or a sweep (and the history checker) catches what it causes: the
simulation takes the rules as a parameter (``sim.cluster.SimCluster(rules=...)``,
``sim.backend.sim_backend(rules)``). Real brokers always run the defaults.

The two transaction switches act on a consumer's read_committed fetch only (``consumer_read``,
called by ``ReplicaManager`` for every consumer fetch); replicas and read_uncommitted consumers
read as always.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kafkasim.storage.log import FetchIsolation, Log
from kafkasim.storage.segment import FetchDataInfo


@dataclass(frozen=True, slots=True)
class ReplicationRules:
    """``hw_ignores_followers``: the leader moves its high watermark to its own log end offset
    without waiting for the ISR, so acks=all acknowledges records no follower has.
    ``truncate_to_high_watermark``: a new follower truncates to its own high watermark (the
    pre-KIP-101 rule) instead of to the leader-epoch boundary, which loses acknowledged records
    when the HW it holds lags the leader's (KIP-101's two cases).
    ``lso_ignores_open_transactions``: a read_committed fetch reads up to the high watermark,
    as if the last stable offset ran ahead of every open transaction, so consumers see records
    of transactions not yet committed (Jepsen's G1b, intermediate reads).
    ``skip_aborted_transactions``: a read_committed fetch answers no aborted transactions, so
    consumers keep the records of aborted ones (G1a, aborted reads).
    ``isr_admits_lagging_followers``: the leader's ISR maintenance takes a follower back into
    the ISR on its first fetch, without checking that it has reached the high watermark (Kafka
    requires its log end offset at or past both the HW and the start of the leader's epoch),
    so a lagging replica counts as in sync and may be elected leader without records that
    acks=all acknowledged."""

    hw_ignores_followers: bool = False
    truncate_to_high_watermark: bool = False
    lso_ignores_open_transactions: bool = False
    skip_aborted_transactions: bool = False
    isr_admits_lagging_followers: bool = False


KAFKA_RULES = ReplicationRules()


def consumer_read(
    log: Log,
    fetch_offset: int,
    max_bytes: int,
    *,
    min_one_message: bool,
    isolation: FetchIsolation,
    rules: ReplicationRules,
) -> tuple[FetchDataInfo, int]:
    """A fetch's read of ``log`` (``Log.read``) and the last stable offset to answer, under
    ``rules`` (see the class)."""
    if isolation is not FetchIsolation.TXN_COMMITTED or rules == KAFKA_RULES:
        info = log.read(
            fetch_offset, max_bytes, min_one_message=min_one_message, isolation=isolation
        )
        return info, log.last_stable_offset
    last_stable = log.last_stable_offset
    if rules.lso_ignores_open_transactions:
        last_stable = log.high_watermark
        info = log.read(
            fetch_offset,
            max_bytes,
            min_one_message=min_one_message,
            isolation=FetchIsolation.HIGH_WATERMARK,
        )
        aborted = log.collect_aborted_txns(fetch_offset, last_stable)
        info = dataclasses.replace(info, aborted_transactions=tuple(aborted))
    else:
        info = log.read(
            fetch_offset, max_bytes, min_one_message=min_one_message, isolation=isolation
        )
    if rules.skip_aborted_transactions:
        info = dataclasses.replace(info, aborted_transactions=())
    return info, last_stable
