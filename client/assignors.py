"""Partition assignors: how a consumer group's leader shares partitions among the members.

Pure: values in, values out. Each assignor is Kafka's of the same name, decision for decision,
so a group that mixes kafkasim and Kafka consumers agrees on who reads what:

``range`` (``RangeAssignor``, Kafka's default)
    Topic by topic: the topic's partitions in numeric order, the members subscribed to it in
    member-id order. With ``n`` partitions and ``c`` members, each gets ``n // c`` and the
    first ``n % c`` one more, as contiguous ranges: member ``i`` starts at
    ``i * (n // c) + min(i, n % c)``. Topics are independent, so with many topics the first
    members carry the extra partitions of every topic.

``roundrobin`` (``RoundRobinAssignor``)
    All subscribed partitions sorted by topic then partition; the members sorted and visited
    in a circle that never restarts, each partition going to the next member subscribed to its
    topic. With identical subscriptions the counts differ by at most one.

Both produce an :class:`~common.group_protocol.Assignment` for every member, empty if it got
nothing; a topic that ``partitions_per_topic`` does not know (not in the metadata yet) is
skipped, as Kafka's ``AbstractPartitionAssignor`` does. Kafka orders static members by
``group.instance.id`` first; subscriptions here carry no instance id, so members are ordered
by member id alone.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.group_protocol import Assignment, Subscription
from kafkasim.common.types import TopicPartition


class AbstractPartitionAssignor(ABC):
    """An assignor: ``name`` is the protocol name a member offers in JoinGroup."""

    name: ClassVar[str]

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Member id -> its assignment, for every member in ``subscriptions``."""
        for topic, count in partitions_per_topic.items():
            if count < 0:
                raise ValueError(f"topic {topic!r} has a negative partition count {count}")
        subscribed = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        partitions = self._assign(partitions_per_topic, subscribed)
        return {member: Assignment(tuple(partitions[member])) for member in subscriptions}

    @abstractmethod
    def _assign(
        self, partitions_per_topic: Mapping[str, int], subscribed: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        """Member id -> its partitions (a list for every member), given each one's topics."""


class RangeAssignor(AbstractPartitionAssignor):
    """Kafka's ``RangeAssignor``: contiguous ranges of each topic, extras to the first."""

    name = "range"

    def _assign(
        self, partitions_per_topic: Mapping[str, int], subscribed: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscribed}
        topics = sorted({topic for topics in subscribed.values() for topic in topics})
        for topic in topics:
            n = partitions_per_topic.get(topic)
            if n is None:
                continue
            members = sorted(m for m, t in subscribed.items() if topic in t)
            per_member, with_extra = divmod(n, len(members))
            for i, member in enumerate(members):
                start = i * per_member + min(i, with_extra)
                length = per_member + (1 if i < with_extra else 0)
                assigned[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
        return assigned


class RoundRobinAssignor(AbstractPartitionAssignor):
    """Kafka's ``RoundRobinAssignor``: one circle over the sorted members for all partitions."""

    name = "roundrobin"

    def _assign(
        self, partitions_per_topic: Mapping[str, int], subscribed: Mapping[str, frozenset[str]]
    ) -> dict[str, list[TopicPartition]]:
        assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscribed}
        if not subscribed:
            return assigned
        members = itertools.cycle(sorted(subscribed))
        topics = sorted({topic for topics in subscribed.values() for topic in topics})
        # The circle's position carries over from one partition (and topic) to the next; it
        # never restarts at the first member. Every topic here has at least one subscriber, so
        # the search for the next subscribed member ends within one turn of the circle.
        current = next(members)
        for topic in topics:
            for partition in range(partitions_per_topic.get(topic, 0)):
                while topic not in subscribed[current]:
                    current = next(members)
                assigned[current].append(TopicPartition(topic, partition))
                current = next(members)
        return assigned


ASSIGNORS: dict[str, type[AbstractPartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
}
"""The assignors by protocol name."""

_KAFKA_CLASS_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": RangeAssignor.name,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": RoundRobinAssignor.name,
}


def assignor_for(name: str) -> AbstractPartitionAssignor:
    """The assignor a ``partition.assignment.strategy`` entry names: a protocol name
    (``range``) or Kafka's class name (``org.apache.kafka.clients.consumer.RangeAssignor``)."""
    key = name.strip()
    cls = ASSIGNORS.get(_KAFKA_CLASS_NAMES.get(key, key))
    if cls is None:
        known = ", ".join([*ASSIGNORS, *_KAFKA_CLASS_NAMES])
        raise InvalidConfigError(
            f"unknown partition.assignment.strategy {name!r}; known assignors: {known}"
        )
    return cls()
