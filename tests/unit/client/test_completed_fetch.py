"""What the consumer reads of a fetch answer by isolation level (``client.completed_fetch``):
control batches never give records; with read_committed the batches of the aborted
transactions the answer names are skipped, per batch and without decoding them, and a
producer's ABORT marker ends its aborted transaction, as Kafka's ``CompletedFetch`` does.

Why: a read_committed consumer must never return a record of an aborted transaction, and must
return every committed one, whatever the interleaving of producers and transactions."""

from __future__ import annotations

import pytest

from kafkasim.client.completed_fetch import consumed_entries
from kafkasim.common.errors import CorruptRecordError
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    compute_crc,
)
from tests.txn_records import ABORT, COMMIT, Producer


def read(
    data: bytes, aborted: list[tuple[int, int]] | None, fetch_offset: int = 0
) -> tuple[list[int], list[bytes | None]]:
    """(next offsets of every entry, values of the records returned)."""
    ends: list[int] = []
    values: list[bytes | None] = []
    for header, records in consumed_entries(data, fetch_offset=fetch_offset, aborted=aborted):
        ends.append(header.next_offset)
        values.extend(r.value for r in records)
    return ends, values


def interleaved() -> bytes:
    """P1 aborts at 0-1, P2 commits 2, P1 commits 5, an idempotent P7 batch at 6."""
    p1, p2, p7 = Producer(1), Producer(2), Producer(7)
    return b"".join(
        (
            p1.batch(2, base_offset=0),  # 0-1  b"p1-0", b"p1-1"
            p2.batch(base_offset=2),  # 2      b"p2-0"
            p1.marker(ABORT, base_offset=3),  # 3
            p2.marker(COMMIT, base_offset=4),  # 4
            p1.batch(base_offset=5),  # 5      b"p1-2"
            p7.batch(transactional=False, base_offset=6),  # 6  b"p7-0"
            p1.marker(COMMIT, base_offset=7),  # 7
        )
    )


def test_read_committed_skips_the_aborted_transactions_and_every_marker() -> None:
    ends, values = read(interleaved(), [(1, 0)])
    assert values == [b"p2-0", b"p1-2", b"p7-0"]
    assert ends == [2, 3, 4, 5, 6, 7, 8]  # every entry is walked past, read or not


def test_read_uncommitted_reads_every_data_batch_and_no_marker() -> None:
    _, values = read(interleaved(), None)
    assert values == [b"p1-0", b"p1-1", b"p2-0", b"p1-2", b"p7-0"]


def test_read_committed_without_aborted_transactions_reads_the_committed_data() -> None:
    _, values = read(interleaved(), [])
    assert values == [b"p1-0", b"p1-1", b"p2-0", b"p1-2", b"p7-0"]


def test_the_abort_marker_ends_only_its_own_transaction() -> None:
    """P1 aborts twice, then commits: only the third transaction is read. P1's earlier
    committed batch (below its first aborted offset) is read too: the heap is by offset."""
    p1 = Producer(1)
    data = b"".join(
        (
            p1.batch(base_offset=0),  # committed
            p1.marker(COMMIT, base_offset=1),
            p1.batch(base_offset=2),  # aborted
            p1.marker(ABORT, base_offset=3),
            p1.batch(base_offset=4),  # aborted
            p1.marker(ABORT, base_offset=5),
            p1.batch(base_offset=6),  # committed
            p1.marker(COMMIT, base_offset=7),
        )
    )
    _, values = read(data, [(1, 4), (1, 2)])  # in any order
    assert values == [b"p1-0", b"p1-3"]


def test_records_below_the_fetch_offset_are_dropped_as_before() -> None:
    _, values = read(interleaved(), [(1, 0)], fetch_offset=2)
    assert values == [b"p2-0", b"p1-2", b"p7-0"]
    p3 = Producer(3)
    _, values = read(p3.batch(3, base_offset=10), [], fetch_offset=11)
    assert values == [b"p3-1", b"p3-2"]


def _with_attributes(batch: bytes, attributes: int) -> bytes:
    data = bytearray(batch)
    data[ATTRIBUTES_OFFSET : ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big")
    data[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


def test_an_aborted_batch_is_checked_but_never_decoded() -> None:
    p1 = Producer(1)
    # Codec 7 does not exist: decoding this batch fails; its CRC is right.
    undecodable = _with_attributes(p1.batch(base_offset=0), 0x10 | 7)
    data = undecodable + p1.marker(ABORT, base_offset=1)
    assert read(data, [(1, 0)]) == ([1, 2], [])
    with pytest.raises(CorruptRecordError):
        read(data, None)  # read_uncommitted decodes it
    corrupt = bytearray(p1.batch(base_offset=0))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="has CRC"):
        read(bytes(corrupt) + p1.marker(ABORT, base_offset=1), [(1, 0)])
