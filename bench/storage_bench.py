"""Storage engine benchmarks: ratios measured side by side in one run (the machine is shared
and noisy, so only ratios and growth are meaningful, never absolute targets).

1. Leader append of ready-made batches (16 KiB, 256 KiB) through ``Log.append_as_leader``
   (validation, CRC, offset assignment, epoch stamp, indexing) against a bare ``os.write``
   loop of the same bytes into a fresh file of the same directory. Aim: ≥ 0.5 at 16 KiB,
   ≥ 0.8 at 256 KiB. Steady state on both sides: two untimed appends (writes) first. The
   first records the leader epoch's start offset (a checkpoint write and two fsyncs; Kafka
   does it when the replica becomes leader, not per append); the second writes the segment's
   first index entries (the first touch of the mapped index page). Then engine and bare runs
   interleaved, five pairs, medians: the page cache's speed swings several-fold between runs
   on a busy machine, so runs side by side are compared, never one side's best. Two ratios
   are printed: wall-clock time, the aim's figure, and CPU time of the timed loop (this
   thread's user and system time). On a loaded machine a preemption of a few milliseconds
   inside one side's run moves its wall figure by tens of percent (single pairs ranged from
   0.25 to 1.8 at 256 KiB with a test run beside them), while the CPU-time ratio stays within
   about 0.02: it is the figure to compare changes by when the machine is busy.
   1b. The cost of record-level validation (Kafka's LogValidator, one walk over every record):
   the same appends with it and with it replaced by a pass-through, for small and large
   records, uncompressed and lz4.
   1c. The record walk alone: one record at a time against the bulk walk (numpy) and the
   compiled walk (``_cwalk``, when built), per batch.
2. Lookups by offset and by timestamp in logs of 1e5 and 1e7 records: p50/p99 and the growth
   from the small log to the large one (it must stay logarithmic: a small factor, not
   a hundredfold).
3. Recovery of a 1 GiB log (no clean-shutdown marker) in MB/s against a bare read + CRC pass.
4. Memory: opening a log of 1000 segments keeps indexes memory-mapped: Python heap allocated
   while opening against the bytes of index data on disk.
5. The append that rolls a full segment (1 GiB, the default; 64 MiB with ``--quick``) of
   256 KiB batches: the old segment's fsync at the roll, as the simulation does it, against a
   broker process's background writer (``storage.roll_flush``), interleaved, medians; beside
   them the median of the other appends of the same runs.

Run: ``make bench`` (or ``python -m bench.storage_bench --quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage import log_append as log_module
from kafkasim.storage.checkpoint_writer import BackgroundCheckpointWriter
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records import validation
from kafkasim.storage.records.batch import (
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    BatchHeader,
    RecordBatchBuilder,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.crc import crc32c
from kafkasim.storage.records.walk_vector import MIN_RECORDS, walk_records
from kafkasim.storage.roll_flush import RollFlushes

TP = TopicPartition("bench", 0)
T0 = 1_700_000_000_000
WARM_UP_APPENDS = 2
"""Untimed appends before a timed run (see the module doc, 1)."""


def _batch_of(size: int, record_size: int = 1024) -> bytes:
    builder = RecordBatchBuilder()
    value = b"x" * record_size
    while builder.estimated_size_in_bytes() + record_size + 16 < size:
        builder.append(T0, None, value)
    return builder.build()


def _keyed_batch_of(size: int, record_size: int, compression: CompressionType) -> bytes:
    """Keyed records, half random and half repeated (lz4 compresses them about 2:1)."""
    builder = RecordBatchBuilder(compression=compression)
    rng = random.Random(size + record_size)
    half = record_size // 2
    while builder.estimated_size_in_bytes() + record_size + 16 < size:
        builder.append(T0, b"key", rng.randbytes(half) + b"x" * (record_size - half))
    return builder.build()


def _best_of(runs: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(runs))


def _append_times(root: Path, batch: bytes, count: int) -> tuple[float, float]:
    """Wall and CPU seconds to append ``batch`` ``count`` times as leader into a fresh log,
    after two untimed appends (the epoch's start and the segment's first index entries
    recorded: one-offs, see the module doc)."""
    d = root / "append-timed"
    shutil.rmtree(d, ignore_errors=True)
    log = Log.open(d, LogConfig.from_props({}), ManualClock(T0), topic_partition=TP)
    for _ in range(WARM_UP_APPENDS):
        log.append_as_leader(batch, leader_epoch=0)
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(count):
        log.append_as_leader(batch, leader_epoch=0)
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    log.close_handlers()
    shutil.rmtree(d)
    return elapsed, cpu


def _append_seconds(root: Path, batch: bytes, count: int) -> float:
    return _append_times(root, batch, count)[0]


def _skip_record_validation(batch: memoryview, header: BatchHeader, **_: object) -> object:
    return header, batch


def _skip_compiled_walk(data: memoryview, count: int, *checks: object) -> int:
    """The one-batch append path's walk replaced: every record of these benches carries T0,
    the first timestamp, so the walk's answer (the largest timestamp delta) is 0."""
    return 0


def bench_validation(root: Path, total_bytes: int) -> list[tuple[str, float, float, float]]:
    """Leader append MB/s with record-level validation and with it replaced by a
    pass-through (the header and CRC checks stay), interleaved runs, best of 3 each."""
    cases = [
        ("16 KiB, 100 B records, none", 16 * 1024, 100, CompressionType.NONE),
        ("16 KiB, 1 KiB records, none", 16 * 1024, 1024, CompressionType.NONE),
        ("256 KiB, 1 KiB records, none", 256 * 1024, 1024, CompressionType.NONE),
        ("128 KiB, 100 B records, none", 128 * 1024, 100, CompressionType.NONE),
        ("16 KiB, 100 B records, lz4", 16 * 1024, 100, CompressionType.LZ4),
        ("16 KiB, 1 KiB records, lz4", 16 * 1024, 1024, CompressionType.LZ4),
    ]
    rows = []
    real = log_module.validate_leader_batch
    real_walk = validation.COMPILED_WALK
    for label, size, record_size, codec in cases:
        batch = _keyed_batch_of(size, record_size, codec)
        count = max(total_bytes // size, 1)
        on: list[float] = []
        off: list[float] = []
        for _ in range(3):
            on.append(_append_seconds(root, batch, count))
            # Both paths' record walk off: the general one's validator and the one-batch
            # path's compiled walk (that path is not taken without a compiled walk).
            log_module.validate_leader_batch = _skip_record_validation  # type: ignore[assignment]
            if real_walk is not None:
                validation.COMPILED_WALK = _skip_compiled_walk
            try:
                off.append(_append_seconds(root, batch, count))
            finally:
                log_module.validate_leader_batch = real
                validation.COMPILED_WALK = real_walk
        mb = count * len(batch) / 1e6
        rows.append((label, mb / min(on), mb / min(off), min(off) / min(on)))
    return rows


def bench_walk(record_counts: tuple[int, ...]) -> list[tuple[int, float, float, float | None]]:
    """The record walk alone: microseconds a batch one record at a time, in bulk
    (``walk_vector``) and compiled (``_cwalk``; None where it is not built), 100 B keyless
    records, interleaved, best of 7 rounds each."""
    rows = []
    for n in record_counts:
        builder = RecordBatchBuilder()
        for i in range(n):
            builder.append(T0 + i, None, b"x" * 100)
        batch = builder.build()
        area = bytes(batch[RECORDS_OFFSET:])
        header = BatchHeader.parse(memoryview(batch))
        checks = {
            "last_delta": header.last_offset_delta,
            "dense": True,
            "compacted": False,
            "base_ts": header.first_timestamp,
            "low": -(1 << 62),
            "high": 1 << 62,
        }
        one: list[float] = []
        bulk: list[float] = []
        compiled: list[float] = []
        walks: list[tuple[validation.Walk, list[float]]] = [
            (validation._walk, one),
            (walk_records, bulk),
        ]
        if validation.COMPILED_WALK is not None:
            walks.append((validation.COMPILED_WALK, compiled))
        rounds = 50
        for _ in range(7):
            for walk, times in walks:
                start = time.perf_counter()
                for _ in range(rounds):
                    walk(area, n, **checks)
                times.append((time.perf_counter() - start) / rounds * 1e6)
        rows.append((n, min(one), min(bulk), min(compiled) if compiled else None))
    return rows


def bench_append(
    root: Path, batch_size: int, total_bytes: int, pairs: int = 5
) -> tuple[float, float, float, float]:
    """Engine and bare MB/s (medians), and the medians of the pairs' wall-clock and CPU-time
    ratios, each pair an engine run then a bare run of the same bytes (see the module doc)."""
    batch = _batch_of(batch_size)
    count = max(total_bytes // len(batch), 1)

    def bare() -> tuple[float, float]:
        path = root / f"bare-{batch_size}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(WARM_UP_APPENDS):  # as the engine's
            os.write(fd, batch)
        start, cpu = time.perf_counter(), time.thread_time()
        for _ in range(count):
            os.write(fd, batch)
        elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
        os.close(fd)
        path.unlink()
        return elapsed, cpu

    engine: list[tuple[float, float]] = []
    bare_runs: list[tuple[float, float]] = []
    for _ in range(pairs):
        engine.append(_append_times(root, batch, count))
        bare_runs.append(bare())
    mb = count * len(batch) / 1e6
    pairs_run = list(zip(engine, bare_runs, strict=True))
    wall_ratio = statistics.median(b[0] / e[0] for e, b in pairs_run)
    cpu_ratio = statistics.median(b[1] / max(e[1], 1e-9) for e, b in pairs_run)
    return (
        mb / statistics.median(e[0] for e in engine),
        mb / statistics.median(b[0] for b in bare_runs),
        wall_ratio,
        cpu_ratio,
    )


def _build_lookup_log(root: Path, records: int, per_batch: int) -> Log:
    """A log whose batches carry increasing LogAppendTime timestamps (1 ms per batch)."""
    clock = ManualClock(T0)
    config = LogConfig.from_props({"message.timestamp.type": "LogAppendTime"})
    log = Log.open(root / f"lookup-{records}", config, clock, topic_partition=TP)
    builder = RecordBatchBuilder()
    for i in range(per_batch):
        builder.append(T0, None, b"v%07d" % i)
    batch = builder.build()
    for _ in range(records // per_batch):
        log.append_as_leader(batch, leader_epoch=0)
        clock.advance(1)
    log.update_high_watermark(log.log_end_offset)
    return log


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def bench_lookups(
    log: Log, n: int, seed: int = 1
) -> tuple[tuple[float, float], tuple[float, float]]:
    rng = random.Random(seed)
    leo = log.log_end_offset
    by_offset: list[float] = []
    by_time: list[float] = []
    batches = leo // 100
    for _ in range(n):
        target = rng.randrange(leo)
        start = time.perf_counter()
        info = log.read(target, 1)
        by_offset.append(time.perf_counter() - start)
        header = BatchHeader.parse(info.records)
        assert header.base_offset <= target <= header.last_offset
        ts = T0 + rng.randrange(batches)
        start = time.perf_counter()
        found = log.fetch_offset_by_timestamp(ts)
        by_time.append(time.perf_counter() - start)
        assert found is not None and found.timestamp >= ts
    return _percentiles(by_offset), _percentiles(by_time)


def bench_recovery(root: Path, total_bytes: int) -> tuple[float, float]:
    d = root / "recovery"
    batch = _batch_of(256 * 1024)
    log = Log.open(d, LogConfig.from_props({}), ManualClock(T0), topic_partition=TP)
    for _ in range(total_bytes // len(batch)):
        log.append_as_leader(batch, leader_epoch=0)
    log.flush()
    log.close_handlers()
    size = sum(p.stat().st_size for p in d.glob("*.log"))

    def recover() -> float:
        start = time.perf_counter()
        recovered = Log.open(
            d,
            LogConfig.from_props({}),
            ManualClock(T0),
            topic_partition=TP,
            had_clean_shutdown=False,
        )
        elapsed = time.perf_counter() - start
        recovered.close_handlers()
        return elapsed

    def bare() -> float:
        # The same access path recovery uses (a read-only map), then header walk + CRC-32C.
        start = time.perf_counter()
        for path in sorted(d.glob("*.log")):
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                pos = 0
                while pos + RECORD_BATCH_OVERHEAD <= len(view):
                    length = 12 + int.from_bytes(view[pos + 8 : pos + 12], "big")
                    crc32c(view[pos + 21 : pos + length])
                    pos += length
                view.release()
        return time.perf_counter() - start

    recover_s = _best_of(2, recover)
    bare_s = _best_of(2, bare)
    shutil.rmtree(d)
    return size / 1e6 / recover_s, size / 1e6 / bare_s


def bench_roll(root: Path, segment_bytes: int, rounds: int) -> tuple[float, float, float]:
    """Seconds of the append that rolls, with the fsync inline and on a background writer
    (medians of ``rounds`` each, interleaved), and the median of every other append."""
    batch = _batch_of(256 * 1024)
    config = LogConfig.from_props({"segment.bytes": segment_bytes})
    count = segment_bytes // len(batch) + 8
    rolls: dict[bool, list[float]] = {False: [], True: []}
    others: list[float] = []
    for _ in range(rounds):
        for background in (False, True):
            d = root / "roll"
            shutil.rmtree(d, ignore_errors=True)
            log = Log.open(d, config, ManualClock(T0), topic_partition=TP)
            writer = BackgroundCheckpointWriter("bench-roll")
            if background:
                log.roll_flushes = RollFlushes(writer, "bench")
            times = []
            for _ in range(count):
                start = time.perf_counter()
                log.append_as_leader(batch, leader_epoch=0)
                times.append(time.perf_counter() - start)
            assert log.num_segments == 2, "one roll a run"
            roll = max(range(count), key=times.__getitem__)
            rolls[background].append(times.pop(roll))
            others.extend(times)
            writer.close()
            log.close_handlers()
    shutil.rmtree(root / "roll", ignore_errors=True)
    return (
        statistics.median(rolls[False]),
        statistics.median(rolls[True]),
        statistics.median(others),
    )


def bench_open_memory(root: Path, segments: int) -> tuple[int, int, int]:
    """Open a log of ``segments`` segments, each with ~2000 entries in each index."""
    d = root / "many-segments"
    builder = RecordBatchBuilder()
    builder.append(T0, None, b"x" * 100)
    batch = builder.build()
    per_segment = 2000
    config = LogConfig.from_props(
        {
            "segment.bytes": len(batch) * per_segment,
            "index.interval.bytes": 0,
            "message.timestamp.type": "LogAppendTime",
        }
    )
    clock = ManualClock(T0)
    log = Log.open(d, config, clock, topic_partition=TP)
    request = batch * 50  # a produce request of 50 batches
    while log.num_segments < segments:
        log.append_as_leader(request, leader_epoch=0)
        clock.advance(1)
    log.close()
    index_bytes = sum(p.stat().st_size for p in d.glob("*index"))
    tracemalloc.start()
    opened = Log.open(d, config, clock, topic_partition=TP, had_clean_shutdown=True)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    count = opened.num_segments
    opened.close()
    shutil.rmtree(d)
    return count, index_bytes, current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args(argv)
    quick = args.quick
    root = Path(tempfile.mkdtemp(prefix="kafkasim-bench-", dir=args.dir))
    try:
        print("kafkasim storage benchmark" + (" (quick)" if quick else ""))
        total = (8 if quick else 256) * 1024 * 1024
        print("\n1. leader append vs bare os.write of the same bytes (medians of 5 pairs)")
        for size in (16 * 1024, 256 * 1024):
            engine, bare, ratio, cpu_ratio = bench_append(root, size, 4 * total if quick else total)
            print(
                f"   {size // 1024:>4} KiB batches: engine {engine:8.1f} MB/s, bare "
                f"{bare:8.1f} MB/s, ratio {ratio:.2f} (CPU time: {cpu_ratio:.2f})"
            )

        print("\n1b. leader append with record-level validation vs without it (MB/s)")
        for label, on, off, ratio in bench_validation(root, total // 4):
            print(f"   {label:<30} with {on:8.1f}, without {off:8.1f}, ratio {ratio:.2f}")

        print(
            "\n1c. the record walk alone, one record at a time vs in bulk vs compiled (µs a batch)"
        )
        for n, one, bulk, compiled in bench_walk((15, 64, 192, 1000)):
            c_text = "not built" if compiled is None else f"{compiled:8.1f}"
            c_ratio = "" if compiled is None else f", one/compiled {one / compiled:.1f}"
            print(
                f"   {n:>5} x 100 B records: one at a time {one:8.1f}, in bulk {bulk:8.1f}, "
                f"compiled {c_text}; one/bulk {one / bulk:.2f} (bulk from {MIN_RECORDS} "
                f"records){c_ratio}"
            )

        print("\n2. lookups (p50 / p99, microseconds)")
        sizes = (10**4, 10**5) if quick else (10**5, 10**7)
        results = {}
        for records in sizes:
            log = _build_lookup_log(root, records, per_batch=100)
            results[records] = bench_lookups(log, 500 if quick else 3000)
            (o50, o99), (t50, t99) = results[records]
            print(
                f"   {records:>9,} records, {log.num_segments} segment(s): by offset "
                f"{o50 * 1e6:7.1f} / {o99 * 1e6:7.1f}   by timestamp {t50 * 1e6:7.1f} / "
                f"{t99 * 1e6:7.1f}"
            )
            log.close_handlers()
        small, large = results[sizes[0]], results[sizes[1]]
        print(
            f"   growth x{sizes[1] // sizes[0]} records: by offset p50 "
            f"{large[0][0] / small[0][0]:.2f}x, by timestamp p50 "
            f"{large[1][0] / small[1][0]:.2f}x"
        )

        print("\n3. recovery (unclean shutdown) vs bare read + CRC-32C pass")
        engine, bare = bench_recovery(root, (32 if quick else 1024) * 1024 * 1024)
        print(f"   recovery {engine:8.1f} MB/s, bare {bare:8.1f} MB/s, ratio {engine / bare:.2f}")

        print("\n4. memory when opening many segments (indexes stay memory-mapped)")
        count, index_bytes, heap = bench_open_memory(root, 50 if quick else 1000)
        print(
            f"   {count} segments, {index_bytes / 1e6:.1f} MB of index files "
            f"({index_bytes / count / 1024:.1f} KiB a segment); Python heap held after open "
            f"{heap / 1e6:.2f} MB ({heap / count / 1024:.1f} KiB a segment, whatever the index "
            f"size: heap/index {heap / max(index_bytes, 1):.3f})"
        )

        mib = 64 if quick else 1024
        print(f"\n5. the append that rolls a {mib} MiB segment (256 KiB batches)")
        inline, background, other = bench_roll(root, mib * 1024 * 1024, 2 if quick else 3)
        print(
            f"   fsync at the roll {inline * 1e3:8.1f} ms, on the background writer "
            f"{background * 1e3:6.1f} ms (ratio {inline / background:.0f}x); any other append "
            f"{other * 1e3:.2f} ms"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
