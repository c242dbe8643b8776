"""Simulation speed and memory (issues 5 and 17): the leader-crash scenario, one run per seed
with a random fault schedule, all in this one process on the virtual-time loop.

Prints simulated seconds per wall second and per CPU second of this process (the machine may
be shared: CPU time is the figure that other processes do not move), seeds per minute, and the
memory over the sweep: the objects the garbage collector tracks and the resident set size after
each run. Memory is flat when neither grows from run to run (nothing of a run outlives it).
Run files go to a RAM-backed directory when there is one (``sim.scratch``), as in ``kafkasim
sim run`` and ``sim sweep``.

Run: ``./dev bench sim [--quick] [--seeds N] [--scenario NAME]``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kafkasim.faults import checker, reading, runner, schedules
from kafkasim.sim.backend import SIM
from kafkasim.sim.scratch import scratch_dir


@dataclass(frozen=True, slots=True)
class RunFigures:
    seed: int
    simulated_s: float
    wall_s: float
    cpu_s: float
    tracked_objects: int  # gc-tracked objects alive after the run (and a collection)
    rss_mb: float  # resident set size after the run


def rss_mb() -> float:
    """The current resident set size (``/proc/self/statm``; 0 where there is none)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def run_seed(name: str, seed: int, directory: str | None) -> tuple[RunFigures, bool]:
    """One run of scenario ``name`` with ``seed``'s random schedule: its figures, and whether
    the checker found an anomaly."""
    base = reading.load(reading.find(name))
    chosen = schedules.randomize(base, random.Random(seed)) if base.seed_faults else base
    wall, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="kafkasim-sim-bench-", dir=directory) as tmp:
        history = runner.run(chosen, SIM, Path(tmp), seed=seed)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    anomaly = not checker.check(history).ok
    simulated_s = max((op.time_ms for op in history.ops), default=0) / 1000
    del history
    gc.collect()
    figures = RunFigures(seed, simulated_s, wall, cpu, len(gc.get_objects()), rss_mb())
    return figures, anomaly


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds instead of 20")
    parser.add_argument("--seeds", type=int, help="how many seeds (1..N)")
    parser.add_argument("--scenario", default="leader-crash")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    count = args.seeds or (3 if args.quick else 20)
    if count < 1:
        parser.error(f"--seeds must be at least 1, got {count}")
    directory = scratch_dir()
    runs: list[RunFigures] = []
    anomalies = 0
    print(f"scenario {args.scenario}: {count} seeds, random fault schedules, one process")
    print(f"  run files in {directory or tempfile.gettempdir()}")
    for seed in range(1, count + 1):
        figures, anomaly = run_seed(args.scenario, seed, directory)
        runs.append(figures)
        anomalies += anomaly
        print(
            f"  seed {seed:>3}: {figures.simulated_s:.0f} s simulated, "
            f"{figures.simulated_s / max(figures.wall_s, 1e-6):.1f}x wall, "
            f"{figures.simulated_s / max(figures.cpu_s, 1e-6):.1f}x cpu, "
            f"{figures.tracked_objects} objects, {figures.rss_mb:.0f} MB resident"
        )
    simulated = sum(r.simulated_s for r in runs)
    wall = max(sum(r.wall_s for r in runs), 1e-6)
    cpu = max(sum(r.cpu_s for r in runs), 1e-6)
    print(f"  simulated {simulated:.0f} s in {wall:.1f} s of wall time, {cpu:.1f} s of CPU")
    print(f"  simulated seconds per wall second: {simulated / wall:.1f}")
    print(f"  simulated seconds per CPU second: {simulated / cpu:.1f}")
    print(f"  seeds per minute: {count / wall * 60:.1f} (wall), {count / cpu * 60:.1f} (CPU)")
    print(f"  runs with anomalies: {anomalies}")
    # The first run warms up imports and caches; growth is judged from the second on.
    settled = runs[1:] or runs
    # Minus the one figures record the bench keeps per run.
    grown = settled[-1].tracked_objects - settled[0].tracked_objects - (len(settled) - 1)
    print(
        f"  memory over the sweep: {settled[0].tracked_objects} -> {settled[-1].tracked_objects} "
        f"tracked objects ({grown:+d} besides the bench's own records), "
        f"{settled[0].rss_mb:.0f} -> {settled[-1].rss_mb:.0f} MB "
        f"resident (peak {max(r.rss_mb for r in runs):.0f} MB)"
    )


if __name__ == "__main__":
    main()
