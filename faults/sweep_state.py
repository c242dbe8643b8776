"""A sweep's resume state: one JSON line per finished chunk, appended and fsynced before the
chunk is counted, so that ``--resume FILE`` after a crash (or an interrupt) runs only the
seeds no line records.

Format (one object per line)::

    {"scenario": "leader-crash", "fingerprint": "3f2a...", "first": 1, "last": 25,
     "wall_s": 61.2, "results": [[1, "SAFE", "VERDICT: SAFE — ...", false], ...]}

Crash story: a line is written whole with one ``write`` and then fsynced; a crash in between
leaves at most a torn last line (no newline at its end), which ``load`` cuts off the file
before anything is appended after it. A complete line that does not parse, or that records a
scenario whose contents changed since (another fingerprint), is refused with an error naming
the file and line: its results cannot be trusted for this sweep.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafkasim.faults.sweep import ChunkResult, SeedResult, SweepInputError

__all__ = ["SweepState"]


class SweepState:
    """The results a state file holds for the sweep's scenarios, and its appender."""

    def __init__(self, path: Path, fingerprints: Mapping[str, str]) -> None:
        self.path = path
        self._fingerprints = dict(fingerprints)
        self.done: dict[tuple[str, int], SeedResult] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):
            # A torn last line (a crash while writing it): not a finished chunk.
            with self.path.open("r+b") as f:
                f.truncate(complete)
                f.flush()
                os.fsync(f.fileno())
        for number, line in enumerate(data[:complete].splitlines(), start=1):
            if line.strip():
                self._record(number, line)

    def _record(self, number: int, line: bytes) -> None:
        where = f"{self.path} line {number}"
        try:
            raw = json.loads(line)
            name, stamp = str(raw["scenario"]), str(raw["fingerprint"])
            rows: list[Any] = raw["results"]
            results = [
                SeedResult(name, int(seed), str(verdict), str(summary), bool(failed))
                for seed, verdict, summary, failed in rows
            ]
        except (ValueError, KeyError, TypeError) as e:
            raise SweepInputError(f"{where}: not a sweep state record ({e})") from None
        expected = self._fingerprints.get(name)
        if expected is None:
            return  # another scenario's results: kept in the file, not this sweep's
        if stamp != expected:
            raise SweepInputError(
                f"{where}: scenario {name} has changed since this state was written "
                "(start a new state file)"
            )
        for result in results:
            self.done[(name, result.seed)] = result

    def append(self, finished: ChunkResult) -> None:
        chunk = finished.chunk
        record = {
            "scenario": chunk.scenario,
            "fingerprint": self._fingerprints[chunk.scenario],
            "first": chunk.first,
            "last": chunk.last,
            "wall_s": round(finished.wall_s, 3),
            "results": [[r.seed, r.verdict, r.summary, r.failed] for r in finished.results],
        }
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        for result in finished.results:
            self.done[(chunk.scenario, result.seed)] = result
