"""Target resolution (``faults.resolve``): every kind of target against hand-made views of a
cluster, the way every backend resolves it."""

from __future__ import annotations

import random

import pytest

from kafkasim.faults.history import ReplicaSample
from kafkasim.faults.resolve import ClusterView, resolve, view_needs
from kafkasim.faults.scenario import Fault, TargetKind


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
        # A paused follower fell out of the ISR: the one still in sync is chosen.
        (
            "pause",
            "follower:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 1, 4, (1, 3)), replica(3, 1, 4, (1, 3)))),
            [3],
        ),
        # No follower in sync: any running follower.
        (
            "pause",
            "follower:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 1, 4, (1,)),)),
            [2],
        ),
        # The deposed leader (epoch 3) is not a follower candidate's leader: the new one is.
        (
            "pause",
            "follower:events-0",
            ClusterView((1, 2, 3), replicas=(replica(1, 1, 3), replica(2, 2, 4, (2, 3)))),
            [3],
        ),
        # A down broker is never a follower, whatever the ISR says.
        (
            "pause",
            "follower:events-0",
            ClusterView(
                (1, 3), (2,), replicas=(replica(1, 1, 4, (1, 2)), replica(3, 1, 4, (1, 2)))
            ),
            [3],
        ),
        # The controller moved: the view holds where it is now.
        ("crash", "controller", ClusterView((1, 2, 3), controller=1), [1]),
        ("crash", "random", ClusterView((), (1, 2, 3)), []),
        ("slow_network", "", ClusterView((3, 1)), [1, 3]),
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
        "follower-paused-out-of-isr",
        "follower-none-in-sync",
        "follower-of-the-new-leader",
        "follower-not-down",
        "controller-moved",
        "random-none-running",
        "no-target-every-running",
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


def test_the_in_sync_preference_holds_for_every_draw() -> None:
    """The issue's case: broker 2 paused and out of the ISR is never picked while 3 is in it."""
    view = ClusterView((1, 2, 3), replicas=(replica(1, 1, 7, (1, 3)), replica(3, 1, 7, (1, 3))))
    rng = random.Random(0)
    fault = Fault(5.0, "pause", "follower:events-0", 5.0)
    assert {resolve(fault, view, rng)[0] for _ in range(50)} == {3}


def test_a_view_holds_what_its_target_needs() -> None:
    assert view_needs(Fault(1.0, "rolling_restart", params={"interval_s": 1.0})) is TargetKind.ALL
    assert view_needs(Fault(1.0, "crash", "controller")) is TargetKind.CONTROLLER
    assert view_needs(Fault(1.0, "crash", "leader:events-0")) is TargetKind.LEADER
    assert view_needs(Fault(1.0, "pause", "follower:events-0", 1.0)) is TargetKind.FOLLOWER
