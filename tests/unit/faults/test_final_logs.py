"""A replica's final log read in undecoded chunks and split through the memo is the log
``split_entries`` makes of ``Log.batches()``, whether a chunk was decoded before or not."""

from __future__ import annotations

from pathlib import Path

from kafkasim.faults.final_logs import ChunkMemo, Entry, split_chunks, split_entries
from kafkasim.storage.log import Log
from kafkasim.storage.log_read import read_chunks
from tests.unit.storage.logtools import make_batch, open_log


def _reference(log: Log) -> tuple[list[Entry], list[Entry]]:
    entries: list[Entry] = []
    markers: list[Entry] = []
    split_entries(log.batches(max_bytes=300), entries, markers)
    return entries, markers


def _chunked(log: Log, memo: ChunkMemo) -> tuple[list[Entry], list[Entry]]:
    entries: list[Entry] = []
    markers: list[Entry] = []
    chunks = read_chunks(log.read, log.log_start_offset, log.log_end_offset, 300)
    split_chunks(chunks, entries, markers, memo)
    return entries, markers


def test_chunks_split_as_the_decoded_batches(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.bytes": 1024})
    for i in range(40):
        log.append_as_leader(make_batch([b"v%d" % i, None, b"w%d" % i]), leader_epoch=0)
    assert len(log.segments) > 1  # chunks end at segment ends too
    expected = _reference(log)
    assert len(expected[0]) == 120
    memo: ChunkMemo = {}
    assert _chunked(log, memo) == expected
    assert len(memo) > 2
    assert _chunked(log, memo) == expected  # every chunk from the memo
    log.close()
