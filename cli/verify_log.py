"""``kafkasim verify-log DIR``: check every segment, index and checkpoint; report problems."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kafkasim.storage.verify import verify


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "verify-log",
        help="check a log dir or partition dir for corrupt batches, bad indexes, bad checkpoints",
    )
    p.add_argument("dir", type=Path, help="a log dir (log.dirs entry) or one <topic>-<p> dir")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.dir
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    problems = verify(path)
    for problem in problems:
        print(f"PROBLEM {problem}")
    if problems:
        print(f"{len(problems)} problem(s) found in {path}")
        return 2
    print(f"{path}: no problems found")
    return 0
