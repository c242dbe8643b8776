"""``kafkasim sim sweep``: many seeds of one scenario, several, or the whole catalog, each seed
a simulated run with a fault schedule drawn from it (``faults.sweep``).

* ``sim sweep SCENARIO... --seeds 1..200``: the seeds run in chunks on a local process pool
  (``--jobs``, default one process per CPU), or as Spark tasks with ``--spark [MASTER]``
  (``local[*]`` by default); ``sim sweep all`` (or ``--all``) sweeps every catalog scenario.
* A line per finished chunk and one per failing seed, then the summary: seeds per scenario and
  verdict, the failing seeds, wall time and seeds per second; ``--summary FILE.html`` writes it
  as a page too, with the shrunk schedule of each failure.
* The first failing seed of each safe scenario is shrunk to a minimal fault schedule, printed
  as the scenario file that replays it (``--save``: written there; a directory: one file per
  failure); ``--no-shrink`` skips it.
* ``--resume STATE``: finished chunks are appended to STATE; seeds it records are not run
  again, and the summary counts them.

Exit status: 0 when every run met its scenario's expectation, 1 when one did not, 2 for bad
input (an unknown scenario, a bad seed range, a bad Spark master, an unusable state file),
said in one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from kafkasim.cli.pipes import say
from kafkasim.common.clock import SystemClock
from kafkasim.faults import sweep
from kafkasim.faults.scenario import ScenarioError
from kafkasim.faults.sweep import ChunkResult, Shrunk, SweepInputError, SweepPlan
from kafkasim.faults.sweep_spark import DEFAULT_MASTER, SparkEngine, check_master
from kafkasim.faults.sweep_state import SweepState
from kafkasim.faults.sweep_summary import SweepSummary, lines, render_html

__all__ = ["cmd_sweep", "register_sweep"]


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def register_sweep(verbs: Any) -> None:
    p: argparse.ArgumentParser = verbs.add_parser(
        "sweep", help="run many seeds with random fault schedules (one scenario, some, or all)"
    )
    p.add_argument(
        "scenario", nargs="*", help="catalog names or TOML files; all: the whole catalog"
    )
    p.add_argument("--all", action="store_true", help="sweep every catalog scenario")
    p.add_argument("--seeds", default="1..20", help="FIRST..LAST (inclusive), for each scenario")
    p.add_argument(
        "--spark",
        nargs="?",
        const=DEFAULT_MASTER,
        metavar="MASTER",
        help=f"run the seeds as Spark tasks on MASTER (default {DEFAULT_MASTER})",
    )
    p.add_argument(
        "--jobs", type=int, default=_cpus(), help="local pool processes (default: one per CPU)"
    )
    p.add_argument("--chunk", type=int, help="seeds per task (default: from the seeds and slots)")
    p.add_argument("--resume", type=Path, metavar="STATE", help="record and skip finished seeds")
    p.add_argument("--summary", type=Path, metavar="FILE", help="write the summary as HTML")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink a failing seed")
    p.add_argument(
        "--save", type=Path, help="write the shrunk failing scenario here (a directory: each)"
    )
    p.set_defaults(func=cmd_sweep)


def _refuse(message: object) -> int:
    print(f"kafkasim sim: error: {message}", file=sys.stderr)
    return 2


def cmd_sweep(args: argparse.Namespace) -> int:
    try:
        plan = sweep.plan_sweep(args.scenario, args.seeds, every=args.all)
        if args.spark is not None:
            check_master(args.spark)
        if args.chunk is not None and args.chunk < 1:
            raise SweepInputError(f"--chunk {args.chunk}: a chunk holds at least one seed")
        pool = sweep.local_pool(args.jobs) if args.spark is None else None
        state = SweepState(args.resume, plan.fingerprints()) if args.resume else None
    except (SweepInputError, ScenarioError) as e:
        return _refuse(e)
    sweep.quiet_logs()
    names = ", ".join(plan.scenarios)
    say(f"sweeping {names} over seeds {args.seeds}")
    try:
        spark = SparkEngine(args.spark) if args.spark is not None else None
    except SweepInputError as e:
        return _refuse(e)
    try:
        if spark is not None:
            engine: sweep.Engine = spark
            slots, where = spark.slots, f"Spark {spark.master}"
        else:
            assert pool is not None
            engine, slots = pool, args.jobs
            where = f"a local pool of {args.jobs} process{'es' if args.jobs > 1 else ''}"
        summary = _drive(args, plan=plan, engine=engine, slots=slots, where=where, state=state)
    finally:
        if spark is not None:
            spark.close()
    return _finish(args, plan, summary)


def _drive(
    args: argparse.Namespace,
    *,
    plan: SweepPlan,
    engine: sweep.Engine,
    slots: int,
    where: str,
    state: SweepState | None,
) -> SweepSummary:
    done = dict(state.done) if state is not None else {}
    resumed = {key: r for key, r in done.items() if key[0] in plan.scenarios}
    resumed = {key: r for key, r in resumed.items() if key[1] in plan.seeds}
    to_run = plan.total - len(resumed)
    size = args.chunk or sweep.chunk_size_for(to_run, slots)
    chunks = sweep.plan_chunks(plan, resumed, size)
    if resumed:
        say(f"resuming: {len(resumed)} seeds done in {args.resume}, {to_run} to run")
    say(f"{to_run} seeds in {len(chunks)} chunks of up to {size} on {where}")
    results = dict(resumed)
    wall = SystemClock()
    started = wall.monotonic_ms()

    def on_done(finished: ChunkResult) -> None:
        if state is not None:
            state.append(finished)
        chunk = finished.chunk
        for r in finished.results:
            results[(r.scenario, r.seed)] = r
            if r.verdict != "SAFE":
                say(f"  {r.scenario} seed {r.seed}: {r.summary}")
        elapsed_s = max(wall.monotonic_ms() - started, 1) / 1000
        ran = len(results) - len(resumed)
        say(
            f"  {chunk.scenario} seeds {chunk.first}..{chunk.last} done "
            f"({ran}/{to_run}, {ran / elapsed_s:.2f} seeds/s)"
        )

    engine(plan, chunks, on_done)
    wall_s = max(wall.monotonic_ms() - started, 1) / 1000
    ordered = [results[(name, seed)] for name in plan.scenarios for seed in plan.seeds]
    return SweepSummary(
        engine=where,
        scenarios=list(plan.scenarios),
        expectations=[s.expect for s in plan.scenarios.values()],
        seeds=plan.seeds,
        results=ordered,
        resumed=len(resumed),
        wall_s=wall_s,
    )


def _finish(args: argparse.Namespace, plan: SweepPlan, summary: SweepSummary) -> int:
    shrunk: list[Shrunk] = []
    if not args.no_shrink:
        for failure in sweep.first_failures(summary.results):
            say(f"shrinking {failure.scenario} seed {failure.seed} ...")
            one = sweep.shrink_failure(plan.scenarios[failure.scenario], failure)
            shrunk.append(one)
            say(
                f"{one.scenario} seed {one.seed} shrunk from {one.faults_before} to "
                f"{one.faults_after} faults; replay with"
            )
            say(f"  kafkasim sim run FILE --seed {one.seed}   where FILE holds:")
            say(one.text)
    summary = dataclasses.replace(summary, shrunk=tuple(shrunk))
    for line in lines(summary):
        say(line)
    if summary.ok:
        say("no failing seed")
    if args.summary is not None:
        args.summary.write_text(render_html(summary), encoding="utf-8")
        say(f"summary: {args.summary}")
    if args.save is not None and shrunk:
        for one in shrunk:
            target = args.save
            if target.is_dir():
                target = target / f"{one.scenario}-seed{one.seed}.toml"
            elif len(shrunk) > 1:
                target = target.with_name(f"{target.stem}-{one.scenario}{target.suffix}")
            target.write_text(one.text, encoding="utf-8")
            say(f"saved: {target}")
    return 0 if summary.ok else 1
