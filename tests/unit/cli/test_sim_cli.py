"""``kafkasim sim`` as a user runs it: list, run (with history and report), sweep, and the
replay of a run from its seed in fresh processes under different hash seeds."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.cli_run import kafkasim as run_kafkasim
from tests.sweep_scenarios import lossy_claiming_safe, short, write


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
    out = kafkasim("sim", "sweep", "leader-partition", "--seeds", "1..2", "--jobs", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "2 seeds in 2 chunks of up to 1 on a local pool of 1 process" in lines
    assert "  leader-partition seeds 1..1 done (1/2, " in out.stdout
    assert ["leader-partition", "safe", "2", "2", "0"] in [line.split() for line in lines]
    assert "no failing seed" in out.stdout


def test_a_resumed_sweep_runs_only_the_seeds_its_state_lacks_and_sums_up_the_same(
    tmp_path: Path,
) -> None:
    """A sweep of 1..3 in one go, and the same sweep stopped after 1..2 (a torn line at the
    end of its state, as a crash while writing leaves) then resumed: the resumed command runs
    seed 3 only and prints the same table; the HTML summary says the same."""
    scenarios = [str(p) for p in write(tmp_path, short("leader-crash"), lossy_claiming_safe())]
    sweep = ["sim", "sweep", *scenarios, "--no-shrink", "--jobs", "2"]
    whole = kafkasim(*sweep, "--seeds", "1..3")
    assert whole.returncode == 1, whole.stdout + whole.stderr  # every lossy seed fails
    state = tmp_path / "state.jsonl"
    first = kafkasim(*sweep, "--seeds", "1..2", "--resume", str(state))
    assert first.returncode == 1, first.stdout + first.stderr
    with state.open("a") as f:
        f.write('{"scenario": "short-leader-crash", "fingerp')
    page = tmp_path / "summary.html"
    resumed = kafkasim(*sweep, "--seeds", "1..3", "--resume", str(state), "--summary", str(page))
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert f"resuming: 4 seeds done in {state}, 2 to run" in resumed.stdout
    done = re.findall(r"^  (\S+) seeds (\d+)\.\.(\d+) done", resumed.stdout, re.MULTILINE)
    assert sorted(done) == [("acks1-claimed-safe", "3", "3"), ("short-leader-crash", "3", "3")]

    def table(out: str) -> list[str]:
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("scenario "))
        return lines[start : start + 4]

    assert table(resumed.stdout) == table(whole.stdout)
    assert table(whole.stdout)[1].split() == ["short-leader-crash", "safe", "3", "3", "0", "0"]
    assert "failing seeds of acks1-claimed-safe: 1, 2, 3" in resumed.stdout
    assert "6 seeds (2 run, 4 resumed from the state file)" in resumed.stdout
    html = page.read_text()
    assert '<tr class="bad"><td>acks1-claimed-safe</td><td>safe</td><td>3</td>' in html
    # One-seed chunks (4 seeds on 2 slots), then 2: the torn line was cut off, not kept.
    records = [json.loads(line) for line in state.read_text().splitlines()]
    assert len(records) == 6


def test_sweep_input_errors_give_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, message in (
        (["no-such-scenario"], "no-such-scenario: no such scenario in the catalog"),
        (["leader-crash", "--seeds", "5..1"], "--seeds 5..1: the last seed is below the first"),
        (["leader-crash", "--seeds", "x"], "--seeds expects FIRST..LAST, got 'x'"),
        (["leader-crash", "--spark", "foo://m"], "--spark 'foo://m': not a Spark master URL"),
        (["leader-crash", "--jobs", "0"], "--jobs 0: at least one process"),
        (["all", "leader-crash"], "give scenarios or all (--all), not both"),
    ):
        out = kafkasim("sim", "sweep", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith("kafkasim sim: error: ") and message in out.stderr


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
