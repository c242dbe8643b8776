"""A sweep's plan, resume state and summary, without running a simulation: seeds cut into
chunks (done seeds skipped), the input a sweep refuses, the state file's crash story, the
Spark master URLs accepted, and the text and HTML summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kafkasim.faults.reading import catalog, load
from kafkasim.faults.sweep import (
    Chunk,
    ChunkResult,
    SeedResult,
    Shrunk,
    SweepInputError,
    SweepPlan,
    chunk_size_for,
    first_failures,
    parse_seeds,
    plan_chunks,
    plan_sweep,
)
from kafkasim.faults.sweep_spark import check_master
from kafkasim.faults.sweep_state import SweepState
from kafkasim.faults.sweep_summary import SweepSummary, lines, render_html


def _plan(*names: str, seeds: range = range(1, 11)) -> SweepPlan:
    return SweepPlan({n: load(catalog()[n]) for n in names}, seeds)


def _result(name: str, seed: int, verdict: str = "SAFE", failed: bool = False) -> SeedResult:
    return SeedResult(name, seed, verdict, f"VERDICT: {verdict} — seed {seed}", failed)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1..3", range(1, 4)), ("7", range(7, 8)), ("0..0", range(0, 1))],
)
def test_seed_ranges_are_inclusive(text: str, expected: range) -> None:
    assert parse_seeds(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5..1", "the last seed is below the first"),
        ("a..b", "--seeds expects FIRST..LAST, got 'a..b'"),
        ("1..", "--seeds expects FIRST..LAST"),
        ("-3..2", "seeds are not negative"),
    ],
)
def test_a_bad_seed_range_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(SweepInputError, match=re.escape(message)):
        parse_seeds(text)


def test_chunks_cover_every_seed_not_done_in_runs_of_at_most_the_chunk_size() -> None:
    plan = _plan("leader-crash", "follower-pause")
    done = {("leader-crash", 4): None, ("leader-crash", 5): None, ("follower-pause", 10): None}
    chunks = plan_chunks(plan, done, 3)
    assert chunks == [
        Chunk("leader-crash", 1, 3),
        Chunk("leader-crash", 6, 8),
        Chunk("leader-crash", 9, 10),
        Chunk("follower-pause", 1, 3),
        Chunk("follower-pause", 4, 6),
        Chunk("follower-pause", 7, 9),
    ]
    assert plan_chunks(plan, {}, 1) == [
        Chunk(n, s, s) for n in ("leader-crash", "follower-pause") for s in range(1, 11)
    ]


def test_chunk_size_aims_at_a_few_chunks_per_slot_and_is_capped() -> None:
    assert chunk_size_for(30, 2) == 4  # 8 chunks for 2 slots
    assert chunk_size_for(3, 4) == 1
    assert chunk_size_for(100_000, 2) == 100  # 100k seeds are 1000 tasks, not 100k


def test_all_sweeps_the_catalog_and_names_must_be_distinct() -> None:
    assert list(plan_sweep(["all"], "1..2").scenarios) == list(catalog())
    assert list(plan_sweep([], "1..2", every=True).scenarios) == list(catalog())
    with pytest.raises(SweepInputError, match="not both"):
        plan_sweep(["all", "leader-crash"], "1..2")
    with pytest.raises(SweepInputError, match="a second scenario named 'leader-crash'"):
        plan_sweep(["leader-crash", str(catalog()["leader-crash"])], "1..2")
    with pytest.raises(SweepInputError, match="name a scenario"):
        plan_sweep([], "1..2")


def test_the_first_failure_of_each_scenario_is_its_lowest_failing_seed() -> None:
    results = [
        _result("a", 5, "DATA LOST", failed=True),
        _result("a", 2, "INVARIANT VIOLATED", failed=True),
        _result("b", 1),
        _result("c", 3, "DATA LOST", failed=False),  # a may-lose scenario's expected loss
    ]
    assert [(r.scenario, r.seed) for r in first_failures(results)] == [("a", 2)]


@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "local[4, 2]", "local-cluster[2,1,1024]",
     "spark://host:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://api:6443"],
)  # fmt: skip
def test_spark_master_urls_spark_takes_are_accepted(master: str) -> None:
    assert check_master(master) == master


@pytest.mark.parametrize("master", ["foo", "local[0]", "local[x]", "spark://host", "mesos://m:1"])
def test_a_bad_spark_master_is_refused_before_spark_starts(master: str) -> None:
    with pytest.raises(SweepInputError, match=re.escape(f"--spark {master!r}: not a Spark")):
        check_master(master)


# -- the resume state --------------------------------------------------------------------------


def _finished(name: str, first: int, last: int) -> ChunkResult:
    results = tuple(_result(name, s, "DATA LOST" if s == 2 else "SAFE", s == 2) for s in
                    range(first, last + 1))  # fmt: skip
    return ChunkResult(Chunk(name, first, last), results, 1.5)


def test_the_state_keeps_every_finished_chunk_across_opens(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    state = SweepState(path, {"a": "f1"})
    state.append(_finished("a", 1, 3))
    state.append(_finished("a", 4, 4))
    again = SweepState(path, {"a": "f1"})
    assert again.done == state.done
    assert sorted(again.done) == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert again.done[("a", 2)] == _result("a", 2, "DATA LOST", True)


def test_a_torn_last_line_is_cut_off_and_its_seeds_run_again(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    SweepState(path, {"a": "f1"}).append(_finished("a", 1, 2))
    whole = path.read_bytes()
    line = json.dumps({"scenario": "a", "fingerprint": "f1", "first": 3, "last": 4})
    path.write_bytes(whole + line[:30].encode())  # a crash in the middle of a write
    state = SweepState(path, {"a": "f1"})
    assert sorted(state.done) == [("a", 1), ("a", 2)]
    assert path.read_bytes() == whole  # cut before anything is appended after it
    state.append(_finished("a", 3, 4))
    assert sorted(SweepState(path, {"a": "f1"}).done)[-1] == ("a", 4)


def test_a_changed_scenario_or_a_garbled_line_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.jsonl"
    SweepState(path, {"a": "f1", "b": "f2"}).append(_finished("a", 1, 2))
    with pytest.raises(SweepInputError, match=r"line 1: scenario a has changed"):
        SweepState(path, {"a": "f9"})
    assert SweepState(path, {"b": "f2"}).done == {}  # another scenario's lines are kept
    with path.open("a") as f:
        f.write("not json\n")
    with pytest.raises(SweepInputError, match=r"state.jsonl line 2: not a sweep state record"):
        SweepState(path, {"a": "f1"})


def test_a_scenario_s_fingerprint_follows_its_contents() -> None:
    plan = _plan("leader-crash", "follower-pause")
    prints = plan.fingerprints()
    assert prints == plan.fingerprints()
    assert prints["leader-crash"] != prints["follower-pause"]


# -- the summary -------------------------------------------------------------------------------


def _summary(**overrides: object) -> SweepSummary:
    results = [_result("a<b>", s, "DATA LOST" if s == 2 else "SAFE", s == 2) for s in (1, 2, 3)]
    results += [_result("lossy", s, "DATA LOST") for s in (1, 2, 3)]
    fields: dict[str, object] = {
        "engine": "a local pool of 2 processes",
        "scenarios": ["a<b>", "lossy"],
        "expectations": ["safe", "may-lose"],
        "seeds": range(1, 4),
        "results": results,
        "resumed": 2,
        "wall_s": 2.0,
        "shrunk": (Shrunk("a<b>", 2, 3, 1, "VERDICT: DATA LOST — x", 'name = "a<b>"\n'),),
    }
    fields.update(overrides)
    return SweepSummary(**fields)  # type: ignore[arg-type]


def test_the_text_summary_counts_seeds_per_scenario_and_verdict_and_the_rate() -> None:
    text = lines(_summary())
    assert text[0].split() == ["scenario", "expect", "seeds", "SAFE", "DATA", "LOST", "failing"]
    assert text[1].split() == ["a<b>", "safe", "3", "2", "1", "1"]
    assert text[2].split() == ["lossy", "may-lose", "3", "0", "3", "0"]
    assert text[3] == "failing seeds of a<b>: 2"
    assert text[4] == (
        "6 seeds (4 run, 2 resumed from the state file) on a local pool of 2 processes: "
        "4 in 2.0 s of wall time, 2.00 seeds per second"
    )
    assert not _summary().ok
    assert _summary(results=[_result("a<b>", 1)], resumed=0).ok


def test_the_html_summary_is_one_self_contained_page_with_each_shrunk_failure() -> None:
    page = render_html(_summary())
    assert page.startswith("<!DOCTYPE html>")
    assert "<td>a&lt;b&gt;</td>" in page and "a<b>" not in page  # escaped
    assert '<tr class="bad"><td>a&lt;b&gt;</td><td>safe</td><td>3</td>' in page
    assert "<h3>a&lt;b&gt;, seed 2</h3>" in page
    assert "<pre>name = &quot;a&lt;b&gt;&quot;\n</pre>" in page
    assert "shrunk from 3 to 1 faults" in page and "kafkasim sim run FILE --seed 2" in page
    assert not re.search(r"<script|<link|src=|href=|https?://", page)
