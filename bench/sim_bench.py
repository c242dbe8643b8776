"""Simulation speed (issue 5): the leader-crash scenario, one run per seed with a random fault
schedule, on the virtual-time loop. Prints simulated seconds per wall second and seeds per
minute, measured in this run (the machine is shared: compare figures of one run only).

Run: ``./dev bench sim [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
from pathlib import Path

from kafkasim.common.clock import SystemClock
from kafkasim.faults import checker, reading, runner, schedules
from kafkasim.sim.backend import SIM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds instead of 20")
    parser.add_argument("--scenario", default="leader-crash")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    seeds = range(1, 4 if args.quick else 21)
    base = reading.load(reading.find(args.scenario))
    wall = SystemClock()
    simulated_s = 0.0
    anomalies = 0
    started = wall.monotonic_ms()
    for seed in seeds:
        chosen = schedules.randomize(base, random.Random(seed)) if base.seed_faults else base
        with tempfile.TemporaryDirectory(prefix="kafkasim-sim-bench-") as tmp:
            history = runner.run(chosen, SIM, Path(tmp), seed=seed)
        simulated_s += max((op.time_ms for op in history.ops), default=0) / 1000
        anomalies += not checker.check(history).ok
    wall_s = max(wall.monotonic_ms() - started, 1) / 1000
    print(f"scenario {base.name}: {len(seeds)} seeds, random fault schedules")
    print(f"  simulated {simulated_s:.0f} s in {wall_s:.1f} s of wall time")
    print(f"  simulated seconds per wall second: {simulated_s / wall_s:.1f}")
    print(f"  seeds per minute: {len(seeds) / wall_s * 60:.1f}")
    print(f"  runs with anomalies: {anomalies}")


if __name__ == "__main__":
    main()
