"""Short versions of catalog scenarios for sweep tests (tests/unit/cli, tests/spark): the same
cluster and workload, over a few simulated seconds, so that a sweep of tens of seeds takes
about a minute. ``write_short`` writes them as TOML files, as a user's own scenarios."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kafkasim.faults.reading import catalog, load
from kafkasim.faults.scenario import Scenario
from kafkasim.faults.writing import dump

DURATION_S = 6.0
SETTLE_S = 3.0


def short(name: str) -> Scenario:
    """Catalog scenario ``name`` over DURATION_S: its random faults within 1..4 s, each at
    most 2 s long (its fixed schedule dropped: a sweep draws from ``seed_faults``)."""
    base = load(catalog()[name])
    assert base.seed_faults is not None, name
    workload = dataclasses.replace(base.workload, duration_s=DURATION_S, settle_s=SETTLE_S)
    seed_faults = dataclasses.replace(base.seed_faults, window_s=(1.0, 4.0), max_duration_s=2.0)
    return dataclasses.replace(
        base, name=f"short-{name}", workload=workload, seed_faults=seed_faults, faults=()
    )


def lossy_claiming_safe() -> Scenario:
    """unsafe-acks1-leader-crash's fixed schedule (a split of the leader, then its crash: the
    acks=1 records it took alone are lost) in 12 s, but expected safe: every seed fails."""
    base = load(catalog()["unsafe-acks1-leader-crash"])
    split, crash = base.faults
    return dataclasses.replace(
        base,
        name="acks1-claimed-safe",
        expect="safe",
        workload=dataclasses.replace(base.workload, duration_s=12.0, settle_s=SETTLE_S),
        faults=(
            dataclasses.replace(split, at_s=1.0, duration_s=3.0),
            dataclasses.replace(crash, at_s=2.0, duration_s=8.0),
        ),
        seed_faults=None,
    )


def write(directory: Path, *scenarios: Scenario) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for scenario in scenarios:
        path = directory / f"{scenario.name}.toml"
        path.write_text(dump(scenario))
        paths.append(path)
    return paths
