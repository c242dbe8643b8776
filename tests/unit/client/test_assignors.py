"""The range and round-robin assignors: Kafka's documented examples decision for decision,
then the properties every assignment must have whatever the group looks like."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.client.assignors import (
    ASSIGNORS,
    AbstractPartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.group_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
)
from kafkasim.common.types import TopicPartition


def tps(*names: str) -> tuple[TopicPartition, ...]:
    """``tps("t0p1", "t1p0")``: Kafka's javadoc shorthand for topic-partitions."""
    out = []
    for name in names:
        topic, _, partition = name.rpartition("p")
        out.append(TopicPartition(topic, int(partition)))
    return tuple(out)


def subs(**topics: tuple[str, ...]) -> dict[str, Subscription]:
    return {member: Subscription(t) for member, t in topics.items()}


def assigned(result: Mapping[str, Assignment]) -> dict[str, tuple[TopicPartition, ...]]:
    return {member: a.partitions for member, a in result.items()}


TWO_TOPICS = {"t0": 3, "t1": 3}


# --- Kafka's javadoc examples ---------------------------------------------------------------


def test_range_javadoc_example_two_consumers_two_topics() -> None:
    """RangeAssignor's javadoc: the first consumer takes the extra partition of every topic."""
    result = RangeAssignor().assign(TWO_TOPICS, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert assigned(result) == {
        "C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": tps("t0p2", "t1p2"),
    }


def test_roundrobin_javadoc_example_two_consumers_two_topics() -> None:
    result = RoundRobinAssignor().assign(TWO_TOPICS, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert assigned(result) == {
        "C0": tps("t0p0", "t0p2", "t1p1"),
        "C1": tps("t0p1", "t1p0", "t1p2"),
    }


def test_roundrobin_javadoc_example_with_different_subscriptions() -> None:
    """A member not subscribed to a partition's topic is skipped, which can unbalance."""
    result = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3},
        subs(C0=("t0",), C1=("t0", "t1"), C2=("t0", "t1", "t2")),
    )
    assert assigned(result) == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_roundrobin_javadoc_example_three_consumers() -> None:
    result = RoundRobinAssignor().assign(
        TWO_TOPICS, subs(C0=("t0", "t1"), C1=("t0", "t1"), C2=("t0", "t1"))
    )
    assert assigned(result) == {
        "C0": tps("t0p0", "t1p0"),
        "C1": tps("t0p1", "t1p1"),
        "C2": tps("t0p2", "t1p2"),
    }


# --- range details --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("partitions", "members", "expected"),
    [
        (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),
        (6, 3, [[0, 1], [2, 3], [4, 5]]),
        (2, 3, [[0], [1], []]),
        (0, 2, [[], []]),
        (5, 1, [[0, 1, 2, 3, 4]]),
    ],
)
def test_range_gives_contiguous_ranges_extras_first(
    partitions: int, members: int, expected: list[list[int]]
) -> None:
    group = {f"m{i}": Subscription(("t",)) for i in range(members)}
    result = RangeAssignor().assign({"t": partitions}, group)
    assert [[tp.partition for tp in result[f"m{i}"].partitions] for i in range(members)] == expected


def test_range_orders_members_by_member_id_as_strings() -> None:
    """Member ids sort as strings: "C10" comes before "C2"."""
    result = RangeAssignor().assign({"t": 3}, subs(C2=("t",), C10=("t",)))
    assert assigned(result) == {"C10": tps("tp0", "tp1"), "C2": tps("tp2")}


def test_range_divides_each_topic_among_its_own_subscribers() -> None:
    result = RangeAssignor().assign({"a": 2, "b": 4}, subs(C0=("a",), C1=("a", "b"), C2=("b",)))
    assert assigned(result) == {
        "C0": tps("ap0"),
        "C1": tps("ap1", "bp0", "bp1"),
        "C2": tps("bp2", "bp3"),
    }


# --- both -----------------------------------------------------------------------------------

BOTH = [RangeAssignor, RoundRobinAssignor]


@pytest.mark.parametrize("cls", BOTH)
def test_topics_missing_from_metadata_are_skipped(cls: type[AbstractPartitionAssignor]) -> None:
    result = cls().assign({"t": 1}, subs(C0=("t", "unknown"), C1=("unknown",)))
    assert assigned(result) == {"C0": tps("tp0"), "C1": ()}


@pytest.mark.parametrize("cls", BOTH)
def test_every_member_is_in_the_result(cls: type[AbstractPartitionAssignor]) -> None:
    result = cls().assign({"t": 1}, subs(C0=("t",), C1=("t",), C2=()))
    assert set(result) == {"C0", "C1", "C2"}
    assert all(a.user_data is None for a in result.values())


@pytest.mark.parametrize("cls", BOTH)
def test_an_empty_group_gets_an_empty_assignment(cls: type[AbstractPartitionAssignor]) -> None:
    assert cls().assign({"t": 3}, {}) == {}


@pytest.mark.parametrize("cls", BOTH)
def test_a_negative_partition_count_is_refused(cls: type[AbstractPartitionAssignor]) -> None:
    with pytest.raises(ValueError, match="'t' has a negative partition count -1"):
        cls().assign({"t": -1}, subs(C0=("t",)))


@pytest.mark.parametrize("cls", BOTH)
def test_assignments_encode_as_the_consumer_protocol(cls: type[AbstractPartitionAssignor]) -> None:
    for assignment in cls().assign(TWO_TOPICS, subs(C0=("t0", "t1"), C1=("t1",))).values():
        assert decode_assignment(encode_assignment(assignment)).partitions == tuple(
            sorted(assignment.partitions)
        )


# --- properties -----------------------------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]
metadata = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), max_size=4)
groups = st.dictionaries(
    st.text("ABCxyz0123", min_size=1, max_size=4),
    st.lists(st.sampled_from([*TOPICS, "missing"]), max_size=5, unique=True).map(
        lambda t: Subscription(tuple(t))
    ),
    max_size=8,
)


@pytest.mark.parametrize("cls", BOTH)
@given(metadata, groups)
def test_each_partition_goes_to_exactly_one_subscribed_member(
    cls: type[AbstractPartitionAssignor],
    partitions_per_topic: dict[str, int],
    group: dict[str, Subscription],
) -> None:
    result = cls().assign(partitions_per_topic, group)
    assert set(result) == set(group)
    owners = Counter(tp for a in result.values() for tp in a.partitions)
    subscribed = {t for s in group.values() for t in s.topics}
    expected = {
        TopicPartition(t, p)
        for t, n in partitions_per_topic.items()
        if t in subscribed
        for p in range(n)
    }
    assert set(owners) == expected
    assert all(count == 1 for count in owners.values())
    for member, assignment in result.items():
        assert all(tp.topic in group[member].topics for tp in assignment.partitions)


@given(metadata, st.integers(1, 8), st.lists(st.sampled_from(TOPICS), unique=True))
def test_roundrobin_balances_identical_subscriptions_within_one(
    partitions_per_topic: dict[str, int], members: int, topics: list[str]
) -> None:
    group = {f"m{i}": Subscription(tuple(topics)) for i in range(members)}
    counts = [
        len(a.partitions) for a in RoundRobinAssignor().assign(partitions_per_topic, group).values()
    ]
    assert max(counts) - min(counts) <= 1


@given(metadata, st.integers(1, 8), st.lists(st.sampled_from(TOPICS), unique=True))
def test_range_balances_each_topic_within_one_for_identical_subscriptions(
    partitions_per_topic: dict[str, int], members: int, topics: list[str]
) -> None:
    """Range balances per topic only: across topics the first members gain every extra."""
    group = {f"m{i}": Subscription(tuple(topics)) for i in range(members)}
    result = RangeAssignor().assign(partitions_per_topic, group)
    for topic in topics:
        counts = [sum(tp.topic == topic for tp in a.partitions) for a in result.values()]
        assert max(counts) - min(counts) <= 1


# --- lookup by partition.assignment.strategy ------------------------------------------------


def test_assignors_are_listed_by_protocol_name() -> None:
    assert dict(ASSIGNORS) == {"range": RangeAssignor, "roundrobin": RoundRobinAssignor}
    assert RangeAssignor.name == "range"
    assert RoundRobinAssignor.name == "roundrobin"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("range", RangeAssignor),
        ("roundrobin", RoundRobinAssignor),
        ("org.apache.kafka.clients.consumer.RangeAssignor", RangeAssignor),
        ("org.apache.kafka.clients.consumer.RoundRobinAssignor", RoundRobinAssignor),
        (" range ", RangeAssignor),
    ],
)
def test_assignor_for_accepts_protocol_and_kafka_class_names(
    name: str, cls: type[AbstractPartitionAssignor]
) -> None:
    assert type(assignor_for(name)) is cls


@pytest.mark.parametrize("name", ["sticky", "org.apache.kafka.clients.consumer.StickyAssignor", ""])
def test_an_unknown_assignor_is_a_config_error_naming_it(name: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"partition\.assignment\.strategy") as info:
        assignor_for(name)
    assert repr(name) in str(info.value)
    assert "range" in str(info.value)
