"""FileRecords' header walk: the offset search reads the file a block at a time (one ``pread``
for many small batches, not one per batch) and finds exactly what a walk of the parsed headers
finds, across block boundaries, for legacy messages too; a damaged header fails the same way."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kafkasim.common.errors import CorruptRecordError
from kafkasim.storage import file_records
from kafkasim.storage.file_records import FileRecords, LogOffsetPosition
from kafkasim.storage.records.batch import MAGIC_OFFSET, RecordBatchBuilder
from kafkasim.storage.records.entry import decode_entries
from kafkasim.storage.records.legacy import encode_legacy
from tests.unit.storage.logtools import T0, make_batch, open_log


def _batch(base_offset: int, count: int, value_size: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset)
    for _ in range(count):
        builder.append(T0, None, b"v" * value_size)
    return builder.build()


def _file(path: Path, entries: list[bytes]) -> FileRecords:
    records = FileRecords(path / "00000000000000000000.log")
    for entry in entries:
        records.append([entry], len(entry))
    return records


def _small_batches(n: int) -> list[bytes]:
    """``n`` batches of 1-3 records with dense offsets, ~90-200 bytes each."""
    out: list[bytes] = []
    offset = 0
    for i in range(n):
        count = 1 + i % 3
        out.append(_batch(offset, count, 20 + i % 7))
        offset += count
    return out


def _expected(records: FileRecords, target: int, start: int) -> LogOffsetPosition | None:
    for position, header in records.batch_headers(start):
        if header.last_offset >= target:
            return LogOffsetPosition(header.last_offset, position, header.size_in_bytes)
    return None


def test_the_offset_search_agrees_with_the_header_walk_across_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_records, "_SCAN_BLOCK_BYTES", 500)  # many boundaries
    records = _file(tmp_path, _small_batches(60))
    positions = [position for position, _ in records.batch_headers(0)]
    last = max(h.last_offset for _, h in records.batch_headers(0))
    for start in (0, positions[7], positions[31]):
        for target in range(last + 2):
            assert records.search_for_offset_with_size(target, start) == _expected(
                records, target, start
            )
    records.close()


def test_the_offset_search_reads_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _file(tmp_path, _small_batches(100))
    assert records.size < file_records._SCAN_BLOCK_BYTES
    reads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(file_records.os, "pread", counting_pread)
    found = records.search_for_offset_with_size(10**6, 0)  # walks every batch, finds none
    assert found is None
    assert len(reads) == 1  # one read for 100 batches (the walk used to read each header)
    records.close()


def test_legacy_messages_are_searched_through_their_own_headers(tmp_path: Path) -> None:
    legacy = [encode_legacy([(T0, None, b"old")], magic=1, base_offset=o) for o in range(5)]
    records = _file(tmp_path, [*legacy, _batch(5, 2, 10)])
    assert records.search_for_offset_with_size(3, 0) == _expected(records, 3, 0)
    assert records.search_for_offset_with_size(6, 0) == _expected(records, 6, 0)
    assert records.search_for_offset_with_size(6, 0) is not None
    records.close()


def test_a_damaged_header_fails_the_search_as_it_fails_the_walk(tmp_path: Path) -> None:
    entries = _small_batches(10)
    damaged = bytearray(entries[4])
    damaged[MAGIC_OFFSET] = 7
    entries[4] = bytes(damaged)
    records = _file(tmp_path, entries)
    with pytest.raises(CorruptRecordError, match="magic 7") as walk:
        list(records.batch_headers(0))
    with pytest.raises(CorruptRecordError, match="magic 7") as search:
        records.search_for_offset_with_size(10**6, 0)
    assert str(search.value) == str(walk.value)
    records.close()


def test_a_partial_last_entry_ends_the_search_quietly(tmp_path: Path) -> None:
    entries = _small_batches(5)
    records = _file(tmp_path, [*entries, _batch(100, 3, 50)[:70]])  # header whole, body cut
    assert records.search_for_offset_with_size(10**6, 0) is None
    records.close()


def _preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file positions of every ``pread`` from now on."""
    positions: list[int] = []
    real_pread = os.pread

    def recording_pread(fd: int, n: int, offset: int) -> bytes:
        positions.append(offset)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(file_records.os, "pread", recording_pread)
    return positions


def test_a_read_cuts_to_whole_entries(tmp_path: Path) -> None:
    entries = _small_batches(6)
    records = _file(tmp_path, entries)
    two = len(entries[0]) + len(entries[1])
    assert records.read_entries(0, two + len(entries[2]) - 1) == entries[0] + entries[1]
    assert records.read_entries(len(entries[0]), 10**6) == b"".join(entries[1:])
    assert records.read_entries(0, 11) == b""
    records.close()


def test_a_search_where_the_last_read_ended_starts_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = _small_batches(40)
    records = _file(tmp_path, entries)
    cut = sum(len(e) for e in entries[:25])
    data = records.read_entries(0, cut)  # a fetch of the first 25 batches
    next_offset = max(h.last_offset for p, h in records.batch_headers(0) if p < cut) + 1
    reads = _preads(monkeypatch)
    found = records.search_for_offset_with_size(next_offset, 0)  # the next fetch
    assert reads == [cut]  # nothing before the read's end is read again
    assert found == _expected(records, next_offset, 0)
    assert found is not None and found.position == len(data) == cut
    reads.clear()
    # A smaller offset is found by the full walk, from where the caller says.
    found = records.search_for_offset_with_size(3, 0)
    assert reads == [0]
    assert found == _expected(records, 3, 0)
    records.close()


def test_readers_at_different_places_each_find_where_their_last_read_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition has a few readers (followers to the log end, consumers to the HW): each
    one's next search starts where its own last read ended, whatever the others read since."""
    entries = _small_batches(60)
    records = _file(tmp_path, entries)
    headers = list(records.batch_headers(0))
    cuts = [sum(len(e) for e in entries[:n]) for n in (12, 30, 47)]
    next_offsets = [max(h.last_offset for p, h in headers if p < cut) + 1 for cut in cuts]
    for cut in cuts:
        records.read_entries(0, cut)
    reads = _preads(monkeypatch)
    for cut, next_offset in zip(cuts, next_offsets, strict=True):
        reads.clear()
        found = records.search_for_offset_with_size(next_offset, 0)
        assert reads == [cut]
        assert found is not None and found.position == cut
    records.close()


def test_a_truncation_forgets_what_was_scanned(tmp_path: Path) -> None:
    entries = _small_batches(30)
    records = _file(tmp_path, entries)
    records.read_entries(0, 10**6)
    # The tail is rewritten with the same offsets in batches of other sizes: a remembered end
    # of the old tail would now point into the middle of a batch.
    keep = sum(len(e) for e in entries[:10])
    first = max(h.last_offset for p, h in records.batch_headers(0) if p < keep) + 1
    records.truncate_to(keep)
    for base in range(first, first + 120, 4):
        batch = _batch(base, 4, 3)
        records.append([batch], len(batch))
    for target in range(first + 121):
        assert records.search_for_offset_with_size(target, 0) == _expected(records, target, 0)
    records.close()


def test_searches_reads_and_truncations_in_any_order_agree_with_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_records, "_SCAN_BLOCK_BYTES", 300)
    rng = random.Random(17)
    records = _file(tmp_path, [])
    next_offset = 0
    for _ in range(600):
        positions = [p for p, _ in records.batch_headers(0)]
        action = rng.random()
        if action < 0.3 or not positions:
            count = rng.randint(1, 4)
            batch = _batch(next_offset, count, rng.randint(1, 40))
            records.append([batch], len(batch))
            next_offset += count
        elif action < 0.55:
            records.read_entries(rng.choice(positions), rng.randint(0, 1500))
        elif action < 0.6:
            cut = rng.choice(positions)
            records.truncate_to(cut)
            headers = [h for p, h in records.batch_headers(0)]
            next_offset = headers[-1].last_offset + 1 if headers else rng.randint(0, 5)
        else:
            start = rng.choice(positions)
            target = rng.randint(0, next_offset + 2)
            assert records.search_for_offset_with_size(target, start) == _expected(
                records, target, start
            )
    records.close()


def test_a_read_after_a_search_takes_its_bytes_from_the_searched_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's read (search, then read): the entries come from the block the search read
    when it holds them all (one ``pread`` for both), from the file otherwise; the same bytes
    either way, cut to whole entries alike."""
    monkeypatch.setattr(file_records, "_SCAN_BLOCK_BYTES", 700)  # blocks that end mid-file
    entries = _small_batches(30)
    records = _file(tmp_path, entries)
    headers = list(records.batch_headers(0))
    for _, header in headers[::3]:
        for size in (0, 11, 150, 400, 10**6):
            found, scanned = records.locate(header.base_offset, 0)
            assert found is not None and found == _expected(records, header.base_offset, 0)
            expected = records.read_entries(found.position, size)  # from the file
            covered = min(found.position + size, records.size) <= scanned.start + len(scanned.data)
            with monkeypatch.context() as patch:
                reads = _preads(patch)
                assert records.read_entries(found.position, size, scanned) == expected
            assert reads == ([] if covered else [found.position])
    records.close()


def test_a_segment_read_near_the_log_end_reads_the_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(make_batch([f"v{i}".encode()]), leader_epoch=0)
    reads = _preads(monkeypatch)
    info = log.read(3, 1 << 20)
    assert len(reads) == 1  # the search's block; the batches are taken from it
    assert [r.value for _, rs in decode_entries(info.records) for r in rs] == [b"v3", b"v4"]
    log.close()


def test_a_segment_skips_its_index_where_an_end_is_remembered_and_finds_the_same(
    tmp_path: Path,
) -> None:
    """A segment looks an offset up in its index only when its file does not remember where
    the entry before it ended: either way the batch found is the one the walk finds, from
    any start (an entry's position)."""
    log, _ = open_log(tmp_path, **{"index.interval.bytes": 200})
    next_offset = 0
    for i in range(80):
        count = 1 + i % 3
        log.append_as_leader(make_batch([b"v%d" % i] * count), leader_epoch=0)
        next_offset += count
    segment = log.segments.active
    records = segment.log
    assert segment.offset_index.entries > 5
    for fetch_offset in range(0, next_offset, 5):  # readers remember where they stopped
        log.read(fetch_offset, 700)
    remembered = [o for o in range(next_offset + 1) if records.start_known(o) is not None]
    assert 10 < len(remembered) < next_offset
    positions = [position for position, _ in records.batch_headers(0)]
    for target in range(next_offset + 1):
        for start in (0, positions[7], positions[40]):
            expected = _expected(records, target, start)
            assert segment.translate_offset(target, start) == expected
    log.close()
