"""A simulated run's files go to a RAM dir only when it is there, writable and roomy."""

from __future__ import annotations

import shutil
from pathlib import Path

from kafkasim.sim.scratch import scratch_dir


def test_a_writable_dir_with_room_is_used(tmp_path: Path) -> None:
    assert scratch_dir(tmp_path, min_free_bytes=1) == str(tmp_path)


def test_a_missing_or_too_full_dir_is_not(tmp_path: Path) -> None:
    assert scratch_dir(tmp_path / "absent", min_free_bytes=1) is None
    too_much = shutil.disk_usage(tmp_path).free + 1
    assert scratch_dir(tmp_path, min_free_bytes=too_much) is None
