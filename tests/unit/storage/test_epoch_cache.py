"""LeaderEpochFileCache: Kafka's assign/truncation rules, the KIP-101/KIP-279 end-offset table,
and persistence of every change."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import StorageInternalError
from kafkasim.storage.checkpoints import (
    EpochEntry,
    InMemoryLeaderEpochCheckpoint,
    LeaderEpochCheckpointFile,
)
from kafkasim.storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)

E = EpochEntry


def cache_with(*entries: EpochEntry) -> tuple[LeaderEpochFileCache, InMemoryLeaderEpochCheckpoint]:
    checkpoint = InMemoryLeaderEpochCheckpoint(entries)
    cache = LeaderEpochFileCache(checkpoint)
    assert cache.entries() == list(entries)
    checkpoint.writes = 0
    return cache, checkpoint


# -- end_offset_for (OffsetsForLeaderEpoch) -----------------------------------------------

LOG_END_OFFSET = 70
TABLE_ENTRIES = (E(2, 10), E(4, 30), E(6, 50))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
        (0, (0, 10)),
        (1, (1, 10)),
        (2, (2, 30)),
        (3, (2, 30)),
        (4, (4, 50)),
        (5, (4, 50)),
        (6, (6, LOG_END_OFFSET)),
        (7, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    ],
    ids=[
        "undefined-epoch",
        "below-earliest-by-two",
        "below-earliest",
        "equal-to-existing",
        "between-two",
        "equal-to-middle",
        "between-middle-and-latest",
        "equal-to-latest",
        "above-latest",
    ],
)
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    """Largest epoch <= requested and the start of the next epoch; the LEO for the latest.

    Below the earliest epoch Kafka 2.1+ answers (requested, earliest start): the data before it
    was deleted, so the follower truncates to where the leader's log begins.
    """
    cache, _ = cache_with(*TABLE_ENTRIES)
    assert cache.end_offset_for(requested, LOG_END_OFFSET) == expected


def test_end_offset_for_on_an_empty_cache_is_undefined() -> None:
    cache, _ = cache_with()
    assert cache.end_offset_for(0, 5) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 100)), min_size=1, max_size=10),
    st.integers(0, 60),
)
def test_end_offset_for_matches_the_definition(gaps: list[tuple[int, int]], requested: int) -> None:
    """Against a brute-force reading of KIP-101's definition, for every requested epoch."""
    entries, epoch, offset = [], 0, 0
    for epoch_gap, offset_gap in gaps:
        epoch += epoch_gap
        offset += offset_gap
        entries.append(E(epoch, offset))
    cache, _ = cache_with(*entries)
    leo = offset + 7
    floor = [e for e in entries if e.epoch <= requested]
    higher = [e for e in entries if e.epoch > requested]
    if requested == entries[-1].epoch:
        expected = (requested, leo)
    elif not higher:
        expected = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    else:
        expected = (floor[-1].epoch if floor else requested, higher[0].start_offset)
    assert cache.end_offset_for(requested, leo) == expected


# -- assign --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "assigned", "after"),
    [
        ((), E(0, 0), [E(0, 0)]),
        ((E(1, 5),), E(2, 8), [E(1, 5), E(2, 8)]),
        ((E(1, 5),), E(1, 5), [E(1, 5)]),
        ((E(1, 5),), E(1, 7), [E(1, 5)]),
        ((E(1, 5),), E(1, 3), [E(1, 3)]),
        ((E(1, 5),), E(2, 5), [E(2, 5)]),
        ((E(1, 5),), E(2, 3), [E(2, 3)]),
        ((E(1, 0), E(2, 10), E(3, 20)), E(2, 15), [E(1, 0), E(2, 15)]),
        ((E(1, 0), E(2, 10), E(3, 20)), E(4, 15), [E(1, 0), E(2, 10), E(4, 15)]),
        ((E(1, 0), E(2, 10), E(3, 20)), E(0, 30), [E(0, 30)]),
        ((E(1, 0), E(3, 20)), E(2, 25), [E(1, 0), E(2, 25)]),
    ],
    ids=[
        "first-entry",
        "higher-epoch-higher-offset-appends",
        "same-entry-is-a-no-op",
        "same-epoch-later-offset-is-a-no-op",
        "same-epoch-earlier-offset-moves-start-back",
        "higher-epoch-same-offset-replaces-empty-epoch",
        "higher-epoch-lower-offset-truncates-latest",
        "lower-epoch-truncates-later-epochs",
        "higher-epoch-between-offsets-truncates-latest",
        "lowest-epoch-truncates-everything",
        "lower-epoch-later-offset-truncates-latest-only",
    ],
)
def test_assign_follows_kafkas_monotonicity_rules(
    before: tuple[EpochEntry, ...], assigned: EpochEntry, after: list[EpochEntry]
) -> None:
    """KIP-279 / apache/kafka#5678: entries that would break monotonicity go first; the
    latest assignment is trusted, because it comes from the log."""
    cache, checkpoint = cache_with(*before)
    cache.assign(*assigned)
    assert cache.entries() == after
    cache.sanity_check()
    changed = after != list(before)
    assert checkpoint.writes == (1 if changed else 0)
    assert checkpoint.read() == after


@pytest.mark.parametrize("entry", [E(-1, 0), E(0, -1)], ids=["negative-epoch", "negative-offset"])
def test_assign_refuses_negative_values(entry: EpochEntry) -> None:
    cache, checkpoint = cache_with()
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(*entry)
    assert checkpoint.writes == 0


def test_queries() -> None:
    cache, _ = cache_with(E(1, 0), E(3, 20), E(4, 35))
    assert cache.latest_epoch == 4
    assert cache.latest_entry == E(4, 35)
    assert cache.earliest_entry == E(1, 0)
    assert cache.epochs == [1, 3, 4]
    assert len(cache) == 3
    empty, _ = cache_with()
    assert empty.latest_epoch is None
    assert empty.latest_entry is None
    assert empty.earliest_entry is None
    assert empty.epochs == []


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [(4, None), (5, 1), (6, 1), (19, 1), (20, 3), (34, 3), (35, 4), (10_000, 4)],
)
def test_epoch_for_offset(offset: int, epoch: int | None) -> None:
    cache, _ = cache_with(E(1, 5), E(3, 20), E(4, 35))
    assert cache.epoch_for_offset(offset) == epoch


# -- truncation ----------------------------------------------------------------------------

THREE = (E(1, 0), E(2, 10), E(3, 20))


@pytest.mark.parametrize(
    ("end_offset", "after"),
    [
        (25, list(THREE)),
        (21, list(THREE)),
        (20, [E(1, 0), E(2, 10)]),
        (15, [E(1, 0), E(2, 10)]),
        (10, [E(1, 0)]),
        (0, []),
        (-1, list(THREE)),
    ],
)
def test_truncate_from_end(end_offset: int, after: list[EpochEntry]) -> None:
    """Entries starting at or above the new log end go; a write only when something went."""
    cache, checkpoint = cache_with(*THREE)
    cache.truncate_from_end(end_offset)
    assert cache.entries() == after
    assert checkpoint.writes == (0 if after == list(THREE) else 1)
    assert checkpoint.read() == after


@pytest.mark.parametrize(
    ("start_offset", "after"),
    [
        (0, list(THREE)),
        (5, [E(1, 5), E(2, 10), E(3, 20)]),
        (10, [E(2, 10), E(3, 20)]),
        (15, [E(2, 15), E(3, 20)]),
        (20, [E(3, 20)]),
        (25, [E(3, 25)]),
    ],
)
def test_truncate_from_start(start_offset: int, after: list[EpochEntry]) -> None:
    """Entries wholly below the new log start go; the one covering it moves up to it."""
    cache, checkpoint = cache_with(*THREE)
    cache.truncate_from_start(start_offset)
    assert cache.entries() == after
    assert checkpoint.read() == after
    cache.sanity_check()


def test_truncate_from_start_below_first_entry_changes_nothing() -> None:
    cache, checkpoint = cache_with(E(1, 10))
    cache.truncate_from_start(5)
    assert cache.entries() == [E(1, 10)]
    assert checkpoint.writes == 0


def test_clear_and_flush() -> None:
    cache, checkpoint = cache_with(*THREE)
    cache.clear_and_flush()
    assert cache.entries() == []
    assert checkpoint.read() == []
    assert checkpoint.writes == 1


# -- persistence ---------------------------------------------------------------------------


def test_every_change_reaches_the_file_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    cache.assign(0, 0)
    cache.assign(2, 17)
    cache.assign(5, 40)
    assert path.read_bytes() == b"0\n3\n0 0\n2 17\n5 40\n"
    cache.truncate_from_end(40)
    cache.truncate_from_start(3)
    assert path.read_bytes() == b"0\n2\n0 3\n2 17\n"
    reopened = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert reopened.entries() == [E(0, 3), E(2, 17)]


def test_loading_a_non_monotonic_file_repairs_it_in_memory(tmp_path: Path) -> None:
    """Entries are loaded through assign, so later lines win over conflicting earlier ones."""
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n3\n1 0\n3 20\n2 15\n")
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.entries() == [E(1, 0), E(2, 15)]
    cache.sanity_check()


def test_sanity_check_names_the_broken_pair() -> None:
    cache, _ = cache_with(E(1, 0), E(2, 10))
    cache._entries.append(E(3, 10))  # bypass assign to break the invariant
    with pytest.raises(StorageInternalError, match=r"EpochEntry\(epoch=2.*EpochEntry\(epoch=3"):
        cache.sanity_check()


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 100)),
        st.tuples(st.just("end"), st.integers(-1, 110), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 110), st.just(0)),
    ),
    max_size=40,
)


@given(_ops)
def test_any_operation_sequence_keeps_invariants_and_persists(
    ops: list[tuple[str, int, int]],
) -> None:
    """Strictly increasing epochs and start offsets after every step; the checkpoint always
    equals the cache, so a reopen sees the same entries."""
    checkpoint = InMemoryLeaderEpochCheckpoint()
    cache = LeaderEpochFileCache(checkpoint)
    for op, a, b in ops:
        if op == "assign":
            cache.assign(a, b)
            assert cache.latest_entry == E(a, b) or cache.latest_epoch == a
        elif op == "end":
            cache.truncate_from_end(a)
            assert all(e.start_offset < a for e in cache.entries()) or a < 0
        else:
            cache.truncate_from_start(a)
            first = cache.earliest_entry
            assert first is None or first.start_offset >= a
        cache.sanity_check()
        assert checkpoint.read() == cache.entries()
    assert LeaderEpochFileCache(checkpoint).entries() == cache.entries()
