"""The one runner gives the catalog the verdicts the simulation's own runner gave before the
runners were merged: the exact verdict lines below were recorded with that runner (the same
scenario, seed and schedule), and each run here must reproduce its line. Histories may differ
where the target semantics were corrected (a follower chosen among the in-sync ones, no
replica samples asked of a paused broker); what the checker finds must not. Two counts moved by
one acknowledged record when the client's retries stopped overshooting their deadline (the last
backoff is cut to the time left, so one more send is answered before delivery.timeout.ms): the
findings (safe; 300 lost with acks=1) are the recorded ones.

Five counts then moved down by two records (3002 to 3000, 6002 to 6000, 4002 to 4000, and 3002
acknowledged / 2702 read back to 3000 / 2700 with acks=1) when the virtual loop began running a
timer at exactly its own time: it used to advance to ``now + (when - now)``, a float sum that
could land a hair before ``when``, so the runner read an elapsed time just short of the
workload's 30 s, slept its 10 ms minimum once more, and each 100/s producer sent two records
past the end. The producers now send exactly rate x duration; every finding is unchanged (safe
stays safe, the acks=1 run still loses 300 acknowledged records)."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from kafkasim.faults import checker, runner, schedules
from kafkasim.faults.reading import find, load
from kafkasim.sim.backend import SIM

SAFE_3000 = "0 lost, 0 duplicated, 0 unexpected, 0 reordered, 0 invariant violations"
RECORDED = [
    ("leader-crash", 1, False, f"SAFE — 3000 acknowledged, 3000 read back, {SAFE_3000}"),
    ("follower-pause", 2, False, f"SAFE — 3000 acknowledged, 3000 read back, {SAFE_3000}"),
    ("leader-isolation", 1, False, f"SAFE — 3000 acknowledged, 3000 read back, {SAFE_3000}"),
    ("rolling-restart", 1, False, f"SAFE — 6000 acknowledged, 6000 read back, {SAFE_3000}"),
    ("kip101-case2", 1, False, f"SAFE — 4000 acknowledged, 4000 read back, {SAFE_3000}"),
    ("zk-session-expiry", 2, True, f"SAFE — 3000 acknowledged, 3000 read back, {SAFE_3000}"),
    ("leader-disk-full", 1, False, f"SAFE — 3000 acknowledged, 3000 read back, {SAFE_3000}"),
    (
        "unsafe-acks1-leader-crash",
        1,
        False,
        "DATA LOST — 3000 acknowledged, 2700 read back, 300 lost, 0 duplicated, 0 unexpected, "
        "0 reordered, 0 invariant violations",
    ),
]


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


@pytest.mark.parametrize(("name", "seed", "random_faults", "verdict"), RECORDED)
def test_the_verdict_is_the_one_recorded_before_the_runners_merged(
    name: str, seed: int, random_faults: bool, verdict: str, tmp_path: Path
) -> None:
    chosen = load(find(name))
    if random_faults:  # as `kafkasim sim run NAME --seed N --random-faults`
        chosen = schedules.randomize(chosen, random.Random(seed))
    report = checker.check(runner.run(chosen, SIM, tmp_path, seed=seed))
    assert report.verdict_lines()[0] == f"VERDICT: {verdict}"
