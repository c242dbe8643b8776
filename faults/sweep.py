"""Sweeps: many seeds of one or more scenarios, each seed one simulated run with a random
fault schedule, run in chunks by an engine (a local process pool or Spark), results gathered
on the driver.

Theory of operation
-------------------
1. A sweep is a ``SweepPlan``: the scenarios (each loaded once on the driver, with a
   fingerprint of its contents) and one seed range applied to each of them.
2. ``plan_chunks`` cuts the seeds still to run (those not in the resume state) into
   ``Chunk``s: contiguous seeds of one scenario, at most ``chunk_size`` of them. A chunk is
   the unit of work an engine runs (one Spark task, one pool job), so 100 000 seeds are a
   few thousand tasks, not 100 000.
3. ``run_chunk`` runs a chunk's seeds in turn, in whatever process it is called in, and
   returns one small ``SeedResult`` per seed (scenario, seed, verdict, its summary line,
   whether the run failed the scenario's expectation). A seed's run depends on the scenario
   and the seed only, so any engine, any chunking and any process gives the same result.
4. An engine is a function ``(plan, chunks, on_done)``: it runs every chunk and calls
   ``on_done`` on the driver's thread once per finished chunk, in the order they finish.
   The driver appends each finished chunk to the resume state (``faults.sweep_state``)
   before it counts it.
5. After the sweep, the first failing seed of each safe scenario is shrunk on the driver to a
   minimal fault schedule (``schedules.shrink``), written as a scenario file that replays it
   with ``kafkasim sim run FILE --seed N``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import multiprocessing
import random
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkasim.common.clock import monotonic_ns
from kafkasim.faults import checker, runner, schedules
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.history import History
from kafkasim.faults.reading import catalog, find, load
from kafkasim.faults.scenario import Fault, Scenario
from kafkasim.faults.writing import dump
from kafkasim.sim.backend import SIM
from kafkasim.sim.scratch import scratch_dir

__all__ = [
    "Chunk",
    "ChunkResult",
    "Engine",
    "SeedResult",
    "Shrunk",
    "SweepInputError",
    "SweepPlan",
    "chunk_size_for",
    "first_failures",
    "gather",
    "local_pool",
    "meets_expectation",
    "parse_seeds",
    "plan_chunks",
    "plan_sweep",
    "quiet_logs",
    "run_chunk",
    "run_once",
    "shrink_failure",
]

ALL = "all"
# A chunk never holds more seeds than this: a finished chunk is what the resume state keeps,
# so a crash loses at most this many seeds' work per engine slot.
CHUNK_SEEDS_MAX = 100
# Chunks per engine slot the planner aims at, so that a slow chunk does not idle the others.
CHUNKS_PER_SLOT = 4


class SweepInputError(ValueError):
    """A sweep that cannot start: what was wrong with its input, in one line."""


# -- one run -----------------------------------------------------------------------------------


def run_once(
    chosen: Scenario,
    seed: int | None,
    *,
    spec: BackendSpec = SIM,
    directory: Path | None = None,
    on_event: Callable[[str], None] | None = None,
) -> History:
    """One run on ``spec``'s backend, its files in ``directory`` (a temporary one if None)."""
    if directory is not None:
        return runner.run(chosen, spec, directory, seed=seed, on_event=on_event)
    scratch = scratch_dir() if spec.name == SIM.name else None  # RAM: fsyncs are free
    with tempfile.TemporaryDirectory(prefix=f"kafkasim-{spec.name}-", dir=scratch) as tmp:
        return runner.run(chosen, spec, Path(tmp), seed=seed, on_event=on_event)


def meets_expectation(chosen: Scenario, report: checker.CheckReport) -> bool:
    """A safe scenario must check clean; an unsafe one is run to show its loss, so any
    outcome is as expected (the verdict says which)."""
    return report.ok if chosen.expect == "safe" else True


def schedule_for(base: Scenario, seed: int) -> Scenario:
    """The scenario a sweep runs for ``seed``: a random schedule drawn from the seed when the
    scenario has ``seed_faults``, else its fixed one."""
    return schedules.randomize(base, random.Random(seed)) if base.seed_faults else base


@dataclass(frozen=True)
class SeedResult:
    """What a sweep keeps of one run: small, so that engines ship it cheaply."""

    scenario: str
    seed: int
    verdict: str  # the checker's verdict word: SAFE, DATA LOST, INVARIANT VIOLATED, ...
    summary: str  # the checker's first verdict line
    failed: bool  # the run did not meet the scenario's expectation


def run_seed(base: Scenario, seed: int) -> SeedResult:
    chosen = schedule_for(base, seed)
    report = checker.check(run_once(chosen, seed))
    return SeedResult(
        scenario=base.name,
        seed=seed,
        verdict=report.verdict,
        summary=report.verdict_lines()[0],
        failed=not meets_expectation(chosen, report),
    )


# -- the plan ----------------------------------------------------------------------------------


def parse_seeds(text: str) -> range:
    first, sep, last = text.partition("..")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise SweepInputError(f"--seeds expects FIRST..LAST, got {text!r}") from None
    if hi < lo:
        raise SweepInputError(f"--seeds {text}: the last seed is below the first")
    if lo < 0:
        raise SweepInputError(f"--seeds {text}: seeds are not negative")
    return range(lo, hi + 1)


def fingerprint(scenario: Scenario) -> str:
    """What a resume state ties its results to: the scenario as written back (faults, seed
    faults, cluster, workload), hashed. Editing the scenario changes it."""
    return hashlib.sha256(dump(scenario).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SweepPlan:
    scenarios: Mapping[str, Scenario]  # by name, in the order given
    seeds: range

    def fingerprints(self) -> dict[str, str]:
        return {name: fingerprint(s) for name, s in self.scenarios.items()}

    @property
    def total(self) -> int:
        return len(self.scenarios) * len(self.seeds)


def plan_sweep(names: Sequence[str], seeds_text: str, *, every: bool = False) -> SweepPlan:
    """The scenarios named (catalog names or files; ``all`` or ``every`` for the whole catalog)
    and the seed range. Two scenarios of one name are refused: results are keyed by name."""
    seeds = parse_seeds(seeds_text)
    if every or ALL in names:
        if [n for n in names if n != ALL]:
            raise SweepInputError("give scenarios or all (--all), not both")
        paths = list(catalog().values())
    elif not names:
        raise SweepInputError("name a scenario to sweep, or all (--all)")
    else:
        paths = [find(name) for name in names]
    scenarios: dict[str, Scenario] = {}
    for path in paths:
        loaded = load(path)
        if loaded.name in scenarios:
            raise SweepInputError(f"{path}: a second scenario named {loaded.name!r}")
        scenarios[loaded.name] = loaded
    return SweepPlan(scenarios, seeds)


@dataclass(frozen=True)
class Chunk:
    """Seeds ``first..last`` (inclusive) of one scenario: one engine task."""

    scenario: str
    first: int
    last: int

    @property
    def seeds(self) -> range:
        return range(self.first, self.last + 1)


def chunk_size_for(seeds_to_run: int, slots: int) -> int:
    """Seeds per chunk: about ``CHUNKS_PER_SLOT`` chunks per slot, at most ``CHUNK_SEEDS_MAX``."""
    per = -(-seeds_to_run // max(1, slots * CHUNKS_PER_SLOT))
    return max(1, min(CHUNK_SEEDS_MAX, per))


def plan_chunks(
    plan: SweepPlan, done: Mapping[tuple[str, int], object], chunk_size: int
) -> list[Chunk]:
    """The seeds not ``done``, per scenario in order, cut into runs of consecutive seeds of at
    most ``chunk_size``."""
    if chunk_size < 1:
        raise SweepInputError(f"--chunk {chunk_size}: a chunk holds at least one seed")
    chunks: list[Chunk] = []
    for name in plan.scenarios:
        start: int | None = None
        for seed in plan.seeds:
            if (name, seed) in done:
                if start is not None:
                    chunks.append(Chunk(name, start, seed - 1))
                    start = None
                continue
            if start is None:
                start = seed
            if seed - start + 1 == chunk_size:
                chunks.append(Chunk(name, start, seed))
                start = None
        if start is not None:
            chunks.append(Chunk(name, start, plan.seeds[-1]))
    return chunks


@dataclass(frozen=True)
class ChunkResult:
    chunk: Chunk
    results: tuple[SeedResult, ...]
    wall_s: float  # the chunk's own run time, in the process that ran it


def run_chunk(base: Scenario, chunk: Chunk) -> ChunkResult:
    """Every seed of ``chunk`` in turn, in this process."""
    if base.name != chunk.scenario:
        raise ValueError(f"chunk of {chunk.scenario!r} given scenario {base.name!r}")
    started = monotonic_ns()
    results = tuple(run_seed(base, seed) for seed in chunk.seeds)
    return ChunkResult(chunk, results, (monotonic_ns() - started) / 1e9)


# -- engines -----------------------------------------------------------------------------------

OnDone = Callable[[ChunkResult], None]
Engine = Callable[[SweepPlan, Sequence[Chunk], OnDone], None]


def quiet_logs() -> None:
    """Errors only: the brokers' INFO lines would drown a run's or a sweep's own lines (the
    driver's, and in each pool or Spark worker)."""
    logging.getLogger().setLevel(logging.ERROR)


def local_pool(jobs: int) -> Engine:
    """The engine of a sweep without Spark: ``jobs`` worker processes on this machine (fresh
    interpreters: nothing of the driver's state leaks into a run); with one job, this process
    runs the chunks itself."""
    if jobs < 1:
        raise SweepInputError(f"--jobs {jobs}: at least one process")

    def engine(plan: SweepPlan, chunks: Sequence[Chunk], on_done: OnDone) -> None:
        if jobs == 1:
            for chunk in chunks:
                on_done(run_chunk(plan.scenarios[chunk.scenario], chunk))
            return
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=quiet_logs
        ) as pool:
            futures = [
                pool.submit(run_chunk, plan.scenarios[chunk.scenario], chunk) for chunk in chunks
            ]
            gather(futures, on_done)

    return engine


def gather(
    futures: Sequence[concurrent.futures.Future[ChunkResult]],
    on_done: OnDone,
    on_abort: Callable[[], None] | None = None,
) -> None:
    """``on_done`` each chunk as it finishes, on this thread; on a failure (or an interrupt)
    the chunks not started are cancelled, ``on_abort`` is called, and the error goes on."""
    try:
        for future in concurrent.futures.as_completed(futures):
            on_done(future.result())
    except BaseException:
        for future in futures:
            future.cancel()
        if on_abort is not None:
            on_abort()
        raise


# -- shrinking ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shrunk:
    """A failing seed shrunk to a minimal schedule: ``text`` is the scenario file that
    replays it (``kafkasim sim run FILE --seed SEED``)."""

    scenario: str
    seed: int
    faults_before: int
    faults_after: int
    summary: str
    text: str


def shrink_failure(base: Scenario, failure: SeedResult) -> Shrunk:
    seed = failure.seed
    chosen = schedule_for(base, seed)

    def fails(faults: tuple[Fault, ...]) -> bool:
        trial = dataclasses.replace(chosen, faults=faults, seed_faults=None)
        return not checker.check(run_once(trial, seed)).ok

    minimal = schedules.shrink(chosen.faults, fails)
    shrunk = dataclasses.replace(chosen, faults=minimal, seed_faults=None)
    return Shrunk(base.name, seed, len(chosen.faults), len(minimal), failure.summary, dump(shrunk))


def first_failures(results: Iterator[SeedResult] | Sequence[SeedResult]) -> list[SeedResult]:
    """The lowest failing seed of each scenario, in the order scenarios first appear."""
    first: dict[str, SeedResult] = {}
    for result in results:
        if result.failed and (
            result.scenario not in first or result.seed < first[result.scenario].seed
        ):
            first[result.scenario] = result
    return list(first.values())
