"""Replication rules a broker runs by, injected (``Broker`` → ``ReplicaManager`` → ``Partition``,
``ReplicaFetcherManager`` → ``ReplicaFetcher``) instead of read from module globals.

The default is Kafka's behaviour. Each switch, when on, reproduces a known Kafka bug, so that the
failure-search tests can show that a scenario or a sweep catches the data loss it causes: the
simulation takes the rules as a parameter (``sim.cluster.SimCluster(rules=...)``,
``sim.backend.sim_backend(rules)``). Real brokers always run the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicationRules:
    """``hw_ignores_followers``: the leader moves its high watermark to its own log end offset
    without waiting for the ISR, so acks=all acknowledges records no follower has.
    ``truncate_to_high_watermark``: a new follower truncates to its own high watermark (the
    pre-KIP-101 rule) instead of to the leader-epoch boundary, which loses acknowledged records
    when the HW it holds lags the leader's (KIP-101's two cases)."""

    hw_ignores_followers: bool = False
    truncate_to_high_watermark: bool = False


KAFKA_RULES = ReplicationRules()
