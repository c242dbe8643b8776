"""Which partition a record goes to: Kafka's default partitioner, exactly.

Pure: values in, values out; the only state is the sticky partition per topic, and its only
randomness is the ``random.Random`` passed in.

Rules (Kafka's ``DefaultPartitioner`` of 2.4-3.2, KIP-480):

1. A record with an explicit partition goes there (the producer checks the range).
2. A record with a key goes to ``to_positive(murmur2(key)) % num_partitions`` over *all*
   partitions, available or not, so a key always lands on the same partition number as it
   does with Kafka's Java client (and keeps it while a leader is down: the record waits).
3. A record without a key goes to the topic's *sticky* partition. The producer calls
   :meth:`StickyPartitioner.next_partition` when a record would open a new batch on the
   sticky partition (its batch is full or was sent); the sticky partition then moves to
   another one drawn at random among the *available* partitions (those with a leader), never
   the same one unless it is the only one. Sticking fills batches faster than round-robin,
   so there are fewer, larger requests even with ``linger.ms=0``.

``murmur2`` is Kafka's ``Utils.murmur2``: MurmurHash2 with seed ``0x9747b28c`` over the key
bytes (4-byte little-endian words, tail bytes, final mix), as a signed 32-bit int;
``to_positive`` masks the sign bit (``n & 0x7fffffff``), which is not ``abs``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_WORDS = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int."""
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    body = length & ~3
    # Java's int arithmetic wraps; here every product is masked back to 32 bits.
    for (word,) in _WORDS.iter_unpack(data[:body]):
        k = (word * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: the sign bit cleared (``-1`` gives ``2**31 - 1``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's Java client picks for ``key`` (rule 2)."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """The sticky partition of each topic (Kafka's ``StickyPartitionCache``, rule 3).

    Invariant: a topic's sticky partition, once chosen, changes only through
    :meth:`next_partition` called with that same partition as ``prev_partition`` (so two
    records racing to report the same full batch move it once, not twice).
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """The topic's sticky partition, choosing one first if it has none yet."""
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions:
            return current
        return self.next_partition(topic, num_partitions, available, -1)

    def next_partition(
        self, topic: str, num_partitions: int, available: Sequence[int], prev_partition: int
    ) -> int:
        """Move the sticky partition off ``prev_partition`` (if it still is the sticky one).

        ``available`` lists the partitions with a leader. None available: any partition at
        random (the record waits there for a leader); one: that one; several: a random one
        other than the current.
        """
        if num_partitions <= 0:
            raise ValueError(f"a topic has at least one partition, got {num_partitions}")
        old = self._sticky.get(topic)
        if old is not None and old >= num_partitions:
            old = None  # the topic shrank under us (only a re-created topic can)
        if old is not None and old != prev_partition:
            return old
        if not available:
            new = self._rng.randrange(num_partitions)
        elif len(available) == 1:
            new = available[0]
        else:
            new = available[self._rng.randrange(len(available))]
            while new == old:
                new = available[self._rng.randrange(len(available))]
        self._sticky[topic] = new
        return new


class Partitioner(Protocol):
    """What the producer asks: where a record goes, and that a new batch is about to open.

    ``available`` are the partitions of ``topic`` that have a leader, ascending.
    """

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int],
    ) -> int: ...

    def on_new_batch(
        self, topic: str, num_partitions: int, available: Sequence[int], prev_partition: int
    ) -> None: ...


class DefaultPartitioner:
    """Keys by murmur2 over all partitions, keyless records sticky (rules 2 and 3)."""

    def __init__(self, rng: random.Random) -> None:
        self._sticky = StickyPartitioner(rng)

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int],
    ) -> int:
        if key is None:
            return self._sticky.partition(topic, num_partitions, available)
        return partition_for_key(key, num_partitions)

    def on_new_batch(
        self, topic: str, num_partitions: int, available: Sequence[int], prev_partition: int
    ) -> None:
        self._sticky.next_partition(topic, num_partitions, available, prev_partition)


class UniformStickyPartitioner(DefaultPartitioner):
    """Kafka's ``UniformStickyPartitioner``: every record sticky, keys ignored."""

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int],
    ) -> int:
        return super().partition(topic, None, value, num_partitions, available)


PartitionFunction = Callable[[str, bytes | None, bytes | None, int], int]
"""A user's own choice: ``(topic, key, value, num_partitions) -> partition``."""


class FunctionPartitioner:
    """Adapts a :data:`PartitionFunction`; new batches do not concern it."""

    def __init__(self, function: PartitionFunction) -> None:
        self._function = function

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int],
    ) -> int:
        return self._function(topic, key, value, num_partitions)

    def on_new_batch(
        self, topic: str, num_partitions: int, available: Sequence[int], prev_partition: int
    ) -> None:
        return None


PARTITIONERS: dict[str, Callable[[random.Random], Partitioner]] = {
    "murmur2": DefaultPartitioner,
    "uniform_sticky": UniformStickyPartitioner,
}
"""The ``partitioner`` config's values and what each builds."""
