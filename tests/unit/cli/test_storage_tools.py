"""The storage command-line tools, run as a user runs them: ``kafkasim`` in a subprocess."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kafkasim.storage.producer_state import AppendOrigin
from kafkasim.storage.records.batch import (
    ControlRecordType,
    RecordBatchBuilder,
    encode_control_batch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from tests.cli_run import kafkasim
from tests.unit.storage.logtools import T0, make_batch, open_log

run = functools.partial(kafkasim, timeout=120)


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    log, _ = open_log(tmp_path, **{"segment.bytes": 400, "index.interval.bytes": 50})
    for i in range(8):
        builder = RecordBatchBuilder(
            compression=CompressionType.GZIP if i == 3 else CompressionType.NONE
        )
        builder.append(T0 + i, b"k%d" % i, b"value-%d" % i, [("h", b"1")])
        builder.append(T0 + i, None, None)
        log.append_as_leader(builder.build(), leader_epoch=4)
    log.close()
    return log.dir


def test_dump_log_prints_kafkas_batch_lines(partition: Path) -> None:
    seg = sorted(partition.glob("*.log"))[0]
    out = run("dump-log", "--files", str(seg))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Dumping {seg}"
    assert lines[1] == "Starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 4 isTransactional: false "
        "isControl: false position: 0 CreateTime: 1700000000000 size: "
    )
    assert lines[2].endswith("magic: 2 compresscodec: NONE crc: " + lines[2].split("crc: ")[1])
    assert "isvalid: true" in lines[2]
    assert not any(line.startswith("|") for line in lines)


def test_dump_log_print_data_log_shows_records_keys_and_payloads(partition: Path) -> None:
    segs = sorted(partition.glob("*.log"))
    out = run("dump-log", "--print-data-log", "--files", ",".join(map(str, segs)))
    assert out.returncode == 0, out.stderr
    assert (
        "| offset: 0 CreateTime: 1700000000000 keysize: 2 valuesize: 7 sequence: -1 "
        "headerKeys: [h] key: k0 payload: value-0"
    ) in out.stdout
    assert (
        "| offset: 1 CreateTime: 1700000000000 keysize: -1 valuesize: -1 sequence: -1 "
        "headerKeys: [] payload: null"
    ) in out.stdout
    assert "compresscodec: GZIP" in out.stdout
    assert out.stdout.count("Dumping ") == len(segs)


def test_dump_log_reads_legacy_v0_and_v1_message_sets(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(
        encode_legacy([(None, b"k", b"v0")], magic=0)
        + encode_legacy([(T0, None, b"v1")], magic=1, base_offset=1)
    )
    out = run("dump-log", "--deep-iteration", "--print-data-log", "--files", str(path))
    assert out.returncode == 0, out.stderr
    assert "offset: 0 position: 0 isvalid: true" in out.stdout
    assert "magic: 0" in out.stdout and "magic: 1" in out.stdout
    assert "CreateTime: 1700000000000" in out.stdout
    assert "key: k payload: v0" in out.stdout


def test_dump_log_index_and_timeindex_and_sanity_check(partition: Path) -> None:
    seg = sorted(partition.glob("*.index"))[0]
    tseg = seg.with_suffix(".timeindex")
    out = run("dump-log", "--files", f"{seg},{tseg}")
    assert out.returncode == 0, out.stderr
    assert "offset: " in out.stdout and "position: " in out.stdout
    assert "timestamp: " in out.stdout
    assert "Mismatches" not in out.stdout
    sanity = run("dump-log", "--index-sanity-check", "--files", str(seg))
    assert f"{seg} passed sanity check." in sanity.stdout


def test_dump_log_reports_index_entries_that_disagree_with_the_log(partition: Path) -> None:
    seg = sorted(partition.glob("*.index"))[0]
    data = bytearray(seg.read_bytes())
    assert len(data) >= 8
    real = int.from_bytes(data[0:4], "big")
    data[0:4] = (real - 1).to_bytes(4, "big")  # the first entry now names the wrong offset
    seg.write_bytes(bytes(data))
    out = run("dump-log", "--files", str(seg))
    assert f"Mismatches in :{seg}" in out.stdout
    assert f"Index offset: {real - 1}, log offset: {real}" in out.stdout


def test_dump_log_reports_trailing_garbage(partition: Path) -> None:
    seg = sorted(partition.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x01\x02\x03")
    out = run("dump-log", "--files", str(seg))
    assert f"Found 3 invalid bytes at the end of {seg.name}" in out.stdout


def test_dump_log_of_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    out = run("dump-log", "--files", str(tmp_path / "nope.log"))
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0
    assert "no such file" in out.stderr


def test_verify_log_passes_a_healthy_log_dir(partition: Path) -> None:
    out = run("verify-log", str(partition.parent))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no problems found" in out.stdout


def test_verify_log_finds_a_corrupt_batch(partition: Path) -> None:
    seg = sorted(partition.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF
    seg.write_bytes(bytes(data))
    out = run("verify-log", str(partition))
    assert out.returncode == 2
    assert "PROBLEM" in out.stdout and "CRC" in out.stdout


def test_verify_log_finds_a_torn_tail_and_leftover_temp_files(partition: Path) -> None:
    seg = sorted(partition.glob("*.log"))[-1]
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 5)
    (partition / "00000000000000000000.log.cleaned").write_bytes(b"")
    out = run("verify-log", str(partition))
    assert out.returncode == 2
    assert "torn write" in out.stdout
    assert "temporary file left over" in out.stdout


def test_storage_demo_runs_end_to_end(tmp_path: Path) -> None:
    out = run("demo", "storage", "--dir", str(tmp_path), "--batches", "120")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "recovery" in out.stdout
    assert "no problems found" in out.stdout


def test_unknown_verb_and_bad_arguments_exit_non_zero() -> None:
    assert run("no-such-verb").returncode == 2
    assert run("demo", "storage", "--batches", "3").returncode == 1


def test_make_batch_helper_is_a_real_batch() -> None:
    assert len(make_batch([b"x"])) > 61


def test_dump_log_prints_transaction_markers_with_their_coordinator_epoch(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    for kind, epoch in ((ControlRecordType.COMMIT, 3), (ControlRecordType.ABORT, 4)):
        marker = encode_control_batch(
            kind, producer_id=7, producer_epoch=0, timestamp=T0, coordinator_epoch=epoch
        )
        log.append_as_leader(marker, leader_epoch=1, origin=AppendOrigin.COORDINATOR)
    log.close()
    seg = sorted(log.dir.glob("*.log"))[0]
    out = run("dump-log", "--files", str(seg), "--print-data-log")
    assert out.returncode == 0, out.stderr
    markers = [line for line in out.stdout.splitlines() if line.startswith("| offset:")]
    assert len(markers) == 2, out.stdout
    assert markers[0].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3"), markers
    assert markers[1].endswith("endTxnMarker: ABORT coordinatorEpoch: 4"), markers


def test_dump_log_prints_a_txnindex_as_kafka_dump_log_does(tmp_path: Path) -> None:
    from kafkasim.storage.txn_index import AbortedTxn

    path = tmp_path / "00000000000000000010.txnindex"
    path.write_bytes(AbortedTxn(7, 10, 12, 11).encode() + AbortedTxn(8, 11, 14, 15).encode())
    out = run("dump-log", "--files", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Dumping {path}",
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 12 lastStableOffset: 11",
        "version: 0 producerId: 8 firstOffset: 11 lastOffset: 14 lastStableOffset: 15",
    ]


def test_dump_log_reports_a_corrupt_txnindex_after_its_readable_entries(tmp_path: Path) -> None:
    from kafkasim.storage.txn_index import AbortedTxn

    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(7, 0, 2, 3).encode() + b"\x00\x01\x02")
    out = run("dump-log", "--files", str(path))
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert lines[1] == "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3"
    assert lines[2].startswith(f"Found corrupt transaction index {path}: ")
    assert "not a whole number of 34-byte entries" in lines[2]
    assert "Traceback" not in out.stderr
