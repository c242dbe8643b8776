"""Random sweeps of the catalog find injected bug switches by themselves (issue 17): for each
switch, a sweep of stated seeds of a catalog scenario, with schedules drawn by
``schedules.randomize`` exactly as ``kafkasim sim sweep`` draws them, finds a failing seed;
the failing schedule shrinks (``schedules.shrink``), and the scenario file ``faults.writing``
prints for it replays the failure when read back, as ``kafkasim sim run FILE --seed N`` would
run it, and is safe without the bug.

The scenarios are the catalog's in their bug-hunting profile (``tests.sweep_scenarios.short``:
the same cluster, workload and random fault kinds, over 6 s with every fault within 1..4 s and
at most 2 s long): a run takes about a second, so a sweep, its shrink and its replay fit in a
test. The short profile packs the faults closer together, which is what these bugs need.

* ``hw_ignores_followers`` is found by ``leader-crash`` at seed 15: a crash of every broker,
  then of one of them as they come back: the leader had acknowledged a record no follower
  held, and another replica is elected.
* ``truncate_to_high_watermark`` is found by ``follower-one-way`` at seed 41 (shrunk: a crash
  of the leader at 2.36 s, a controlled shutdown of another broker at 2.57 s): a follower that
  truncated to its own high watermark at the leader change (the pre-KIP-101 rule), one record
  behind the leader's, is made leader by the shutdown before it fetches that record again.
* ``isr_admits_lagging_followers`` is found by ``lagging-follower-leader-crash`` at seed 11
  (shrunk: a crash of one broker at 1.756 s, controlled shutdowns of the controller at 3.292 s
  and of the leader at 3.579 s): the crashed broker, catching up, is out of the ISR
  (replica.lag.time.max.ms is 500 ms there); the leader takes it back at its next fetch, ten
  records behind, and the shutdowns move leadership to it without records acks=all had
  acknowledged.

  Until a new controller sent UpdateMetadata before its LeaderAndIsr (as Kafka's failover
  does), these two were found at seed 6 each: the failover's timing decides which schedules
  hit the windows. Seed 6 of the second was a lagging follower taken back and the leader
  killed (it is also the controller): when its session expires, the lagging follower, first
  in replica order, is elected without records acks=all had acknowledged. The catalog's
  other scenarios keep Kafka's 30 s lag time, so a follower leaves the ISR only after a long
  fault: short sweeps of leader-crash (1..60), follower-one-way (1..30) and
  follower-slow-fetch (1..80) found no seed for this switch.

The sweep stops at the first failing seed; the seeds before it are judged safe with the bug,
so that a change that makes the sweep find it earlier or later shows here.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path

import pytest

from kafkasim.faults import checker, reading, runner, schedules
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.scenario import Fault, Scenario
from kafkasim.faults.writing import dump
from kafkasim.node.rules import ReplicationRules
from kafkasim.sim.backend import SIM, sim_backend
from tests.sweep_scenarios import short


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def fails(chosen: Scenario, seed: int, spec: BackendSpec, tmp_path: Path) -> bool:
    root = tmp_path / f"{chosen.name}-{seed}-{len(list(tmp_path.iterdir()))}"
    return not checker.check(runner.run(chosen, spec, root, seed=seed)).ok


@pytest.mark.parametrize(
    ("switch", "scenario", "first_failing_seed"),
    [
        ("hw_ignores_followers", "leader-crash", 15),
        ("truncate_to_high_watermark", "follower-one-way", 41),
        ("isr_admits_lagging_followers", "lagging-follower-leader-crash", 11),
    ],
)
def test_a_random_sweep_finds_the_bug_switch_shrinks_it_and_the_file_replays_it(
    switch: str, scenario: str, first_failing_seed: int, tmp_path: Path
) -> None:
    buggy = sim_backend(ReplicationRules(**{switch: True}))
    base = short(scenario)
    found = None
    for seed in range(1, first_failing_seed + 1):
        chosen = schedules.randomize(base, random.Random(seed))
        if fails(chosen, seed, buggy, tmp_path):
            found = (seed, chosen)
            break
    assert found is not None and found[0] == first_failing_seed, found
    seed, chosen = found

    def still_fails(faults: tuple[Fault, ...]) -> bool:
        trial = dataclasses.replace(chosen, faults=faults, seed_faults=None)
        return fails(trial, seed, buggy, tmp_path)

    minimal = schedules.shrink(chosen.faults, still_fails)
    assert 1 <= len(minimal) <= len(chosen.faults)
    printed = dump(dataclasses.replace(chosen, faults=minimal, seed_faults=None))
    replayed = reading.parse(printed, source="printed")
    assert replayed.faults == minimal
    assert fails(replayed, seed, buggy, tmp_path)
    assert not fails(replayed, seed, SIM, tmp_path)  # the bug loses the data, not the faults
