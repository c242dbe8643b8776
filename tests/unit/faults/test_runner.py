"""The schedule driver (``faults.runner``): every action has a way to be applied, the schedule
keeps time, and a broker whose start-up fails is down until the next heal (on the simulation)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from kafkasim.faults import checker, runner
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.reading import find, load, parse
from kafkasim.faults.scenario import Fault
from kafkasim.sim.backend import SIM, SimBackend


def test_every_action_has_a_way_to_be_applied() -> None:
    assert set(runner.APPLY) == set(ACTIONS)


def test_a_fault_due_during_a_long_injection_fires_right_after_it(tmp_path: Path) -> None:
    """A rolling restart takes brokers * interval_s; a fault that fell due meanwhile fires as
    soon as it ends, not after a sleep computed from the time before it began."""
    base = load(find("leader-crash"))
    chosen = replace(
        base,
        workload=replace(base.workload, duration_s=2.0),
        faults=(
            Fault(0.0, "rolling_restart", params={"interval_s": 1.0 / 3}),
            Fault(0.5, "crash", "broker:2"),
        ),
    )
    state = runner._Run(chosen, SimBackend(chosen, 1, tmp_path), 1, None)
    fired: list[tuple[str, float]] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        state.t0 = loop.time()

        async def inject(fault: Fault) -> None:
            fired.append((fault.action, loop.time() - state.t0))
            if fault.action == "rolling_restart":
                await asyncio.sleep(1.0)  # three brokers, 1/3 s apart

        state._inject = inject  # type: ignore[method-assign]
        await state._run_faults(chosen.workload.duration_s)
        return loop.time() - state.t0

    ended_s = asyncio.run(main())
    assert [action for action, _ in fired] == ["rolling_restart", "crash"]
    assert 1.0 <= fired[1][1] < 1.25, fired  # not 1.5: 0.5 s slept from the stale start
    assert 2.0 <= ended_s < 2.25


START_FAILS = """
name = "start-fails"
description = "A broker restarted while its old registration lingers loses ZooKeeper."
expect = "safe"
[cluster]
brokers = 3
[[cluster.topics]]
name = "events"
[workload]
duration_s = 12.0
settle_s = 8.0
[[workload.producers]]
name = "p1"
topic = "events"
rate = 50.0
[[faults]]
at_s = 2.0
action = "crash"
target = "broker:1"
duration_s = 1.0
[[faults]]
at_s = 4.0
action = "isolate_zk"
target = "broker:1"
duration_s = 3.0
"""


def test_a_broker_whose_start_up_fails_is_down_until_the_next_heal(tmp_path: Path) -> None:
    """The kip101-case2 sweep's shrink: a restart still waiting out the old registration lost
    ZooKeeper, the heal task died unretrieved and the half-started broker stayed in the
    cluster until the final read timed out (an empty error). Now the start-up failure stops
    the broker, as Kafka's does, and the end of the schedule starts it again."""
    chosen = parse(START_FAILS, source="start-fails.toml")
    events: list[str] = []
    history = runner.run(chosen, SIM, tmp_path, seed=1, on_event=events.append)
    assert any("broker 1 did not start" in line for line in events), events
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}


def test_a_slow_injection_holds_back_no_heal(tmp_path: Path) -> None:
    """The follower-one-way sweep's seed 10 (short profile): the leader's outgoing messages
    are cut, then it gets a controlled shutdown, whose ControlledShutdown request the cut
    swallows (30 s to time out). The heal of the cut still comes at its window's end, while the
    shutdown is under way, so that the shutdown's next attempt gets through; the producers stop
    at the workload's end. Injected inline, the heal and the workload's end both waited for
    every attempt of the shutdown to time out (the producers stopped at 123 s)."""
    base = load(find("follower-one-way"))
    chosen = replace(
        base,
        workload=replace(base.workload, duration_s=6.0, settle_s=3.0),
        faults=(
            Fault(2.756, "partition_one_way", "leader:events-0", 1.188, {"inbound": False}),
            Fault(3.676, "controlled_shutdown", "leader:events-0", 1.86),
        ),
        seed_faults=None,
    )
    events: list[str] = []
    history = runner.run(chosen, SIM, tmp_path, seed=10, on_event=events.append)

    def at_s(text: str) -> float:
        line = next(line for line in events if text in line)
        return float(line.split(" s ", 1)[0])

    assert at_s("healed: partition_one_way") == 3.9, events  # due at 2.756 + 1.188
    assert at_s("controlled_shutdown leader:events-0") == 3.7
    assert at_s("producers stopped") == 6.0, events
    # The shutdown ends after its first attempt's timeout, its second one answered: not a
    # shutdown that gave up after every attempt timed out.
    assert at_s("healed: controlled_shutdown") < 3.676 + 30 + 1, events
    assert checker.check(history).ok
