"""CRC-32C (Castagnoli), the checksum of a v2 record batch and of a producer snapshot.

Two maintained C implementations, each where it is the faster (issue 19):

- ``crc32c`` (the ICRAR package) runs the SSE4.2 ``crc32`` instruction on three interleaved
  streams: ~26 GB/s at best, and the cheapest call (~120 ns for a small batch).
- ``awscrt.checksums`` (the AWS Common Runtime's aws-checksums, what botocore uses for S3's
  CRC-32C) folds with carry-less multiplication (VPCLMULQDQ on AVX-512 machines): ~55 GB/s
  from 64 KiB up, twice the instruction's rate. Its call costs ~50 ns more, and loading its
  library ~50 ms, so it is loaded at the first large input: a process that only ever checks
  small batches (most tools, most clients) never pays for it.

Measured on this project's machine (best of 5, µs per call, crc32c / awscrt): 1 KiB 0.16 /
0.19, 4 KiB 0.30 / 0.25, 16 KiB 0.91 / 0.55, 256 KiB 9.4 / 4.7. At 256 KiB the saving is ~6 % of
a whole append (``./dev bench storage``: its 256 KiB ratio went 0.77 -> 0.83). Both give the
same value for every input: tests/unit/storage/records/test_crc.py checks them against each
other and against the check value and RFC 3720's vectors.

A broker checks large batches from its first produce on, and a load on its event loop held that
first request ~50 ms (found with a stall watchdog on an RF=3 cluster, issue 19): it calls
:func:`load_folding` at its start instead.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Final, TypeAlias

import crc32c as _crc32c

LARGE: Final = 4096
"""From this many bytes on, the folding implementation is the faster one."""

Bytes: TypeAlias = bytes | bytearray | memoryview

_instruction: Callable[[Bytes], int] = _crc32c.crc32c  # typed here: no int() per call


def crc32c(data: Bytes) -> int:
    """The CRC-32C of ``data`` (bytes, bytearray or a contiguous memoryview), unsigned."""
    if len(data) < LARGE:
        return _instruction(data)
    return _folding()(data)


def load_folding() -> None:
    """Load the folding implementation now (a broker's start), not at the first large input."""
    _folding()


@cache
def _folding() -> Callable[[Bytes], int]:
    from awscrt import checksums  # noqa: PLC0415 - loaded at the first large input

    folding: Callable[[Bytes], int] = checksums.crc32c
    return folding
