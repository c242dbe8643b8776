"""Replica assignment: Kafka's round robin with a shifted start, exactly, and its validation
errors (names and messages as Kafka's AdminUtils / AdminZkClient raise them)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import KafkaError
from kafkasim.controller.assignment import (
    add_partitions,
    assign_new_topic,
    assign_replicas_to_brokers,
    random_start,
    validate_manual_assignment,
)

# Kafka's AdminUtilsTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, fixed start 0.
# It is also the table in AdminUtils' doc comment (broker-0 .. broker-4, p0 .. p9).
KAFKA_DOC_EXAMPLE = {
    0: [0, 1, 2],
    1: [1, 2, 3],
    2: [2, 3, 4],
    3: [3, 4, 0],
    4: [4, 0, 1],
    5: [0, 2, 3],
    6: [1, 3, 4],
    7: [2, 4, 0],
    8: [3, 0, 1],
    9: [4, 1, 2],
}


def test_matches_kafkas_documented_example() -> None:
    """The same inputs must put replicas where Kafka puts them."""
    got = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, start_index=0, next_replica_shift=0)
    assert got == KAFKA_DOC_EXAMPLE


@pytest.mark.parametrize(
    ("brokers", "n", "rf", "start", "shift", "first_id", "expected"),
    [
        # Worked by hand from the rule: first = (p + start) % n, follower j at
        # 1 + (shift_p + j) % (n - 1) places after it; shift_p grows at multiples of n.
        (
            [0, 1, 2],
            6,
            3,
            2,
            1,
            0,
            {0: [2, 1, 0], 1: [0, 2, 1], 2: [1, 0, 2], 3: [2, 0, 1], 4: [0, 1, 2], 5: [1, 2, 0]},
        ),
        # Broker ids are positions in the list, not the ids themselves.
        ([10, 20, 30], 3, 2, 0, 0, 0, {0: [10, 20], 1: [20, 30], 2: [30, 10]}),
        # RF 1 never needs a follower offset (n - 1 may be 0).
        ([7], 3, 1, 0, 0, 0, {0: [7], 1: [7], 2: [7]}),
        # Numbering from a later partition (adding partitions): the shift only grows at
        # multiples of n met after the first assigned partition.
        ([0, 1, 2, 3], 2, 2, 0, 0, 1, {1: [1, 2], 2: [2, 3]}),
        ([0, 1, 2], 2, 2, 0, 0, 2, {2: [2, 0], 3: [0, 2]}),
    ],
)
def test_hand_computed_assignments(
    *,
    brokers: list[int],
    n: int,
    rf: int,
    start: int,
    shift: int,
    first_id: int,
    expected: dict[int, list[int]],
) -> None:
    got = assign_replicas_to_brokers(
        brokers, n, rf, start_index=start, next_replica_shift=shift, start_partition_id=first_id
    )
    assert got == expected


@pytest.mark.parametrize(
    ("n_brokers", "n", "rf", "error", "message"),
    [
        (
            3,
            1,
            4,
            "INVALID_REPLICATION_FACTOR",
            "Replication factor: 4 larger than available brokers: 3.",
        ),
        (3, 1, 0, "INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."),
        (3, 1, -2, "INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."),
        (
            0,
            1,
            1,
            "INVALID_REPLICATION_FACTOR",
            "Replication factor: 1 larger than available brokers: 0.",
        ),
        (3, 0, 1, "INVALID_PARTITIONS", "Number of partitions must be larger than 0."),
        (3, -5, 1, "INVALID_PARTITIONS", "Number of partitions must be larger than 0."),
    ],
)
def test_invalid_counts_raise_kafkas_errors(
    n_brokers: int, n: int, rf: int, error: str, message: str
) -> None:
    """Clients show these messages verbatim; Kafka users recognise them."""
    with pytest.raises(KafkaError) as info:
        assign_new_topic(list(range(n_brokers)), n, rf, random.Random(0))
    assert info.value.error_name == error
    assert info.value.message == message


def test_random_start_comes_from_the_given_rng() -> None:
    """Same seed, same placement: the simulation replays topic creation exactly."""
    a = assign_new_topic([3, 1, 2], 6, 2, random.Random(42))
    b = assign_new_topic([1, 2, 3], 6, 2, random.Random(42))
    assert a == b  # brokers are sorted by id first, as Kafka's getBrokerMetadatas does
    start, shift = random_start(random.Random(42), 3)
    assert a == assign_replicas_to_brokers(
        [1, 2, 3], 6, 2, start_index=start, next_replica_shift=shift
    )


@given(
    n_brokers=st.integers(1, 9),
    n=st.integers(1, 40),
    data=st.data(),
)
def test_assignment_is_valid_and_balanced(n_brokers: int, n: int, data: st.DataObject) -> None:
    """Every partition holds rf distinct brokers; leaders and replicas spread evenly."""
    rf = data.draw(st.integers(1, n_brokers))
    start = data.draw(st.integers(0, n_brokers - 1))
    shift = data.draw(st.integers(0, n_brokers - 1))
    brokers = list(range(100, 100 + n_brokers))
    got = assign_replicas_to_brokers(brokers, n, rf, start_index=start, next_replica_shift=shift)
    assert sorted(got) == list(range(n))
    leaders: dict[int, int] = dict.fromkeys(brokers, 0)
    replicas: dict[int, int] = dict.fromkeys(brokers, 0)
    for rs in got.values():
        assert len(rs) == rf and len(set(rs)) == rf
        leaders[rs[0]] += 1
        for b in rs:
            replicas[b] += 1
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert max(replicas.values()) - min(replicas.values()) <= rf


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (
            {0: [1, 1]},
            "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 0.",
        ),
        ({0: []}, "Cannot have replication factor of 0 for partition id 0."),
        (
            {0: [1, 9]},
            "Some brokers specified for partition id 0 are not available. Specified brokers: "
            "1, 9, available brokers: 1, 2, 3.",
        ),
        ({0: [1, 2], 1: [3]}, "All partitions should have the same number of replicas"),
        ({0: [1], 2: [2]}, "partitions should be a consecutive 0-based integer sequence"),
        ({}, "The replica assignment is empty."),
    ],
)
def test_manual_assignment_errors(assignment: dict[int, list[int]], message: str) -> None:
    with pytest.raises(KafkaError) as info:
        validate_manual_assignment(assignment, [1, 2, 3])
    assert info.value.error_name == "INVALID_REPLICA_ASSIGNMENT"
    assert info.value.message == message


def test_valid_manual_assignment_passes() -> None:
    validate_manual_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, {1, 2, 3})


def test_add_partitions_keeps_existing_and_continues_the_round_robin() -> None:
    """Kafka's createNewPartitionsAssignment: start and shift both at the first broker whose
    id >= partition 0's leader, partition ids continuing after the existing ones."""
    existing = {0: [2, 3], 1: [3, 4]}
    added = add_partitions("t", existing, [4, 1, 3, 2], 4)
    # sorted brokers [1, 2, 3, 4]; first id >= 2 is at index 1 -> start 1, shift 1
    assert added == assign_replicas_to_brokers(
        [1, 2, 3, 4], 2, 2, start_index=1, next_replica_shift=1, start_partition_id=2
    )
    assert added == {2: [4, 2], 3: [1, 3]}
    assert set(added).isdisjoint(existing)


def test_add_partitions_start_index_falls_back_to_zero() -> None:
    """No broker id >= partition 0's leader (it left): Kafka's max(0, indexWhere) = 0."""
    added = add_partitions("t", {0: [9]}, [1, 2], 3)
    assert added == assign_replicas_to_brokers(
        [1, 2], 2, 1, start_index=0, next_replica_shift=0, start_partition_id=1
    )


@pytest.mark.parametrize(
    ("count", "manual", "error", "message"),
    [
        (
            2,
            None,
            "INVALID_PARTITIONS",
            "The number of partitions for a topic can only be increased. Topic t currently has 2 "
            "partitions, 2 would not be an increase.",
        ),
        (
            1,
            None,
            "INVALID_PARTITIONS",
            "The number of partitions for a topic can only be increased. Topic t currently has 2 "
            "partitions, 1 would not be an increase.",
        ),
        (
            4,
            [[1, 2]],
            "INVALID_REPLICA_ASSIGNMENT",
            "Increasing the number of partitions by 2 but 1 assignments provided.",
        ),
        (
            3,
            [[1, 2, 3]],
            "INVALID_REPLICA_ASSIGNMENT",
            "Inconsistent replication factor between partitions, partition 0 has 2 while "
            "partitions [2] have replication factors [3], respectively.",
        ),
        (3, [[1, 7]], "INVALID_REPLICA_ASSIGNMENT", None),
        (3, [[2, 2]], "INVALID_REPLICA_ASSIGNMENT", None),
    ],
)
def test_add_partitions_errors(
    count: int, manual: list[list[int]] | None, error: str, message: str | None
) -> None:
    with pytest.raises(KafkaError) as info:
        add_partitions("t", {0: [1, 2], 1: [2, 3]}, [1, 2, 3], count, manual)
    assert info.value.error_name == error
    if message is not None:
        assert info.value.message == message


def test_add_partitions_with_manual_assignment() -> None:
    added = add_partitions("t", {0: [1, 2]}, [1, 2, 3], 3, [[3, 1], [2, 3]])
    assert added == {1: [3, 1], 2: [2, 3]}
