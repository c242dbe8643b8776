"""``kafkasim sim`` as a user runs it: list, run (with history and report), sweep, and the
replay of a run from its seed in fresh processes under different hash seeds."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.cli_run import kafkasim as run_kafkasim


def kafkasim(*args: str, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    return run_kafkasim(*args, env={"PYTHONHASHSEED": hash_seed}, timeout=600)


def test_list_names_every_catalog_scenario_with_its_expectation() -> None:
    out = kafkasim("sim", "list")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}
    assert rows["leader-crash"] == "safe"
    assert rows["unsafe-acks1-leader-crash"] == "may-lose"


def test_run_shows_progress_and_a_verdict_and_replays_byte_for_byte(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    report = tmp_path / "r.html"
    out = kafkasim(
        "sim", "run", "leader-crash", "--seed", "3", "--history", str(first),
        "--report", str(report), hash_seed="1",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "scenario leader-crash (expect: safe), seed 3"
    assert any("crash leader:events-0" in line for line in lines)
    assert any(line.startswith("VERDICT: SAFE") for line in lines)
    assert "simulated" in lines[-3]
    html = report.read_text()
    assert "<svg" in html and "VERDICT: SAFE" in html and "crash leader:events-0" in html
    again = kafkasim("sim", "run", "leader-crash", "--seed", "3", "--history", str(second),
                     hash_seed="2")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert first.read_bytes() == second.read_bytes()
    checked = kafkasim("check", str(first))
    assert checked.returncode == 0 and checked.stdout.startswith("VERDICT: SAFE"), checked.stdout


def test_an_unsafe_scenario_reports_its_loss_and_still_meets_its_expectation() -> None:
    out = kafkasim("sim", "run", "unsafe-acks1-leader-crash", "--seed", "1")
    assert out.returncode == 0, out.stderr
    assert "VERDICT: DATA LOST" in out.stdout


def test_sweep_runs_each_seed_with_a_random_schedule() -> None:
    out = kafkasim("sim", "sweep", "leader-partition", "--seeds", "1..2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "  seed 1: ok" in out.stdout and "  seed 2: ok" in out.stdout
    assert "no failing seed" in out.stdout


def test_bad_input_gives_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nexpect = "maybe"\n')
    for args, message in (
        (["sim", "run", "no-such-scenario"], "no-such-scenario"),
        (["sim", "run", str(bad)], "cluster: missing (required)"),
        (["sim", "sweep", "leader-crash", "--seeds", "5..1"], "below the first"),
    ):
        out = kafkasim(*args)
        assert out.returncode != 0
        assert out.stderr.count("\n") == 1, out.stderr
        assert message in out.stderr


def test_chaos_run_on_the_sim_backend_is_the_same_run_as_sim_run(tmp_path: Path) -> None:
    sim, chaos = tmp_path / "sim.jsonl", tmp_path / "chaos.jsonl"
    one = kafkasim("sim", "run", "follower-pause", "--seed", "4", "--history", str(sim))
    assert one.returncode == 0, one.stdout + one.stderr
    other = kafkasim(
        "chaos", "run", "follower-pause", "--backend", "sim", "--seed", "4",
        "--history", str(chaos),
    )  # fmt: skip
    assert other.returncode == 0, other.stdout + other.stderr
    assert other.stdout.splitlines()[0] == "scenario follower-pause (expect: safe), seed 4"
    assert sim.read_bytes() == chaos.read_bytes()


def test_a_seed_is_refused_for_a_backend_that_cannot_replay_one() -> None:
    out = kafkasim("chaos", "run", "leader-crash", "--backend", "local", "--seed", "4")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "kafkasim chaos: error: --seed is for --backend sim: a local processes run is not "
        "replayable"
    )


def test_console_times_count_from_the_workload_s_start_and_heals_end_their_window(
    tmp_path: Path,
) -> None:
    """One origin: what comes before the workload is "setup"; a fault is shown at the start
    its history records and healed at the end it records (to the display's 0.1 s)."""
    history = tmp_path / "h.jsonl"
    out = kafkasim(
        "sim", "run", "leader-crash", "--random-faults", "--seed", "7", "--history", str(history)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].startswith("  setup    starting ZooKeeper")
    started = next(line for line in lines if "workload started" in line)
    assert started.startswith("    0.0 s  ") and "as in the history and the report" in started
    faults = [
        record
        for record in map(json.loads, history.read_text().splitlines())
        if record.get("kind") == "fault" and record["end_ms"] is not None
    ]
    assert faults
    for fault in faults:
        label = f"{fault['action']} {fault['target']}"
        shown = next(line for line in lines if f"  {label} for " in line)
        assert abs(float(shown.split()[0]) - fault["start_ms"] / 1000) <= 0.05, shown
        healed = next(line for line in lines if line.endswith(f"healed: {label}"))
        assert abs(float(healed.split()[0]) - fault["end_ms"] / 1000) <= 0.1, (healed, fault)


def test_an_unclean_election_s_verdict_explains_its_divergent_reads_first() -> None:
    out = kafkasim("sim", "run", "unsafe-unclean-election", "--seed", "1")
    lines = out.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("VERDICT: DATA LOST"))
    divergent = re.search(r"(\d+) divergent reads", lines[index])
    assert divergent is not None, lines[index]
    why = lines[index + 1]
    assert why.startswith(f"  why: {divergent.group(1)} records were read at offsets where ")
    assert "'read back' counts them" in why and "the reordered" in why
