"""``kafkasim check HISTORY.jsonl [--json]``: judge a failure-injection run's history.

Prints the verdict (``faults.checker``) and exits 0 when the run is safe, 1 when anomalies were
found, 2 when the file cannot be read as a history.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kafkasim.faults.checker import check
from kafkasim.faults.history import History

EXIT_SAFE = 0
EXIT_ANOMALIES = 1
EXIT_UNREADABLE = 2


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check",
        help="check a run's history (JSON lines) for lost, duplicated, reordered records "
        "and invariant violations",
    )
    p.add_argument("history", type=Path, help="a history file written by a sim or chaos run")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.history
    try:
        history = History.read(path)
    except OSError as e:
        print(f"kafkasim check: error: cannot read {path}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNREADABLE
    except ValueError as e:  # History.read names the line; a decoding error does not
        print(f"kafkasim check: error: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    report = check(history)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(report.verdict_lines()))
    return EXIT_SAFE if report.ok else EXIT_ANOMALIES
