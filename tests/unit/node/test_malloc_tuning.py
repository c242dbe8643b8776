"""node.malloc_tuning: the broker's allocator thresholds for megabyte buffers."""

from __future__ import annotations

import logging

import pytest

from kafkasim.node import malloc_tuning
from kafkasim.node.malloc_tuning import (
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    MMAP_THRESHOLD_BYTES,
    TRIM_THRESHOLD_BYTES,
    tune_malloc,
)


class FakeMallopt:
    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.calls: list[tuple[int, int]] = []

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_both_thresholds_are_set_through_mallopt() -> None:
    mallopt = FakeMallopt(1)
    assert tune_malloc(mallopt) is True
    assert mallopt.calls == [
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ]
    # glibc's parameter numbers (<malloc.h>); a batch of 1 MiB stays below the mmap threshold.
    assert (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) == (-3, -1)
    assert MMAP_THRESHOLD_BYTES > 1024 * 1024


def test_a_refused_setting_is_reported_and_both_are_still_tried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mallopt = FakeMallopt(0)
    with caplog.at_level(logging.WARNING, logger="kafkasim.node.malloc_tuning"):
        assert tune_malloc(mallopt) is False
    assert len(mallopt.calls) == 2
    assert "mallopt refused" in caplog.text


def test_without_mallopt_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc_tuning, "_glibc_mallopt", lambda: None)
    assert tune_malloc() is False


def test_this_c_library_takes_the_settings_when_it_has_mallopt() -> None:
    # On glibc (the project's Debian) the real call succeeds; elsewhere it is a no-op.
    assert tune_malloc() is (malloc_tuning._glibc_mallopt() is not None)
