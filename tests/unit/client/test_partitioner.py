"""The producer's partition choice: Kafka's murmur2 bit for bit, keys over all partitions,
keyless records sticky until their batch closes (KIP-480), randomness only from the seed."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.client.partitioner import (
    PARTITIONERS,
    DefaultPartitioner,
    FunctionPartitioner,
    StickyPartitioner,
    UniformStickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)


def _signed(u32: int) -> int:
    return u32 - (1 << 32) if u32 & 0x80000000 else u32


# Published values of Kafka's Utils.murmur2, from two independent sources:
# * Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
#   testMurmur2 (signed ints, as the Java test writes them);
# * librdkafka, src/rdmurmur2.c, unittest_murmur2's `java_murmur2_results` (hex; the values
#   the Java client computes, which librdkafka's murmur2_random partitioner must match).
MURMUR2_VECTORS = [
    # UtilsTest.testMurmur2
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    # librdkafka rdmurmur2.c java_murmur2_results: every tail length 0-3, aligned or not
    (b"kafka", _signed(0xD067CF64)),
    (b"giberish123456789", _signed(0x8F552B0C)),
    (b"1234", _signed(0x9FC97B14)),
    (b"234", _signed(0xE7C009CA)),
    (b"34", _signed(0x873930DA)),
    (b"4", _signed(0x5A4B5CA1)),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", _signed(0x78424F1C)),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", _signed(0x4A62B377)),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", _signed(0xE0E4E09E)),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", _signed(0x62B8B43F)),
    (b"", _signed(0x106E08D9)),
]


@pytest.mark.parametrize(("key", "expected"), MURMUR2_VECTORS, ids=lambda v: repr(v)[:20])
def test_murmur2_matches_kafkas_published_values(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


# Partitions derived from the published hashes above (to_positive(h) % n): the partition a
# Java producer picks for these keys on topics of 1, 3, 6, 12 and 50 partitions.
@pytest.mark.parametrize(
    ("key", "num_partitions", "partition"),
    [
        (b"21", 1, 0),
        (b"21", 3, (-973932308 & 0x7FFFFFFF) % 3),
        (b"foobar", 6, (-790332482 & 0x7FFFFFFF) % 6),
        (b"abc", 12, 479470107 % 12),
        (b"kafka", 50, (0xD067CF64 & 0x7FFFFFFF) % 50),
        (b"", 3, (0x106E08D9 & 0x7FFFFFFF) % 3),
    ],
)
def test_a_key_lands_where_kafkas_java_client_puts_it(
    key: bytes, num_partitions: int, partition: int
) -> None:
    assert partition_for_key(key, num_partitions) == partition


def test_literal_partitions_for_known_keys() -> None:
    """The same table with the numbers written out, so a broken % or mask cannot hide."""
    assert [partition_for_key(b"21", 3), partition_for_key(b"foobar", 6)] == [0, 0]
    assert [partition_for_key(b"abc", 12), partition_for_key(b"kafka", 50)] == [3, 30]


@pytest.mark.parametrize(
    ("number", "positive"),
    [(0, 0), (5, 5), (-1, 0x7FFFFFFF), (-(2**31), 0), (2**31 - 1, 2**31 - 1), (-5, 2**31 - 5)],
)
def test_to_positive_clears_the_sign_bit_and_is_not_abs(number: int, positive: int) -> None:
    assert to_positive(number) == positive


@given(st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(key: bytes) -> None:
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.binary(max_size=32), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_in_range_and_stable(key: bytes, num_partitions: int) -> None:
    partition = partition_for_key(key, num_partitions)
    assert 0 <= partition < num_partitions
    assert partition_for_key(bytes(key), num_partitions) == partition


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)


# -- sticky (KIP-480) ---------------------------------------------------------------------------


def test_sticky_partition_stays_until_its_batch_closes_then_moves() -> None:
    sticky = StickyPartitioner(random.Random(7))
    available = [0, 1, 2, 3]
    first = sticky.partition("t", 4, available)
    assert all(sticky.partition("t", 4, available) == first for _ in range(50))
    moved = sticky.next_partition("t", 4, available, first)
    assert moved != first and moved in available
    assert sticky.partition("t", 4, available) == moved


def test_a_stale_new_batch_report_does_not_move_the_sticky_partition_twice() -> None:
    """Two records that both saw partition p fill up move the sticky partition once."""
    sticky = StickyPartitioner(random.Random(1))
    available = [0, 1, 2]
    first = sticky.partition("t", 3, available)
    second = sticky.next_partition("t", 3, available, first)
    assert sticky.next_partition("t", 3, available, first) == second


def test_sticky_picks_only_available_partitions() -> None:
    sticky = StickyPartitioner(random.Random(3))
    chosen = {sticky.next_partition("t", 8, [2, 5], -1 if i == 0 else 2) for i in range(20)}
    chosen |= {sticky.next_partition("t", 8, [2, 5], 5) for _ in range(20)}
    assert chosen <= {2, 5}


@pytest.mark.parametrize(
    ("available", "allowed"),
    [([], set(range(4))), ([3], {3})],
    ids=["none-available-any-partition", "one-available-that-one"],
)
def test_sticky_with_few_available_partitions(available: list[int], allowed: set[int]) -> None:
    sticky = StickyPartitioner(random.Random(5))
    previous = sticky.partition("t", 4, available)
    for _ in range(20):
        assert previous in allowed
        previous = sticky.next_partition("t", 4, available, previous)


def test_sticky_is_deterministic_for_a_seed_and_spreads_over_partitions() -> None:
    def walk(seed: int) -> list[int]:
        sticky = StickyPartitioner(random.Random(seed))
        out = [sticky.partition("t", 6, list(range(6)))]
        for _ in range(200):
            out.append(sticky.next_partition("t", 6, list(range(6)), out[-1]))
        return out

    assert walk(11) == walk(11)
    assert walk(11) != walk(12)
    assert set(walk(11)) == set(range(6))
    run = walk(11)
    assert all(a != b for a, b in itertools.pairwise(run))


def test_topics_stick_independently() -> None:
    sticky = StickyPartitioner(random.Random(9))
    a = sticky.partition("a", 10, list(range(10)))
    b = sticky.partition("b", 10, list(range(10)))
    sticky.next_partition("a", 10, list(range(10)), a)
    assert sticky.partition("b", 10, list(range(10))) == b


# -- the partitioners the producer's config names -------------------------------------------------


def test_default_partitioner_hashes_keys_and_sticks_keyless_records() -> None:
    partitioner = DefaultPartitioner(random.Random(0))
    # A key's partition ignores availability (rule 2): the record waits for its leader.
    assert partitioner.partition("t", b"abc", b"v", 12, [0]) == 3
    keyless = partitioner.partition("t", None, b"v", 12, list(range(12)))
    partitioner.on_new_batch("t", 12, list(range(12)), keyless)
    assert partitioner.partition("t", None, b"v", 12, list(range(12))) != keyless


def test_uniform_sticky_ignores_keys() -> None:
    partitioner = UniformStickyPartitioner(random.Random(0))
    chosen = {partitioner.partition("t", b"k%d" % i, None, 6, list(range(6))) for i in range(20)}
    assert len(chosen) == 1


def test_function_partitioner_calls_the_users_function() -> None:
    partitioner = FunctionPartitioner(lambda topic, key, value, n: len(value or b"") % n)
    assert partitioner.partition("t", None, b"abcd", 3, [0, 1, 2]) == 1
    partitioner.on_new_batch("t", 3, [0, 1, 2], 1)  # no state to move


def test_the_config_names_its_partitioners() -> None:
    assert sorted(PARTITIONERS) == ["murmur2", "uniform_sticky"]
    assert isinstance(PARTITIONERS["murmur2"](random.Random(0)), DefaultPartitioner)
