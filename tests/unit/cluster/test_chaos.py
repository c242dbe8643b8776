"""The parts of the real-process runner (``cluster.chaos``) that need no process: which faults
it refuses and why (before anything starts), how a fault's target resolves from what the
brokers report, the brokers' settings, and reading a replica's log from its segment files."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from pathlib import Path

import pytest

from kafkasim.cluster import chaos
from kafkasim.cluster.chaos import ClusterView, resolve
from kafkasim.faults.history import ReplicaSample
from kafkasim.faults.runner import UnsupportedFaultError
from kafkasim.faults.scenario import ACTIONS, Fault, catalog, find, load
from kafkasim.storage import file_names
from kafkasim.storage.records.batch import RecordBatchBuilder, set_base_offset

RUNNABLE = {"leader-crash", "follower-pause", "controller-crash", "rolling-restart", "kip101-case1"}


def test_every_action_is_either_injected_or_refused_with_a_reason() -> None:
    assert chaos.INJECTABLE.isdisjoint(chaos.NOT_INJECTABLE)
    assert chaos.INJECTABLE | set(chaos.NOT_INJECTABLE) == set(ACTIONS)
    assert all(reason and "\n" not in reason for reason in chaos.NOT_INJECTABLE.values())


@pytest.mark.parametrize("name", sorted(catalog()))
def test_the_catalog_runs_or_is_refused_naming_exactly_its_faults(name: str) -> None:
    chosen = load(find(name))
    refused = {
        f.action if f.action in chaos.NOT_INJECTABLE else "crash with lose_unflushed"
        for f in chosen.faults
        if f.action in chaos.NOT_INJECTABLE or f.params.get("lose_unflushed")
    }
    assert (name in RUNNABLE) == (not refused)
    if not refused:
        chaos.check_supported(chosen)
        return
    with pytest.raises(UnsupportedFaultError) as caught:
        chaos.check_supported(chosen)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"scenario {name}: local processes")
    named = {clause.split(" (faults[")[0] for clause in chaos.unsupported_faults(chosen)}
    assert named == refused


def test_the_refusal_lists_each_kind_once_with_the_indexes_of_its_faults() -> None:
    base = load(find("leader-crash"))
    faults = (
        Fault(1.0, "isolate", "broker:1", 1.0),
        Fault(2.0, "crash", "broker:2", 1.0, {"lose_unflushed": False}),
        Fault(3.0, "crash", "broker:3", 1.0, {"lose_unflushed": True}),
        Fault(4.0, "isolate", "broker:2", 1.0),
        Fault(5.0, "clock_jump", "broker:1", params={"seconds": 60.0}),
    )
    clauses = chaos.unsupported_faults(replace(base, faults=faults))
    assert [c.split(":", 1)[0] for c in clauses] == [
        "isolate (faults[0], faults[3])",
        "crash with lose_unflushed (faults[2])",
        "clock_jump (faults[4])",
    ]
    assert "power cut" in clauses[1]


def test_run_refuses_before_starting_anything(tmp_path: Path) -> None:
    isolating = replace(load(find("leader-crash")), faults=(Fault(1.0, "split", "broker:1", 1.0),))
    with pytest.raises(UnsupportedFaultError, match=r"split \(faults\[0\]\)"):
        chaos.run(isolating, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "broker-1").mkdir()
    with pytest.raises(chaos.ChaosError, match="not empty"):
        chaos.run(load(find("leader-crash")), tmp_path / "used")


def test_brokers_get_the_scenarios_settings_over_the_runners_defaults() -> None:
    chosen = load(find("follower-pause"))
    props = chaos.broker_props(chosen)
    assert props["unclean.leader.election.enable"] is False
    assert props["auto.create.topics.enable"] is False
    assert props["group.initial.rebalance.delay.ms"] == 0
    assert props["zookeeper.session.timeout.ms"] == 18000
    assert props["replica.lag.time.max.ms"] == 5000
    unclean = load(find("unsafe-unclean-election"))
    assert chaos.broker_props(unclean)["unclean.leader.election.enable"] is True


# -- target resolution ---------------------------------------------------------------------------


def replica(
    broker: int,
    leader: int,
    epoch: int,
    isr: tuple[int, ...] = (1, 2, 3),
    *,
    topic: str = "events",
    partition: int = 0,
) -> ReplicaSample:
    return ReplicaSample(
        time_ms=0,
        broker=broker,
        topic=topic,
        partition=partition,
        is_leader=broker == leader,
        leader=leader,
        leader_epoch=epoch,
        high_watermark=10,
        log_end_offset=10,
        isr=isr,
        replicas=(1, 2, 3),
    )


EVERYONE_ON_2 = (replica(1, 2, 4), replica(2, 2, 4), replica(3, 2, 4))


@pytest.mark.parametrize(
    ("action", "target", "view", "expected"),
    [
        ("crash", "leader:events-0", ClusterView((1, 2, 3), replicas=EVERYONE_ON_2), [2]),
        # A deposed leader that has not heard of the new epoch still says it leads.
        (
            "crash",
            "leader:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 1, 3), replica(2, 2, 4))),
            [2],
        ),
        # The leader is paused (it does not answer): its followers name it.
        (
            "crash",
            "leader:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 3, 5), replica(2, 3, 5))),
            [3],
        ),
        # The named leader is dead (its followers have not heard yet): nothing to do.
        (
            "crash",
            "leader:events-0",
            ClusterView((1, 3), (2,), replicas=(replica(1, 2, 4), replica(3, 2, 4))),
            [],
        ),
        ("crash", "leader:events-1", ClusterView((1, 2, 3), replicas=EVERYONE_ON_2), []),
        # A follower: an in-sync one when there is one.
        (
            "pause",
            "follower:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 2, 4, (2, 3)), replica(2, 2, 4, (2, 3)))),
            [3],
        ),
        (
            "pause",
            "follower:events-0",
            ClusterView((1, 2), (3,), replicas=(replica(2, 2, 4, (2,)),)),
            [1],
        ),
        ("crash", "controller", ClusterView((1, 2, 3), controller=3), [3]),
        ("crash", "controller", ClusterView((1, 2), (3,), controller=3), []),
        ("crash", "controller", ClusterView((1, 2, 3)), []),
        ("crash", "broker:2", ClusterView((1, 3), (2,)), [2]),
        ("pause", "all", ClusterView((3, 1), (2,)), [1, 3]),
        ("restart", "all", ClusterView((1,), (3, 2)), [2, 3]),
        ("restart", "", ClusterView((1, 2, 3)), []),
        ("rolling_restart", "", ClusterView((2, 1, 3)), [1, 2, 3]),
    ],
    ids=[
        "leader",
        "leader-highest-epoch",
        "leader-paused",
        "leader-dead",
        "leader-unknown-partition",
        "follower-in-sync",
        "follower-out-of-sync",
        "controller",
        "controller-down",
        "controller-none",
        "broker-n",
        "all-running",
        "restart-all-down",
        "restart-none-down",
        "rolling-every-broker",
    ],
)
def test_a_target_resolves_from_what_the_brokers_report(
    action: str, target: str, view: ClusterView, expected: list[int]
) -> None:
    assert resolve(Fault(1.0, action, target, 1.0), view, random.Random(1)) == expected


def test_a_random_target_is_a_running_broker_drawn_from_the_seeded_rng() -> None:
    view = ClusterView((1, 2, 4), (3,))
    draws = [resolve(Fault(1.0, "crash", "random"), view, random.Random(7)) for _ in range(2)]
    assert draws[0] == draws[1] and draws[0][0] in (1, 2, 4)
    rng = random.Random(3)
    seen = {resolve(Fault(1.0, "pause", "random", 1.0), view, rng)[0] for _ in range(60)}
    assert seen == {1, 2, 4}
    assert resolve(Fault(1.0, "crash", "random"), ClusterView(()), rng) == []


# -- a replica's log on disk ---------------------------------------------------------------------


def write_segment(directory: Path, base_offset: int, batches: list[list[str]]) -> Path:
    data = bytearray()
    offset = base_offset
    for values in batches:
        builder = RecordBatchBuilder()
        for value in values:
            builder.append(0, None, value.encode())
        batch = bytearray(builder.build())
        set_base_offset(batch, 0, offset)
        offset += len(values)
        data += batch
    path = file_names.log_file(directory, base_offset)
    path.write_bytes(bytes(data))
    return path


def test_a_replica_log_is_read_segment_by_segment_in_offset_order(tmp_path: Path) -> None:
    write_segment(tmp_path, 3, [["d"], ["e", "f"]])  # written first, read second
    write_segment(tmp_path, 0, [["a", "b"], ["c"]])
    (tmp_path / "00000000000000000000.index").write_bytes(b"\0" * 16)
    (tmp_path / "00000000000000000099.log.deleted").write_bytes(b"junk")
    entries, problem = chaos.read_replica_log(tmp_path)
    assert problem is None
    assert entries == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e"), (5, "f")]


def test_reading_stops_at_a_batch_whose_crc_does_not_match(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 0, [["a"], ["b"], ["c"]])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last record's value: only the CRC can tell
    path.write_bytes(bytes(data))
    entries, problem = chaos.read_replica_log(tmp_path)
    assert entries == [(0, "a"), (1, "b")]
    assert problem is not None and str(path) in problem and "CRC" in problem


def test_a_zero_filled_tail_ends_a_segment_quietly(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 0, [["a", "b"]])
    path.write_bytes(path.read_bytes() + b"\0" * 512)  # a preallocated segment's unused end
    assert chaos.read_replica_log(tmp_path) == ([(0, "a"), (1, "b")], None)


# -- the schedule --------------------------------------------------------------------------------


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
    state = chaos._Run(chosen, tmp_path, None)
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
