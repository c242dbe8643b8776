"""TimeIndex: maybe_append rules, the reserved last slot, lookups, truncation, corruption."""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptIndexError, InvalidOffsetError
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.time_index import TimeIndex, TimestampOffset

BASE = 500
_names = itertools.count()

# Each example opens its own file under the test's tmp_path, so sharing the fixture is safe.
EXAMPLES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)


def new_index(tmp_path: Path, entries: Sequence[TimestampOffset], max_index_size: int) -> TimeIndex:
    index = TimeIndex(tmp_path / f"{next(_names)}.timeindex", BASE, max_index_size)
    for timestamp, offset in entries:
        index.maybe_append(timestamp, offset)
    return index


def brute_lookup(entries: Sequence[TimestampOffset], target: int) -> TimestampOffset:
    found = [e for e in entries if e.timestamp <= target]
    return found[-1] if found else TimestampOffset(NO_TIMESTAMP, BASE)


@st.composite
def sparse_entries(draw: st.DrawFn, max_size: int = 60) -> list[TimestampOffset]:
    """Strictly increasing timestamps, non-decreasing offsets (a repeat is allowed)."""
    gaps = draw(st.lists(st.tuples(st.integers(1, 10_000), st.integers(0, 40)), max_size=max_size))
    timestamp, offset, entries = draw(st.integers(0, 10**12)), BASE, []
    for timestamp_gap, offset_gap in gaps:
        timestamp += timestamp_gap
        offset += offset_gap
        entries.append(TimestampOffset(timestamp, offset))
    return entries


def random_entries(seed: int, count: int) -> list[TimestampOffset]:
    """A large sparse entry set, generated from a hypothesis-drawn seed (fast to build)."""
    rng = random.Random(seed)
    timestamp, offset, entries = 1_600_000_000_000 + rng.randrange(1000), BASE, []
    for _ in range(count):
        entries.append(TimestampOffset(timestamp, offset))
        timestamp += rng.randint(1, 2000)
        offset += rng.randint(0, 30)
    return entries


@EXAMPLES
@given(entries=sparse_entries(), data=st.data())
def test_lookup_matches_a_brute_force_scan_on_small_indexes(
    tmp_path: Path, entries: list[TimestampOffset], data: st.DataObject
) -> None:
    """Largest timestamp <= target, or (-1, base_offset): below, on, between and above."""
    low = entries[0].timestamp - 20 if entries else -5
    high = entries[-1].timestamp + 20 if entries else 5
    targets = data.draw(st.lists(st.integers(low, high), min_size=1, max_size=30))
    targets += [e.timestamp for e in entries]
    with new_index(tmp_path, entries, max_index_size=12 * 64) as index:
        assert index.entries == len(entries)
        for target in targets:
            assert index.lookup(target) == brute_lookup(entries, target)


@EXAMPLES
@given(seed=st.integers(0, 2**32), count=st.integers(683, 3000), data=st.data())
def test_lookup_matches_a_brute_force_scan_in_warm_and_cold_parts(
    tmp_path: Path, seed: int, count: int, data: st.DataObject
) -> None:
    """More than 682 entries, so targets fall both in the warm section and before it."""
    entries = random_entries(seed, count)
    first_hot = count - 1 - 682
    cold = st.integers(entries[0].timestamp - 5, entries[first_hot].timestamp - 1)
    warm = st.integers(entries[first_hot].timestamp, entries[-1].timestamp + 5)
    exact = st.sampled_from(entries).map(lambda e: e.timestamp)
    targets = data.draw(st.lists(st.one_of(cold, warm, exact), min_size=5, max_size=40))
    with new_index(tmp_path, entries, max_index_size=12 * (count + 1)) as index:
        assert index.is_full()
        for target in targets:
            assert index.lookup(target) == brute_lookup(entries, target)


@EXAMPLES
@given(entries=sparse_entries(), data=st.data())
def test_truncate_to_keeps_exactly_the_entries_below_the_offset(
    tmp_path: Path, entries: list[TimestampOffset], data: st.DataObject
) -> None:
    """Repeated offsets included: every remaining entry is < o, every dropped one was >= o."""
    high = entries[-1].offset + 5 if entries else BASE + 5
    target = data.draw(st.integers(BASE - 5, high))
    with new_index(tmp_path, entries, max_index_size=12 * 64) as index:
        index.truncate_to(target)
        kept = [e for e in entries if e.offset < target]
        assert [index.entry(n) for n in range(index.entries)] == kept
        assert index.last_entry == (kept[-1] if kept else TimestampOffset(NO_TIMESTAMP, BASE))


ENTRIES = [
    TimestampOffset(100, BASE + 10),
    TimestampOffset(200, BASE + 20),
    TimestampOffset(300, BASE + 30),
]


@pytest.mark.parametrize(
    ("truncate_to", "kept"),
    [
        (BASE + 31, 3),
        (BASE + 30, 2),  # exact hit drops that slot
        (BASE + 25, 2),  # between entries
        (BASE + 20, 1),
        (BASE + 10, 0),
        (BASE, 0),
    ],
)
def test_truncate_to_drops_entries_at_or_after_the_offset(
    tmp_path: Path, truncate_to: int, kept: int
) -> None:
    """Log truncation removes time entries pointing at or past the new log end."""
    with new_index(tmp_path, ENTRIES, 120) as index:
        index.truncate_to(truncate_to)
        assert index.entries == kept
        index.maybe_append(400, BASE + 40)
        assert index.entry(kept) == TimestampOffset(400, BASE + 40)


def test_lookup_and_last_entry_of_an_empty_index(tmp_path: Path) -> None:
    """No entry: NO_TIMESTAMP at the base offset, so a search scans the whole segment."""
    with new_index(tmp_path, [], 120) as index:
        assert index.lookup(10**12) == TimestampOffset(-1, BASE)
        assert index.last_entry == TimestampOffset(-1, BASE)


def test_maybe_append_ignores_a_timestamp_not_larger_than_the_last(tmp_path: Path) -> None:
    """Roll and close re-offer the last entry; v0 records carry NO_TIMESTAMP on an empty index."""
    with new_index(tmp_path, [], 120) as index:
        index.maybe_append(NO_TIMESTAMP, BASE + 3)
        assert index.entries == 0
        index.maybe_append(100, BASE + 10)
        index.maybe_append(100, BASE + 10)
        index.maybe_append(100, BASE + 12)
        assert index.entries == 1
        assert index.last_entry == TimestampOffset(100, BASE + 10)


def test_maybe_append_accepts_a_larger_timestamp_at_the_same_offset(tmp_path: Path) -> None:
    """Only offsets going backwards are an error; an equal offset is allowed."""
    with new_index(tmp_path, [TimestampOffset(100, BASE + 10)], 120) as index:
        index.maybe_append(150, BASE + 10)
        assert index.last_entry == TimestampOffset(150, BASE + 10)


@pytest.mark.parametrize(
    ("timestamp", "offset", "match"),
    [
        (300, BASE + 19, rf"offset {BASE + 19} .*\({BASE + 20}\)"),
        (199, BASE + 25, r"timestamp 199 .*\(200\)"),
        (150, BASE + 5, rf"offset {BASE + 5}"),
    ],
)
def test_maybe_append_refuses_an_offset_or_timestamp_going_backwards(
    tmp_path: Path, timestamp: int, offset: int, match: str
) -> None:
    """Timestamps and offsets never decrease, or the binary searches would lie."""
    with new_index(tmp_path, ENTRIES[:2], 120) as index:
        with pytest.raises(InvalidOffsetError, match=match):
            index.maybe_append(timestamp, offset)
        assert index.entries == 2


def test_maybe_append_refuses_an_offset_outside_int32_of_the_base(tmp_path: Path) -> None:
    """The relative offset is 4 bytes."""
    too_far = BASE + 2**31
    with (
        new_index(tmp_path, [], 120) as index,
        pytest.raises(InvalidOffsetError, match=str(too_far)),
    ):
        index.maybe_append(5, too_far)


def test_last_slot_is_reserved_for_the_roll_entry(tmp_path: Path) -> None:
    """A segment rolled because its time index filled up must still record its max timestamp."""
    with new_index(tmp_path, ENTRIES, 12 * 4) as index:
        assert index.max_entries == 4
        assert index.is_full()
        with pytest.raises(InvalidOffsetError, match="full"):
            index.maybe_append(400, BASE + 40)
        index.maybe_append(400, BASE + 40, skip_full_check=True)
        assert index.entries == 4
        assert index.last_entry == TimestampOffset(400, BASE + 40)
        # Closing re-offers the same entry: a no-op even with no slot left.
        index.maybe_append(400, BASE + 40, skip_full_check=True)
        with pytest.raises(InvalidOffsetError, match="no slot left"):
            index.maybe_append(500, BASE + 50, skip_full_check=True)


@pytest.mark.parametrize(
    ("max_entries", "appended", "full"), [(4, 2, False), (4, 3, True), (1, 0, True)]
)
def test_is_full_counts_the_reserved_slot(
    tmp_path: Path, max_entries: int, appended: int, full: bool
) -> None:
    """is_full() is entries >= max_entries - 1."""
    with new_index(tmp_path, ENTRIES[:appended], 12 * max_entries) as index:
        assert index.is_full() is full


def test_reopened_index_keeps_its_entries(tmp_path: Path) -> None:
    """Close trims; reopening reads the entries (and the last one) back from the file."""
    path = tmp_path / "500.timeindex"
    with TimeIndex(path, BASE, 1200) as index:
        for timestamp, offset in ENTRIES:
            index.maybe_append(timestamp, offset)
    assert path.stat().st_size == 36
    with TimeIndex(path, BASE, 1200, writable=False) as reopened:
        assert [reopened.entry(n) for n in range(3)] == ENTRIES
        assert reopened.last_entry == ENTRIES[-1]
        assert reopened.lookup(250) == ENTRIES[1]


def test_sanity_check_passes_on_a_healthy_index(tmp_path: Path) -> None:
    with new_index(tmp_path, ENTRIES, 120) as index:
        index.sanity_check()


def write_raw(path: Path, entries: Sequence[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in entries) + tail)


@pytest.mark.parametrize(
    ("raw", "tail", "match"),
    [
        ([(300, 1), (200, 2)], b"", "last timestamp 200 is less than the first timestamp 300"),
        ([(100, 1), (200, -3)], b"", "last offset 497 is less than the base offset 500"),
        ([(100, 1)], b"\x00" * 5, "length 17 bytes"),
    ],
    ids=["decreasing-timestamps", "offset-below-base", "partial-entry"],
)
def test_sanity_check_rejects_a_corrupt_file(
    tmp_path: Path, raw: list[tuple[int, int]], tail: bytes, match: str
) -> None:
    """Each check turns one sentence of the class invariant into a named error."""
    path = tmp_path / "500.timeindex"
    write_raw(path, raw, tail)
    corrupt = rf"500\.timeindex.*{match}"
    with (
        TimeIndex(path, BASE, 1200, writable=False) as index,
        pytest.raises(CorruptIndexError, match=corrupt),
    ):
        index.sanity_check()
