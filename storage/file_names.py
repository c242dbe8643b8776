"""Kafka's file naming: segments by 20-digit zero-padded base offset, plus temporary suffixes."""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
TEMP_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)


def filename_prefix(offset: int) -> str:
    """``00000000000000000042`` for offset 42."""
    if offset < 0:
        raise ValueError(f"segment base offset must not be negative: {offset}")
    return f"{offset:020d}"


def log_file(dir_: Path, base_offset: int, suffix: str = "") -> Path:
    return dir_ / f"{filename_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_file(dir_: Path, base_offset: int, suffix: str = "") -> Path:
    return dir_ / f"{filename_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(dir_: Path, base_offset: int, suffix: str = "") -> Path:
    return dir_ / f"{filename_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(dir_: Path, base_offset: int, suffix: str = "") -> Path:
    return dir_ / f"{filename_prefix(base_offset)}{TXN_INDEX_SUFFIX}{suffix}"


def offset_from_file_name(name: str) -> int:
    """The base offset a segment file name starts with (``00…42.log.swap`` → 42)."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"not a segment file name: {name!r}")
    return int(prefix)
