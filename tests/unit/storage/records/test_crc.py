"""The CRC-32C of storage/records/crc.py: Castagnoli's known values, the same value from both
implementations at every size and for every kind of buffer, large inputs on the folding one,
and a process that only checks small inputs never loads it."""

from __future__ import annotations

import mmap
import os
import random
from pathlib import Path

import crc32c as instruction
import pytest
from awscrt import checksums
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.storage.records import crc
from kafkasim.storage.records.crc import LARGE, crc32c
from tests.cli_run import python


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"123456789", 0xE3069283),  # the check value of CRC-32/ISCSI
        (bytes(32), 0x8A9136AA),  # RFC 3720, B.4: 32 bytes of zeros
        (b"\xff" * 32, 0x62A8AB43),  # RFC 3720, B.4: 32 bytes of 0xff
        (bytes(range(32)), 0x46DD794E),  # RFC 3720, B.4: 32 incrementing bytes
    ],
)
def test_known_values(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected
    assert checksums.crc32c(data) == expected


@pytest.mark.parametrize("size", [1, 61, LARGE - 1, LARGE, LARGE + 1, 65_536, 262_144 + 7])
@pytest.mark.parametrize(
    "kind", ["bytes", "bytearray", "memoryview", "unaligned view", "read-only map"]
)
def test_both_implementations_agree(size: int, kind: str, tmp_path: Path) -> None:
    data = os.urandom(size + 3)
    if kind == "read-only map":  # what recovery checks: a view of a segment file's map
        path = tmp_path / "segment"
        path.write_bytes(data)
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                _agree(view[3:], size)
            finally:
                view.release()
        return
    buffers: dict[str, bytes | bytearray | memoryview] = {
        "bytes": data[:size],
        "bytearray": bytearray(data[:size]),
        "memoryview": memoryview(data)[:size],
        "unaligned view": memoryview(data)[3:],
    }
    _agree(buffers[kind], size)


def _agree(buffer: bytes | bytearray | memoryview, size: int) -> None:
    assert len(buffer) == size
    expected = instruction.crc32c(buffer)
    assert crc32c(buffer) == expected
    assert checksums.crc32c(buffer) == expected


@given(st.integers(min_value=LARGE - 64, max_value=LARGE + 64), st.randoms())
def test_the_threshold_is_invisible(size: int, rng: random.Random) -> None:
    data = rng.randbytes(size)
    assert crc32c(data) == instruction.crc32c(data)


def test_large_inputs_use_the_folding_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data: object) -> int:
        raise AssertionError(f"the instruction's implementation was given {len(data)} bytes")  # type: ignore[arg-type]

    data = os.urandom(LARGE)
    expected = instruction.crc32c(data)
    monkeypatch.setattr(crc, "_instruction", refuse)
    assert crc32c(data) == expected
    with pytest.raises(AssertionError, match="was given 4095 bytes"):
        crc32c(data[:-1])


def test_small_inputs_never_load_the_folding_library() -> None:
    probe = (
        "import sys\n"
        "import kafkasim.storage.log_append\n"
        "from kafkasim.storage.records.crc import crc32c\n"
        "crc32c(bytes(4095))\n"
        "print('awscrt' in sys.modules)\n"
        "crc32c(bytes(4096))\n"
        "print('awscrt' in sys.modules)\n"
    )
    run = python("-c", probe)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]
