"""AbstractIndex behaviour shared by both index kinds: sizing, mapping, lifecycle, search rule."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import pytest

from kafkasim.common.errors import InvalidOffsetError
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.storage.index import WARM_SECTION_BYTES, AbstractIndex
from kafkasim.storage.offset_index import OffsetIndex, OffsetPosition
from kafkasim.storage.time_index import TimeIndex, TimestampOffset

MIB_10 = 10 * 1024 * 1024
BOTH = pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex], ids=["offset", "time"])


def fill(index: AbstractIndex, count: int, start: int | None = None) -> None:
    """Append ``count`` entries at offsets base+1, base+2, ... (timestamps 1000, 1001, ...)."""
    first = index.base_offset + 1 if start is None else start
    for i in range(count):
        if isinstance(index, OffsetIndex):
            index.append(first + i, 100 * i)
        else:
            assert isinstance(index, TimeIndex)
            index.maybe_append(1000 + i, first + i)


@pytest.mark.parametrize(
    ("cls", "max_index_size", "length", "max_entries"),
    [
        (OffsetIndex, 75, 72, 9),
        (TimeIndex, 75, 72, 6),
        (OffsetIndex, 8, 8, 1),
        (TimeIndex, 23, 12, 1),
        (OffsetIndex, MIB_10, 10_485_760, 1_310_720),
        (TimeIndex, MIB_10, 10_485_756, 873_813),
    ],
)
def test_new_index_is_preallocated_to_max_size_rounded_down_to_whole_entries(
    tmp_path: Path, cls: type[AbstractIndex], max_index_size: int, length: int, max_entries: int
) -> None:
    """Appends must never grow the file, so a new index takes its whole budget up front."""
    path = tmp_path / "0.index"
    with cls(path, 0, max_index_size) as index:
        assert index.length_bytes == length
        assert path.stat().st_size == length
        assert index.max_entries == max_entries
        assert index.entries == 0


def test_default_max_index_size_is_segment_index_bytes(tmp_path: Path) -> None:
    """``segment.index.bytes`` defaults to 10 MiB."""
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        assert index.max_index_size == MIB_10
        assert index.max_entries == 1_310_720


@BOTH
def test_max_index_size_below_one_entry_is_refused(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """An index that cannot hold a single entry is a configuration error."""
    with pytest.raises(ValueError, match="invalid max index size 7"):
        cls(tmp_path / "0.index", 0, 7)


@BOTH
def test_close_trims_the_file_to_its_entries_and_reopen_counts_them(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """A reopened index knows its entry count only because close cut the preallocated tail."""
    path = tmp_path / "0.index"
    index = cls(path, 50, 1024)
    fill(index, 5)
    index.close()
    assert path.stat().st_size == 5 * cls.entry_size
    with cls(path, 50, 1024) as reopened:
        assert reopened.entries == 5
        assert reopened.max_entries == 5
        assert reopened.is_full()
        assert reopened.length_bytes == 5 * cls.entry_size


def test_reopened_index_returns_the_same_entries(tmp_path: Path) -> None:
    """The bytes on disk are the index: nothing lives only in memory."""
    path = tmp_path / "0.index"
    with OffsetIndex(path, 1000, 1024) as index:
        index.append(1003, 0)
        index.append(1010, 4200)
    with OffsetIndex(path, 1000, 1024, writable=False) as reopened:
        assert [reopened.entry(0), reopened.entry(1)] == [(1003, 0), (1010, 4200)]
        assert reopened.last_offset == 1010


@BOTH
def test_close_handler_leaves_the_preallocated_file_which_reopens_as_full(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """An untrimmed file (a crash) reopens with every slot counted; recovery must reset it."""
    path = tmp_path / "0.index"
    index = cls(path, 0, 120)
    fill(index, 2)
    index.close_handler()
    assert path.stat().st_size == 120
    with cls(path, 0, 120) as reopened:
        assert reopened.entries == reopened.max_entries == 120 // cls.entry_size
        reopened.reset()
        assert reopened.entries == 0


@BOTH
def test_close_is_idempotent(tmp_path: Path, cls: type[AbstractIndex]) -> None:
    """Segment close and log close may both close an index."""
    index = cls(tmp_path / "0.index", 0, 120)
    index.close()
    index.close()
    index.close_handler()
    assert index.closed


@BOTH
def test_reset_drops_entries_and_restores_the_full_size(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """Recovery rebuilds into a reset index, which must have its whole budget again."""
    path = tmp_path / "0.index"
    with cls(path, 0, 240) as index:
        fill(index, 4)
        index.trim_to_valid_size()
        assert index.length_bytes == 4 * cls.entry_size
        index.reset()
        assert index.entries == 0
        assert index.length_bytes == path.stat().st_size == 240 // cls.entry_size * cls.entry_size
        fill(index, 6)
        assert index.entries == 6


@BOTH
def test_truncate_removes_every_entry_but_keeps_the_file_length(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """truncate() is about entries; resizing is a separate decision."""
    with cls(tmp_path / "0.index", 0, 240) as index:
        fill(index, 3)
        index.truncate()
        assert index.entries == 0
        assert index.length_bytes == 240


@pytest.mark.parametrize(
    ("new_size", "changed", "length"),
    [(80, False, 80), (87, False, 80), (64, True, 64), (167, True, 160)],
)
def test_resize_rounds_down_to_whole_entries_and_keeps_entries(
    tmp_path: Path, new_size: int, changed: bool, length: int
) -> None:
    """resize() reports whether the file changed; entries survive the remap."""
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 80) as index:
        fill(index, 3)
        assert index.resize(new_size) is changed
        assert index.length_bytes == path.stat().st_size == length
        assert index.max_entries == length // 8
        assert index.entries == 3
        assert index.lookup(3) == OffsetPosition(3, 200)
        index.append(10, 900)


def test_resize_below_the_entries_is_refused(tmp_path: Path) -> None:
    """Dropping entries is truncate_to's job; resize must not lose them silently."""
    with OffsetIndex(tmp_path / "0.index", 0, 80) as index:
        fill(index, 3)
        with pytest.raises(ValueError, match="3 entries"):
            index.resize(16)


@BOTH
def test_trim_of_an_empty_index_leaves_a_zero_length_file(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """Python cannot map zero bytes, so an empty trimmed index must live without a map."""
    path = tmp_path / "0.index"
    with cls(path, 7, 120) as index:
        index.trim_to_valid_size()
        assert path.stat().st_size == 0
        assert index.max_entries == 0
        assert index.is_full()
        index.reset()
        assert index.length_bytes == 120
        fill(index, 1)
    assert path.stat().st_size == cls.entry_size


@BOTH
def test_zero_length_file_opens_read_only_with_no_entries(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """Segments closed while empty leave zero-length index files behind."""
    path = tmp_path / "7.index"
    path.touch()
    with cls(path, 7, 120, writable=False) as index:
        assert index.entries == 0
        assert index.length_bytes == 0
        index.sanity_check()
        index.truncate_to(3)
        if isinstance(index, OffsetIndex):
            assert index.lookup(100) == OffsetPosition(7, 0)
            assert index.last_offset == 7
        else:
            assert isinstance(index, TimeIndex)
            assert index.lookup(100) == TimestampOffset(-1, 7)
    assert path.stat().st_size == 0


@BOTH
def test_zero_length_file_opened_writable_is_preallocated(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """An empty file is treated as new: the active segment needs its slots."""
    path = tmp_path / "7.index"
    path.touch()
    with cls(path, 7, 120) as index:
        assert index.length_bytes == path.stat().st_size == 120 // cls.entry_size * cls.entry_size
        assert index.entries == 0


@BOTH
def test_read_only_index_serves_lookups_and_refuses_changes(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """Inactive segments are opened read-only; writing through them is a bug."""
    path = tmp_path / "0.index"
    with cls(path, 0, 240) as index:
        fill(index, 3)
    before = path.read_bytes()
    with cls(path, 0, 240, writable=False) as index:
        assert not index.writable
        assert index.entries == 3
        with pytest.raises(io.UnsupportedOperation, match="read-only"):
            fill(index, 1, start=10)
        with pytest.raises(io.UnsupportedOperation):
            index.resize(240)
        with pytest.raises(io.UnsupportedOperation):
            index.reset()
        index.flush()
    assert path.read_bytes() == before


def test_read_only_open_of_a_missing_file_does_not_create_it(tmp_path: Path) -> None:
    """Only a writable index may create its file."""
    path = tmp_path / "0.index"
    with pytest.raises(FileNotFoundError):
        OffsetIndex(path, 0, writable=False)
    assert not path.exists()


def test_set_writable_remaps_the_file(tmp_path: Path) -> None:
    """A segment truncated back to active needs its read-only index writable again."""
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 80) as index:
        index.append(1, 0)
        index.set_writable(False)
        with pytest.raises(io.UnsupportedOperation):
            index.append(2, 10)
        index.set_writable(True)
        index.append(2, 10)
        assert index.lookup(5) == OffsetPosition(2, 10)


@pytest.mark.parametrize(
    ("offset", "relative"),
    [(100, 0), (101, 1), (100 + INT32_MAX, INT32_MAX), (99, None), (101 + INT32_MAX, None)],
)
def test_relative_offset_must_fit_a_non_negative_int32(
    tmp_path: Path, offset: int, relative: int | None
) -> None:
    """Entries store offset - base_offset in 4 bytes; anything else forces a segment roll."""
    with OffsetIndex(tmp_path / "100.index", 100, 80) as index:
        assert index.can_append_offset(offset) is (relative is not None)
        if relative is None:
            with pytest.raises(InvalidOffsetError, match=str(offset)):
                index.relative_offset(offset)
        else:
            assert index.relative_offset(offset) == relative


@BOTH
def test_delete_if_exists_reports_whether_a_file_was_deleted(
    tmp_path: Path, cls: type[AbstractIndex]
) -> None:
    """Retention and the cleaner delete indexes that may already be gone."""
    path = tmp_path / "0.index"
    index = cls(path, 0, 120)
    assert index.delete_if_exists() is True
    assert not path.exists()
    assert index.delete_if_exists() is False
    assert index.closed


def test_rename_to_moves_the_file_and_keeps_the_map(tmp_path: Path) -> None:
    """Segments are renamed (.deleted, .swap) while their index stays in use."""
    old, new = tmp_path / "0.index", tmp_path / "0.index.deleted"
    with OffsetIndex(old, 0, 80) as index:
        index.append(4, 40)
        index.rename_to(new)
        assert index.path == new
        assert new.exists() and not old.exists()
        assert index.lookup(9) == OffsetPosition(4, 40)
    assert new.stat().st_size == 8


def test_update_parent_dir_only_changes_the_recorded_path(tmp_path: Path) -> None:
    """The log renames its directory itself; the index just follows."""
    with OffsetIndex(tmp_path / "0.index", 0, 80) as index:
        index.update_parent_dir(tmp_path / "elsewhere")
        assert index.path == tmp_path / "elsewhere" / "0.index"
        index.update_parent_dir(tmp_path)


def test_a_closed_index_refuses_lookups(tmp_path: Path) -> None:
    """Reading an unmapped index would be a use-after-close bug."""
    index = OffsetIndex(tmp_path / "0.index", 0, 80)
    index.append(1, 0)
    index.close()
    with pytest.raises(ValueError, match="closed"):
        index.lookup(1)


def test_flush_writes_entries_through_to_the_file(tmp_path: Path) -> None:
    """flush() is msync: the bytes are in the file without closing the index."""
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 80) as index:
        index.append(3, 77)
        index.flush()
        assert path.read_bytes()[:8] == struct.pack(">ii", 3, 77)


@pytest.mark.parametrize(("cls", "warm"), [(OffsetIndex, 1024), (TimeIndex, 682)])
def test_warm_section_is_the_last_8_kib_of_entries(cls: type[AbstractIndex], warm: int) -> None:
    """Kafka's warm section: 8192 bytes, small enough to stay in the page cache."""
    assert WARM_SECTION_BYTES // cls.entry_size == warm


def test_lookups_in_the_warm_section_never_read_the_cold_part(tmp_path: Path) -> None:
    """The cold part is overwritten with garbage; warm targets must still be answered."""
    path = tmp_path / "0.index"
    count = 3000
    first_hot = count - 1 - 1024
    good = b"".join(struct.pack(">ii", 2 * i, 10 * i) for i in range(count))
    garbage = b"\x7f" * (8 * first_hot)  # huge keys: any read of them misleads the search
    path.write_bytes(garbage + good[8 * first_hot :])
    with OffsetIndex(path, 0, writable=False) as index:
        for target in (2 * first_hot, 2 * first_hot + 1, 2 * (count - 1), 10**9):
            slot = min(target // 2, count - 1)
            assert index.lookup(target) == OffsetPosition(2 * slot, 10 * slot)


def test_opening_and_searching_a_large_index_allocates_no_per_entry_objects(
    tmp_path: Path,
) -> None:
    """A broker opens thousands of segments: an index must cost O(1) Python memory."""
    path = tmp_path / "0.index"
    count = 200_000
    path.write_bytes(b"".join(struct.pack(">ii", i, i) for i in range(count)))
    tracemalloc.start()
    try:
        with OffsetIndex(path, 0, writable=False) as index:
            for target in range(0, count, 997):
                index.lookup(target)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
