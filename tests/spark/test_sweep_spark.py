"""``kafkasim sim sweep --spark``: the same sweep on Spark (``local[2]``: two executor
threads, each chunk a task run by a Spark Python worker) and on the local process pool gives
the same verdict, and the same checker summary line, for every seed. Three scenarios of eight
seeds: two drawing random faults from the seed, one whose every seed loses acks=1 records
(so that the verdicts compared are not all SAFE). Each command's resume state keeps the rows
the engine returned, seed by seed; those are compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import kafkasim
from tests.sweep_scenarios import lossy_claiming_safe, short, write

SEEDS = "1..8"


def _rows(state: Path) -> dict[tuple[str, int], tuple[str, str, bool]]:
    rows = {}
    for line in state.read_text().splitlines():
        record = json.loads(line)
        for seed, verdict, summary, failed in record["results"]:
            rows[(record["scenario"], seed)] = (verdict, summary, failed)
    return rows


@pytest.mark.slow
def test_a_sweep_on_spark_gives_every_seed_the_verdict_the_local_pool_gives(
    tmp_path: Path,
) -> None:
    scenarios = [
        str(p)
        for p in write(
            tmp_path / "scenarios",
            short("leader-crash"),
            short("follower-pause"),
            lossy_claiming_safe(),
        )
    ]
    spark_state, pool_state = tmp_path / "spark.jsonl", tmp_path / "pool.jsonl"
    common = ["sim", "sweep", *scenarios, "--seeds", SEEDS, "--no-shrink", "--chunk", "3"]
    on_spark = kafkasim(*common, "--spark", "local[2]", "--resume", str(spark_state),
                        timeout=900)  # fmt: skip
    assert on_spark.returncode == 1, on_spark.stdout + on_spark.stderr  # the lossy one fails
    assert "on Spark local[2]" in on_spark.stdout
    on_pool = kafkasim(*common, "--jobs", "2", "--resume", str(pool_state), timeout=900)
    assert on_pool.returncode == 1, on_pool.stdout + on_pool.stderr
    assert "on a local pool of 2 processes" in on_pool.stdout

    spark_rows, pool_rows = _rows(spark_state), _rows(pool_state)
    assert len(spark_rows) == 3 * 8
    assert spark_rows == pool_rows
    verdicts = {verdict for verdict, _, _ in spark_rows.values()}
    assert {"SAFE", "DATA LOST"} <= verdicts
    table = [line for line in on_spark.stdout.splitlines() if line.startswith("acks1-claimed")]
    assert table == [line for line in on_pool.stdout.splitlines()
                     if line.startswith("acks1-claimed")]  # fmt: skip
    assert table[0].split() == ["acks1-claimed-safe", "safe", "8", "0", "8", "8"]  # SAFE 0, LOST 8
