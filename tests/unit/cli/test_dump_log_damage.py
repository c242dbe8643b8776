"""dump-log goes on past damage, reports it, and exits 2 when it found any (issue 20, item 7)."""

from __future__ import annotations

import functools
import struct
from pathlib import Path

from tests.cli_run import kafkasim
from tests.unit.storage.logtools import make_batch, open_log

run = functools.partial(kafkasim, timeout=120)


def _segment(tmp_path: Path) -> Path:
    log, _ = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(make_batch([b"value-%d" % i]), leader_epoch=0)
    log.close()
    return sorted(log.dir.glob("*.log"))[0]


def test_dump_log_reports_a_bad_batch_header_and_dumps_the_batches_after_it(
    tmp_path: Path,
) -> None:
    seg = _segment(tmp_path)
    data = bytearray(seg.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    data[second + 16] = 9  # magic 9: no format has it
    seg.write_bytes(bytes(data))
    out = run("dump-log", "--deep-iteration", "--files", str(seg))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"Found invalid batch at position {second}" in out.stdout
    for offset in (0, 2, 3, 4):
        assert f"| offset: {offset} " in out.stdout
    assert "| offset: 1 " not in out.stdout


def test_dump_log_reports_a_corrupt_snapshot_and_goes_on_to_the_next_file(
    tmp_path: Path,
) -> None:
    seg = _segment(tmp_path)
    snapshot = sorted(seg.parent.glob("*.snapshot"))[-1]
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 1
    snapshot.write_bytes(bytes(data))
    out = run("dump-log", "--files", f"{snapshot},{seg}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"Found corrupt snapshot {snapshot}" in out.stdout
    assert f"Dumping {seg}" in out.stdout and "baseOffset: 4" in out.stdout
    assert "Traceback" not in out.stderr
