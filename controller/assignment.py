"""Replica assignment: which brokers hold the replicas of each partition (pure).

Kafka's rack-unaware placement (``AdminUtils.assignReplicasToBrokers``), with the same two
goals and the same arithmetic, so that a topic created here lands on the same brokers as it
would in Kafka for the same start index and shift:

1. spread the replicas evenly over the brokers;
2. spread the followers of the partitions a broker leads over the other brokers.

Theory of operation, for ``n`` brokers (in the order given; callers pass them sorted by id):

* the first replica of partition ``p`` is ``brokers[(start_index + p) % n]``;
* the follower ``j`` (0-based) of partition ``p`` sits ``1 + (shift_p + j) % (n - 1)`` places
  after the first replica, wrapping around, where ``shift_p`` starts at ``next_replica_shift``
  and grows by one every time ``p`` reaches a multiple of ``n`` (after the first partition
  assigned). The follower offsets of one partition are distinct and never 0, so a partition
  never holds the same broker twice.

``start_index`` and ``next_replica_shift`` are random in Kafka (``rand.nextInt(n)``); here they
are arguments, and :func:`random_start` draws them from a ``random.Random`` the caller passes.

Validation raises Kafka's errors with Kafka's messages: INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from kafkasim.common.errors import error_for_name

InvalidPartitionsError = error_for_name("INVALID_PARTITIONS")
InvalidReplicationFactorError = error_for_name("INVALID_REPLICATION_FACTOR")
InvalidReplicaAssignmentError = error_for_name("INVALID_REPLICA_ASSIGNMENT")

Assignment = dict[int, list[int]]
"""partition id → replicas in preference order (the first is the preferred leader)."""


def random_start(rng: random.Random, n_brokers: int) -> tuple[int, int]:
    """Kafka's random ``(start_index, next_replica_shift)``, each in ``[0, n_brokers)``."""
    if n_brokers <= 0:
        raise InvalidReplicationFactorError("There are no brokers to assign replicas to.")
    start_index = rng.randrange(n_brokers)
    next_replica_shift = rng.randrange(n_brokers)
    return start_index, next_replica_shift


def _follower_index(first_index: int, shift: int, follower: int, n_brokers: int) -> int:
    return (first_index + 1 + (shift + follower) % (n_brokers - 1)) % n_brokers


def assign_replicas_to_brokers(
    broker_ids: Sequence[int],
    n_partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    next_replica_shift: int,
    start_partition_id: int = 0,
) -> Assignment:
    """Assign ``n_partitions`` partitions, numbered from ``start_partition_id``.

    ``broker_ids`` is used in the order given (Kafka sorts them by id first). Raises
    INVALID_PARTITIONS when ``n_partitions <= 0`` and INVALID_REPLICATION_FACTOR when the
    factor is not positive or exceeds the number of brokers.
    """
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    n = len(broker_ids)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    if not 0 <= start_index < n or next_replica_shift < 0:
        raise ValueError(
            f"start_index {start_index} and next_replica_shift {next_replica_shift} "
            f"must lie in [0, {n})"
        )
    result: Assignment = {}
    shift = next_replica_shift
    partition = max(0, start_partition_id)
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [broker_ids[first]]
        replicas.extend(
            broker_ids[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)
        )
        result[partition] = replicas
        partition += 1
    return result


def assign_new_topic(
    broker_ids: Sequence[int], n_partitions: int, replication_factor: int, rng: random.Random
) -> Assignment:
    """A new topic's assignment with Kafka's random start and shift drawn from ``rng``.

    Brokers are sorted by id first, as Kafka's ``getBrokerMetadatas`` does.
    """
    brokers = sorted(broker_ids)
    if replication_factor > len(brokers) or not brokers:
        # Validate before drawing, so that the error names the factor and not the draw.
        assign_replicas_to_brokers(
            brokers, n_partitions, replication_factor, start_index=0, next_replica_shift=0
        )
    start_index, shift = random_start(rng, len(brokers))
    return assign_replicas_to_brokers(
        brokers,
        n_partitions,
        replication_factor,
        start_index=start_index,
        next_replica_shift=shift,
    )


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_broker_ids: Sequence[int] | set[int] | frozenset[int],
    *,
    expected_replication_factor: int | None = None,
    first_partition_id: int = 0,
) -> None:
    """Check a user-given assignment; INVALID_REPLICA_ASSIGNMENT naming what is wrong.

    Rules (Kafka's ``validateTopicCreate`` and ``validateReplicaAssignment``): every partition
    has at least one replica, no broker twice, only registered brokers, the same replication
    factor everywhere (``expected_replication_factor`` when adding partitions: partition 0's),
    and partition ids consecutive from ``first_partition_id``.
    """
    if not assignment:
        raise InvalidReplicaAssignmentError("The replica assignment is empty.")
    known = set(live_broker_ids)
    for partition in sorted(assignment):
        replicas = list(assignment[partition])
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}."
            )
        if len(replicas) != len(set(replicas)):
            raise InvalidReplicaAssignmentError(
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}."
            )
        unknown = [b for b in replicas if b not in known]
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {', '.join(map(str, replicas))}, "
                f"available brokers: {', '.join(map(str, sorted(known)))}."
            )
    factors = {p: len(r) for p, r in assignment.items()}
    expected = expected_replication_factor
    if expected is None:
        if len(set(factors.values())) != 1:
            raise InvalidReplicaAssignmentError(
                "All partitions should have the same number of replicas"
            )
    else:
        bad = sorted(p for p, rf in factors.items() if rf != expected)
        if bad:
            raise InvalidReplicaAssignmentError(
                "Inconsistent replication factor between partitions, partition 0 has "
                f"{expected} while partitions [{', '.join(map(str, bad))}] have replication "
                f"factors [{', '.join(str(factors[p]) for p in bad)}], respectively."
            )
    wanted = list(range(first_partition_id, first_partition_id + len(assignment)))
    if sorted(assignment) != wanted:
        raise InvalidReplicaAssignmentError(
            "partitions should be a consecutive 0-based integer sequence"
            if first_partition_id == 0
            else f"partitions should be a consecutive integer sequence from {first_partition_id}"
        )


def add_partitions(
    topic: str,
    existing: Mapping[int, Sequence[int]],
    broker_ids: Sequence[int],
    new_partition_count: int,
    manual: Sequence[Sequence[int]] | None = None,
) -> Assignment:
    """The assignment of the partitions added to grow ``topic`` to ``new_partition_count``.

    Existing partitions keep their replicas (they are not in the result). Without a manual
    assignment the new ones follow Kafka's ``createNewPartitionsAssignment``: the replication
    factor is partition 0's, and the start index and shift are both the position of the first
    broker (sorted by id) whose id is >= partition 0's preferred leader, so that the round robin
    continues rather than restarts. Raises INVALID_PARTITIONS when the count does not grow,
    INVALID_REPLICA_ASSIGNMENT for a bad manual assignment, INVALID_REPLICATION_FACTOR when
    partition 0's factor exceeds the brokers.
    """
    if 0 not in existing:
        raise InvalidReplicaAssignmentError(
            f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is "
            f"missing. Assignment: {dict(existing)}"
        )
    current = len(existing)
    to_add = new_partition_count - current
    if to_add <= 0:
        raise InvalidPartitionsError(
            "The number of partitions for a topic can only be increased. "
            f"Topic {topic} currently has {current} partitions, {new_partition_count} would "
            "not be an increase."
        )
    replication_factor = len(existing[0])
    brokers = sorted(broker_ids)
    if manual is not None:
        if len(manual) != to_add:
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {to_add} but {len(manual)} "
                "assignments provided."
            )
        proposed = {current + i: list(r) for i, r in enumerate(manual)}
        validate_manual_assignment(
            proposed,
            brokers,
            expected_replication_factor=replication_factor,
            first_partition_id=current,
        )
        return proposed
    preferred = existing[0][0]
    start_index = next((i for i, b in enumerate(brokers) if b >= preferred), 0)
    return assign_replicas_to_brokers(
        brokers,
        to_add,
        replication_factor,
        start_index=start_index,
        next_replica_shift=start_index,
        start_partition_id=current,
    )
