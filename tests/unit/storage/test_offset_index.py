"""OffsetIndex: append order, lookups against a brute-force scan, truncation, corruption."""

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
from kafkasim.storage.offset_index import OffsetIndex, OffsetPosition

BASE = 1_000
_names = itertools.count()

# Each example opens its own file under the test's tmp_path, so sharing the fixture is safe.
EXAMPLES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)


def new_index(
    tmp_path: Path, entries: Sequence[OffsetPosition], max_index_size: int
) -> OffsetIndex:
    index = OffsetIndex(tmp_path / f"{next(_names)}.index", BASE, max_index_size)
    for offset, position in entries:
        index.append(offset, position)
    return index


def brute_lookup(entries: Sequence[OffsetPosition], target: int) -> OffsetPosition:
    found = [e for e in entries if e.offset <= target]
    return found[-1] if found else OffsetPosition(BASE, 0)


def brute_upper_bound(entries: Sequence[OffsetPosition], position: int) -> OffsetPosition | None:
    return next((e for e in entries if e.position >= position), None)


@st.composite
def sparse_entries(draw: st.DrawFn, min_size: int = 0, max_size: int = 60) -> list[OffsetPosition]:
    """Strictly increasing offsets and positions with random gaps, as a segment writes them."""
    gaps = draw(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=max_size))
    gaps = gaps if len(gaps) >= min_size else gaps + [(1, 1)] * (min_size - len(gaps))
    offset, position, entries = BASE - 1, 0, []
    for offset_gap, position_gap in gaps:
        offset += offset_gap
        entries.append(OffsetPosition(offset, position))
        position += position_gap
    return entries


def random_entries(seed: int, count: int, offset_gap_max: int) -> list[OffsetPosition]:
    """A large sparse entry set, generated from a hypothesis-drawn seed (fast to build)."""
    rng = random.Random(seed)
    offset, position, entries = BASE + rng.randrange(3), 0, []
    for _ in range(count):
        entries.append(OffsetPosition(offset, position))
        offset += rng.randint(1, offset_gap_max)
        position += rng.randint(1, 9000)
    return entries


@EXAMPLES
@given(entries=sparse_entries(), data=st.data())
def test_lookup_matches_a_brute_force_scan_on_small_indexes(
    tmp_path: Path, entries: list[OffsetPosition], data: st.DataObject
) -> None:
    """Greatest entry <= target, or (base_offset, 0): below, on, between and above entries."""
    last = entries[-1].offset if entries else BASE
    targets = data.draw(st.lists(st.integers(BASE - 20, last + 20), min_size=1, max_size=30))
    targets += [e.offset for e in entries]
    with new_index(tmp_path, entries, max_index_size=8 * 64) as index:
        for target in targets:
            assert index.lookup(target) == brute_lookup(entries, target)


@EXAMPLES
@given(
    seed=st.integers(0, 2**32),
    count=st.integers(1025, 4000),
    offset_gap_max=st.sampled_from([1, 3, 1000]),
    data=st.data(),
)
def test_lookup_matches_a_brute_force_scan_in_warm_and_cold_parts(
    tmp_path: Path, seed: int, count: int, offset_gap_max: int, data: st.DataObject
) -> None:
    """More than 1024 entries, so targets fall both in the warm section and before it."""
    entries = random_entries(seed, count, offset_gap_max)
    first_hot = count - 1 - 1024
    cold = st.integers(BASE - 5, entries[first_hot].offset - 1)
    warm = st.integers(entries[first_hot].offset, entries[-1].offset + 5)
    exact = st.sampled_from(entries).map(lambda e: e.offset)
    targets = data.draw(st.lists(st.one_of(cold, warm, exact), min_size=5, max_size=40))
    with new_index(tmp_path, entries, max_index_size=8 * count) as index:
        assert index.is_full()
        for target in targets:
            assert index.lookup(target) == brute_lookup(entries, target)
        for entry in (entries[0], entries[first_hot - 1], entries[first_hot], entries[-1]):
            assert index.lookup(entry.offset) == entry


@EXAMPLES
@given(entries=sparse_entries(), data=st.data())
def test_fetch_upper_bound_matches_a_brute_force_scan(
    tmp_path: Path, entries: list[OffsetPosition], data: st.DataObject
) -> None:
    """The first entry at or past fetch position + fetch size bounds a fetch from above."""
    last = entries[-1].position if entries else 0
    start = data.draw(st.integers(0, last + 10))
    size = data.draw(st.integers(0, 20_000))
    with new_index(tmp_path, entries, max_index_size=8 * 64) as index:
        got = index.fetch_upper_bound_offset(OffsetPosition(BASE, start), size)
        assert got == brute_upper_bound(entries, start + size)


@EXAMPLES
@given(
    seed=st.integers(0, 2**32),
    count=st.integers(1025, 3000),
    data=st.data(),
)
def test_fetch_upper_bound_matches_a_brute_force_scan_on_large_indexes(
    tmp_path: Path, seed: int, count: int, data: st.DataObject
) -> None:
    """Same rule across the warm and cold parts."""
    entries = random_entries(seed, count, 10)
    position = data.draw(st.integers(0, entries[-1].position + 10))
    with new_index(tmp_path, entries, max_index_size=8 * count) as index:
        assert index.fetch_upper_bound_offset(OffsetPosition(BASE, position), 0) == (
            brute_upper_bound(entries, position)
        )


@EXAMPLES
@given(entries=sparse_entries(min_size=1), data=st.data())
def test_truncate_to_keeps_exactly_the_entries_below_the_offset(
    tmp_path: Path, entries: list[OffsetPosition], data: st.DataObject
) -> None:
    """After truncate_to(o) every remaining entry is < o and every dropped one was >= o."""
    target = data.draw(st.integers(BASE - 5, entries[-1].offset + 5))
    with new_index(tmp_path, entries, max_index_size=8 * 64) as index:
        index.truncate_to(target)
        kept = [e for e in entries if e.offset < target]
        assert [index.entry(n) for n in range(index.entries)] == kept


def test_lookup_of_an_empty_index_is_the_base_offset_at_position_zero(tmp_path: Path) -> None:
    """A reader then scans the log from its start."""
    with new_index(tmp_path, [], 80) as index:
        assert index.lookup(BASE + 100) == OffsetPosition(BASE, 0)
        assert index.lookup(0) == OffsetPosition(BASE, 0)
        assert index.last_offset == BASE
        assert index.fetch_upper_bound_offset(OffsetPosition(BASE, 0), 100) is None


ENTRIES = [
    OffsetPosition(BASE + 10, 0),
    OffsetPosition(BASE + 20, 500),
    OffsetPosition(BASE + 30, 900),
]


@pytest.mark.parametrize(
    ("truncate_to", "kept"),
    [
        (BASE + 31, 3),  # above the last entry: nothing changes
        (BASE + 30, 2),  # exact hit on the last entry drops it
        (BASE + 25, 2),  # between entries
        (BASE + 20, 1),  # exact hit in the middle drops that slot too
        (BASE + 11, 1),
        (BASE + 10, 0),  # exact hit on the first entry
        (BASE + 5, 0),  # below every entry
        (BASE - 5, 0),  # below the base offset
    ],
)
def test_truncate_to_drops_entries_at_or_after_the_offset(
    tmp_path: Path, truncate_to: int, kept: int
) -> None:
    """Log truncation removes offsets >= the new log end, including an exact hit."""
    with new_index(tmp_path, ENTRIES, 80) as index:
        index.truncate_to(truncate_to)
        assert index.entries == kept
        assert index.last_offset == (ENTRIES[kept - 1].offset if kept else BASE)
        index.append(BASE + 40, 2000)
        assert index.entry(kept) == OffsetPosition(BASE + 40, 2000)


@pytest.mark.parametrize("offset", [BASE + 20, BASE + 19, BASE])
def test_append_of_an_offset_not_larger_than_the_last_is_refused(
    tmp_path: Path, offset: int
) -> None:
    """Offsets strictly increase, or binary search would give wrong answers."""
    with new_index(tmp_path, ENTRIES[:2], 80) as index:
        with pytest.raises(InvalidOffsetError, match=rf"offset {offset} .*\({BASE + 20}\)"):
            index.append(offset, 800)
        assert index.entries == 2


def test_append_to_a_full_index_is_refused(tmp_path: Path) -> None:
    """A full offset index makes the segment roll; appending past it would overrun the map."""
    with new_index(tmp_path, ENTRIES[:2], 16) as index:
        assert index.is_full()
        with pytest.raises(InvalidOffsetError, match="full"):
            index.append(BASE + 50, 1000)


@pytest.mark.parametrize("offset", [BASE - 1, BASE + 2**31])
def test_append_of_an_offset_outside_int32_of_the_base_is_refused(
    tmp_path: Path, offset: int
) -> None:
    """The relative offset is 4 bytes; the segment must roll before this happens."""
    with new_index(tmp_path, [], 80) as index, pytest.raises(InvalidOffsetError, match=str(offset)):
        index.append(offset, 0)


def test_entry_out_of_range_is_an_index_error(tmp_path: Path) -> None:
    """Only slots below ``entries`` hold entries; the rest is preallocated zeroes."""
    with new_index(tmp_path, ENTRIES, 80) as index:
        assert index.entry(2) == ENTRIES[2]
        with pytest.raises(IndexError):
            index.entry(3)
        with pytest.raises(IndexError):
            index.entry(-1)


def test_sanity_check_passes_on_a_healthy_index(tmp_path: Path) -> None:
    """Trimmed and untrimmed files of whole entries are fine."""
    with new_index(tmp_path, ENTRIES, 80) as index:
        index.sanity_check()
        index.trim_to_valid_size()
        index.sanity_check()


def test_sanity_check_rejects_a_length_that_is_not_whole_entries(tmp_path: Path) -> None:
    """A torn file: its last entry is partial."""
    path = tmp_path / "1000.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00")
    corrupt = r"1000\.index.*length 11 bytes"
    with (
        OffsetIndex(path, BASE, writable=False) as index,
        pytest.raises(CorruptIndexError, match=corrupt),
    ):
        index.sanity_check()


def test_sanity_check_rejects_a_last_offset_below_the_base_offset(tmp_path: Path) -> None:
    """A negative relative offset cannot have been written by append."""
    path = tmp_path / "1000.index"
    path.write_bytes(struct.pack(">iiii", 1, 0, -1, 100))
    corrupt = r"1000\.index.*last offset 999 .*base offset 1000"
    with (
        OffsetIndex(path, BASE, writable=False) as index,
        pytest.raises(CorruptIndexError, match=corrupt),
    ):
        index.sanity_check()


def test_sanity_check_accepts_a_last_offset_equal_to_the_base_offset(tmp_path: Path) -> None:
    """Kafka's rule is strictly below the base: an entry for the base offset itself is valid."""
    path = tmp_path / "1000.index"
    path.write_bytes(struct.pack(">ii", 0, 0))
    with OffsetIndex(path, BASE, writable=False) as index:
        index.sanity_check()
