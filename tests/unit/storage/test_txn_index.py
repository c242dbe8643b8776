"""The aborted transaction index (``.txnindex``): Kafka's 34-byte entries, append order,
truncation, the search a read_committed fetch makes, and the sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptIndexError, InvalidOffsetError
from kafkasim.storage import file_names
from kafkasim.storage.txn_index import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    CompletedTxn,
    TransactionIndex,
)


def _index(tmp_path: Path, base: int = 0) -> TransactionIndex:
    return TransactionIndex(file_names.txn_index_file(tmp_path, base), base)


def test_entry_is_kafkas_34_byte_layout() -> None:
    """version int16 0, producerId, firstOffset, lastOffset, lastStableOffset (int64 each)."""
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=205, last_stable_offset=150)
    expected = (
        b"\x00\x00"
        + (7).to_bytes(8, "big")
        + (100).to_bytes(8, "big")
        + (205).to_bytes(8, "big")
        + (150).to_bytes(8, "big")
    )
    assert ABORTED_TXN_SIZE == 34
    assert txn.encode() == expected
    assert AbortedTxn.decode(expected) == txn


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
)
def test_entry_round_trip(pid: int, first: int, last: int, lso: int) -> None:
    txn = AbortedTxn(pid, first, last, lso)
    assert AbortedTxn.decode(txn.encode()) == txn


def test_file_is_named_after_the_segment_and_created_on_first_entry(tmp_path: Path) -> None:
    index = _index(tmp_path, 42)
    assert index.path.name == "00000000000000000042.txnindex"
    assert not index.path.exists()  # a segment without aborted transactions has none
    assert index.all_aborted_txns() == []
    index.append(AbortedTxn(1, 42, 50, 51))
    index.append(AbortedTxn(2, 43, 60, 61))
    index.flush()
    assert index.path.stat().st_size == 2 * 34
    index.close()
    reopened = _index(tmp_path, 42)
    assert reopened.all_aborted_txns() == [AbortedTxn(1, 42, 50, 51), AbortedTxn(2, 43, 60, 61)]


def test_append_refuses_an_entry_that_does_not_come_after_the_last(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(InvalidOffsetError, match="must increase sequentially"):
        index.append(AbortedTxn(2, 5, 10, 11))
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11)]


def test_completed_txn_becomes_an_entry_with_the_lso_given() -> None:
    assert AbortedTxn.of(CompletedTxn(5, 10, 20, True), 15) == AbortedTxn(5, 10, 20, 15)


@pytest.mark.parametrize(
    ("truncate_to", "kept"),
    [
        (0, 0),
        (10, 0),  # the marker at 10 is cut: so is its entry
        (11, 1),
        (20, 1),
        (21, 2),
        (31, 3),
        (1000, 3),
    ],
)
def test_truncate_to_drops_entries_whose_marker_is_at_or_after_the_offset(
    tmp_path: Path, truncate_to: int, kept: int
) -> None:
    """Kafka's ``TransactionIndex.truncateTo``: cut at the first entry with lastOffset ≥ it."""
    index = _index(tmp_path)
    entries = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 15, 30, 31)]
    for e in entries:
        index.append(e)
    index.truncate_to(truncate_to)
    assert index.all_aborted_txns() == entries[:kept]
    assert index.path.stat().st_size == kept * 34
    # A later marker appends after what is left.
    index.append(AbortedTxn(9, 40, 50, 51))
    assert _index(tmp_path).all_aborted_txns() == [*entries[:kept], AbortedTxn(9, 40, 50, 51)]


def test_collect_overlapping_and_stop_at_an_lso_that_covers_the_range(tmp_path: Path) -> None:
    index = _index(tmp_path)
    a = AbortedTxn(1, 0, 10, 5)  # another transaction open at 5 when this one aborted
    b = AbortedTxn(2, 5, 20, 21)
    c = AbortedTxn(3, 25, 30, 31)
    for e in (a, b, c):
        index.append(e)
    found = index.collect_aborted_txns(11, 22)
    assert found.aborted_transactions == [b]  # a ended before 11
    assert found.is_complete  # b's LSO 21 < 22, but c's 31 ≥ 22 ends the search
    assert index.collect_aborted_txns(0, 5).aborted_transactions == [a]
    assert index.collect_aborted_txns(0, 5).is_complete  # a's LSO 5 ≥ 5
    assert index.collect_aborted_txns(0, 100).aborted_transactions == [a, b, c]
    assert not index.collect_aborted_txns(0, 100).is_complete  # later segments may hold more


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (AbortedTxn(1, 0, 10, 11).encode()[:20], "not a whole number"),
        (AbortedTxn(1, 0, 10, 11, version=1).encode(), "version 1"),
        (AbortedTxn(1, 0, 99, 100).encode(), "less than start offset 100"),
        (AbortedTxn(1, 100, 120, 121).encode() + AbortedTxn(1, 100, 110, 121).encode(), "after"),
    ],
    ids=["torn-entry", "unknown-version", "below-base-offset", "out-of-order"],
)
def test_sanity_check_names_what_is_wrong(tmp_path: Path, content: bytes, message: str) -> None:
    index = _index(tmp_path, 100)
    index.path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()


def test_reset_rename_and_delete(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.reset()
    assert index.all_aborted_txns() == [] and index.path.stat().st_size == 0
    index.append(AbortedTxn(1, 0, 10, 11))
    target = index.path.with_name(index.path.name + ".deleted")
    index.rename_to(target)
    assert target.exists() and index.path == target
    index.append(AbortedTxn(1, 20, 30, 31))  # appends go to the new name
    assert len(target.read_bytes()) == 68
    assert index.delete_if_exists() and not target.exists()


def test_unflushed_entries_are_lost_by_a_power_cut(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.flush()
    index.append(AbortedTxn(2, 12, 20, 21))
    index.drop_unflushed()
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11)]
    assert struct.unpack(">h", index.path.read_bytes()[:2]) == (0,)
