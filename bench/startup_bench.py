"""What a ``kafkasim`` process costs to start, measured side by side in one run.

Each broker of a local cluster and each tool the tests start is a ``kafkasim`` process, so the
CPU its imports take is paid hundreds of times a test run on a two-core machine. For a few
verbs, ``python -m kafkasim.cli VERB --help`` is run in a fresh process (the imports and the
parser, nothing else), and its CPU time (user + system, from ``wait4``) is taken. Rows:

* each verb's start, and ``kafkasim --help`` (which loads every verb to list them) as the
  reference: the ratio says what a verb saves by loading only its own module;
* with ``--against DIR`` (another source tree, e.g. ``git archive`` of an older commit), the
  same commands from that tree too, repetitions alternating between the trees, and the ratio
  this tree / that tree.

Medians over the repetitions; the commands of one repetition run one after another, so load
from other processes falls on all of them alike. Run: ``python -m bench.startup_bench
[--repeat N] [--against DIR]`` or ``./dev bench startup``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERBS = ("broker", "cluster", "topics", "console-producer", "console-consumer", "dump-log")
REFERENCE = "(all verbs)"


def _environment(tree: Path) -> dict[str, str]:
    """This process's environment with ``tree`` on the path and byte-code caching on (the
    warm-up writes it, as an installed package has it): a process that compiles every module
    it imports measures the compiler, not the start."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def cpu_seconds(tree: Path, argv: list[str]) -> float:
    """User + system CPU of one ``python -m kafkasim.cli ARGV`` run from source tree ``tree``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkasim.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tree,
        env=_environment(tree),
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"kafkasim {' '.join(argv)} (in {tree}) exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def commands() -> dict[str, list[str]]:
    table = {verb: [verb, "--help"] for verb in VERBS}
    table[REFERENCE] = ["--help"]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--against", type=Path, help="another source tree to compare with")
    parser.add_argument("--quick", action="store_true", help="3 repetitions")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    trees = {"this": ROOT}
    if args.against is not None:
        if not (args.against / "cli" / "main.py").is_file():
            parser.error(f"--against {args.against}: not a kafkasim source tree (no cli/main.py)")
        trees["against"] = args.against.resolve()
    table = commands()
    for tree in trees.values():  # a warm-up: byte-code compiled, files in the page cache
        for argv in table.values():
            cpu_seconds(tree, argv)
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat):
        for name, argv in table.items():
            for label, tree in trees.items():
                samples.setdefault((label, name), []).append(cpu_seconds(tree, argv))
    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"CPU seconds of `python -m kafkasim.cli ... --help`, median of {repeat}")
    header = f"{'command':<20}{'this':>8}{'/ all':>8}"
    if "against" in trees:
        header += f"{'against':>9}{'this/against':>14}"
    print(header)
    for name in table:
        this = median[("this", name)]
        row = f"{name:<20}{this:>8.3f}{this / median[('this', REFERENCE)]:>8.2f}"
        if "against" in trees:
            other = median[("against", name)]
            row += f"{other:>9.3f}{this / other:>14.2f}"
        print(row)


if __name__ == "__main__":
    main()
